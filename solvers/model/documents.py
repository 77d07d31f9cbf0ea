"""Reading documents from files and dispatching on their ``format`` field."""

from __future__ import annotations

import gzip
import io
import json
import re
from pathlib import Path
from typing import Any

import orjson

from solvers.model.errors import FormatError, MalformedJSON
from solvers.model.graph import GRAPH_FORMAT, OpGraph, graph_from_document
from solvers.model.plan import PLAN_FORMAT, Plan, plan_from_document
from solvers.model.problem import PROBLEM_FORMAT
from solvers.model.text import check_text
from solvers.model.topology import TOPOLOGY_FORMAT, Topology, topology_from_document

MAX_DOCUMENT_BYTES = 512 * 2**20
KNOWN_FORMATS = (GRAPH_FORMAT, TOPOLOGY_FORMAT, PLAN_FORMAT, PROBLEM_FORMAT)


def read_json(path: str | Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """Read a JSON file, plain or gzip-compressed, without validating it as a document.

    Parameters
    ----------
    path : str or Path
        The file; gzip data is recognised by its magic bytes, whatever the name.
    max_bytes : int, optional
        Files (or decompressed data) larger than this are refused (default 512 MiB).

    Returns
    -------
    document : Any
        The parsed JSON value.

    Raises
    ------
    FormatError
        The file cannot be read, is empty, too large, not UTF-8, or not JSON (the message
        names the line and column).

    Examples
    --------
    >>> from solvers import generate_topology, read_json, write_json
    >>> write_json(generate_topology("dgx1"), "dgx1.json.gz")
    >>> read_json("dgx1.json.gz")["format"]
    'placer.topology/v1'
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise FormatError(f"{path}: cannot read: {exc.strerror}", field="file", ref=str(path)) from None
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, path, max_bytes)
    return parse_json(raw, str(path), max_bytes)


def _gunzip(data: bytes, path: Path, max_bytes: int) -> bytes:
    """Decompress at most ``max_bytes + 1`` bytes, so a small file cannot expand without bound."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
            return fh.read(max_bytes + 1)
    except (OSError, EOFError) as exc:
        raise FormatError(f"{path}: invalid gzip data: {exc}", field="file", ref=str(path)) from None


def parse_json(raw: bytes | str, where: str = "document", max_bytes: int = MAX_DOCUMENT_BYTES,
               field: str = "file") -> Any:
    """Parse JSON text with a parser that bounds nesting (orjson: 1,024 levels).

    Syntax errors, text that is not UTF-8 and nesting beyond the bound are :class:`MalformedJSON`
    naming the line and column.  Numbers beyond a double and unpaired surrogates are kept for the
    loaders and :func:`~solvers.model.text.check_text` to name the field that holds them; NUL
    characters and unpaired surrogates in any string or key are refused here, naming the path.
    """
    if len(raw) > max_bytes:
        raise FormatError(f"{where}: the document is larger than the limit of {max_bytes} bytes", field=field)
    if not raw or not raw.strip():
        raise FormatError(f"{where}: the document is empty", field=field)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        doc = _parse_lenient(raw, where, field, exc)
        check_text(doc, where, field)
        return doc
    if _may_hold_nul(raw):
        check_text(doc, where, field)
    return doc


def _may_hold_nul(raw: bytes | str) -> bool:
    """Whether text that orjson parsed can hold a NUL character in a string or key.

    orjson refuses unpaired surrogates (escaped or, in a ``str``, literal) and raw control
    characters inside strings, so the only way its result holds text that
    :func:`~solvers.model.text.check_text` refuses is the escape ``\\u0000``.  Where that
    sequence does not occur, the walk over every string of the document (most of the time of
    loading a large graph) is skipped; where it does (even as the text of an escaped backslash),
    the walk runs and names the field.  (A text without any backslash, found by ``memchr``, is
    not searched further.)
    """
    if isinstance(raw, bytes):
        return b"\\" in raw and b"\\u0000" in raw
    return "\\" in raw and "\\u0000" in raw


_LENIENT = re.compile(r"surrogate|infinity|number", re.IGNORECASE)


def _big_int(text: str) -> int | float:
    """An integer literal; one too long for ``int`` (over 4,300 digits) becomes a float (infinite)."""
    return int(text) if len(text) <= 400 else float(text)


def _parse_lenient(raw: bytes | str, where: str, field: str, exc: orjson.JSONDecodeError) -> Any:
    """Parse again what orjson refused only for its values (a number beyond a double, an unpaired
    surrogate), so that the error names the field; anything else is malformed."""
    if "UTF-8" in exc.msg:
        raise MalformedJSON(f"{where}: not UTF-8 text", field=field) from None
    malformed = MalformedJSON(f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                              field=field)
    if not _LENIENT.search(exc.msg):
        raise malformed from None
    try:
        return json.loads(raw, parse_int=_big_int)
    except (ValueError, RecursionError):
        raise malformed from None


def document_format(doc: Any) -> str:
    """The ``format`` of a document, checked against the known ones."""
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt not in KNOWN_FORMATS:
        raise FormatError(f"format: unknown document format {fmt!r}; expected one of {', '.join(KNOWN_FORMATS)}",
                          field="format")
    return str(fmt)


def parse_document(doc: Any) -> OpGraph | Topology | Plan | dict[str, Any]:
    """Validate a document of any known format, dispatching on its ``format`` field.

    Parameters
    ----------
    doc : Any
        A parsed JSON document (e.g. from :func:`read_json`).

    Returns
    -------
    obj : OpGraph, Topology, Plan or dict
        The validated object; a ``placer.problem/v1`` spec is returned as a mapping (it names
        its graph and topology by digest).

    Raises
    ------
    FormatError
        ``format`` is missing or unknown.
    InvalidGraph, InvalidTopology, InvalidPlan
        The document breaks its format; the message names the node, edge or field at fault.

    Examples
    --------
    >>> from solvers import parse_document
    >>> doc = {"format": "placer.opgraph/v1", "nodes": [{"id": "a", "op": "matmul", "fwd_s": 0.001}]}
    >>> parse_document(doc).n_ops
    1
    >>> parse_document({"format": "placer.opgraph/v1", "nodes": [{"id": "a", "op": "matmul"}]})
    Traceback (most recent call last):
    ...
    solvers.model.errors.InvalidGraph: nodes[0].fwd_s: missing
    """
    fmt = document_format(doc)
    if fmt == GRAPH_FORMAT:
        return graph_from_document(doc)
    if fmt == TOPOLOGY_FORMAT:
        return topology_from_document(doc)
    if fmt == PLAN_FORMAT:
        return plan_from_document(doc)
    return dict(doc)


def load_graph(path: str | Path) -> OpGraph:
    """Read and validate a ``placer.opgraph/v1`` file (docs/formats.md).

    Parameters
    ----------
    path : str or Path
        A JSON file, plain or gzip-compressed.

    Returns
    -------
    graph : OpGraph
        The validated, immutable operator DAG.

    Raises
    ------
    FormatError
        The file cannot be read or is not JSON.
    InvalidGraph
        The document is not a valid graph (duplicate id, unknown edge end, cycle, bad number
        ...); the message names the node, edge or field.

    Examples
    --------
    >>> from solvers import generate_graph, load_graph, write_json
    >>> write_json(generate_graph("transformer", layers=2), "bert.json")
    >>> graph = load_graph("bert.json")
    >>> graph.n_ops, graph.nodes[0].id
    (31, 'embeddings.word_embeddings')
    """
    return graph_from_document(read_json(path))


def load_topology(path: str | Path) -> Topology:
    """Read and validate a ``placer.topology/v1`` file (docs/formats.md).

    Parameters
    ----------
    path : str or Path
        A JSON file, plain or gzip-compressed.

    Returns
    -------
    topology : Topology
        The validated, connected topology, with widest-path routes for pairs without a link.

    Raises
    ------
    FormatError
        The file cannot be read or is not JSON.
    InvalidTopology
        The document is not a valid topology (duplicate device, unknown link end, a device
        that cannot reach another ...); the message names the device, link or field.

    Examples
    --------
    >>> from solvers import generate_topology, load_topology, write_json
    >>> write_json(generate_topology("hierarchical", nodes=2, gpus_per_node=4), "topo.json")
    >>> topology = load_topology("topo.json")
    >>> topology.n_devices, topology.hosts
    (8, ['node0', 'node1'])
    """
    return topology_from_document(read_json(path))


def load_plan(path: str | Path) -> Plan:
    """Read and validate a ``placer.plan/v1`` file (docs/formats.md).

    The plan is checked on its own; :func:`~solvers.simulator.simulate` checks it against a
    problem (every op placed once, devices known, memory).

    Parameters
    ----------
    path : str or Path
        A JSON file, plain or gzip-compressed.

    Returns
    -------
    plan : Plan

    Raises
    ------
    FormatError
        The file cannot be read or is not JSON.
    InvalidPlan
        The document is not a valid plan; the message names the field.

    Examples
    --------
    >>> from solvers import Problem, generate_graph, generate_topology, load_plan, solve, write_json
    >>> problem = Problem(generate_graph("transformer", layers=2), generate_topology("dgx1"))
    >>> write_json(solve(problem, "even"), "plan.json")
    >>> load_plan("plan.json").solver
    'even'
    """
    return plan_from_document(read_json(path))


def write_json(doc: Any, path: str | Path) -> None:
    """Write a document as indented JSON (gzip-compressed when the name ends in ``.gz``).

    Parameters
    ----------
    doc : OpGraph, Topology, Plan or JSON value
        An object with a ``to_document()`` method is written as its document.
    path : str or Path
        The file to write (replaced if it exists).

    Returns
    -------
    None

    Raises
    ------
    ValueError
        The document holds NaN or an infinity (not JSON).
    OSError
        The file cannot be written.

    Examples
    --------
    >>> from solvers import generate_graph, load_graph, write_json
    >>> graph = generate_graph("cnn", blocks="1,1")
    >>> write_json(graph, "cnn.json.gz")
    >>> load_graph("cnn.json.gz").digest == graph.digest
    True
    """
    if hasattr(doc, "to_document"):
        doc = doc.to_document()
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
    path = Path(path)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
