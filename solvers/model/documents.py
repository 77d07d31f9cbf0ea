"""Reading documents from files and dispatching on their ``format`` field."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

from solvers.model.errors import FormatError
from solvers.model.graph import GRAPH_FORMAT, OpGraph, graph_from_document
from solvers.model.plan import PLAN_FORMAT, Plan, plan_from_document
from solvers.model.problem import PROBLEM_FORMAT
from solvers.model.topology import TOPOLOGY_FORMAT, Topology, topology_from_document

MAX_DOCUMENT_BYTES = 512 * 2**20
KNOWN_FORMATS = (GRAPH_FORMAT, TOPOLOGY_FORMAT, PLAN_FORMAT, PROBLEM_FORMAT)


def read_json(path: str | Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """Read a JSON file (optionally gzip-compressed), refusing files over ``max_bytes``."""
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


def parse_json(raw: bytes | str, where: str = "document", max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """Parse JSON text, naming the line and column of a syntax error."""
    if len(raw) > max_bytes:
        raise FormatError(f"{where}: the document is larger than the limit of {max_bytes} bytes", field="file")
    if not raw or not raw.strip():
        raise FormatError(f"{where}: the document is empty", field="file")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                          field="file") from None
    except UnicodeDecodeError:
        raise FormatError(f"{where}: not UTF-8 text", field="file") from None


def document_format(doc: Any) -> str:
    """The ``format`` of a document, checked against the known ones."""
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt not in KNOWN_FORMATS:
        raise FormatError(f"format: unknown document format {fmt!r}; expected one of {', '.join(KNOWN_FORMATS)}",
                          field="format")
    return str(fmt)


def parse_document(doc: Any) -> OpGraph | Topology | Plan | dict[str, Any]:
    """Validate a document of any known format (a problem spec is returned as a mapping)."""
    fmt = document_format(doc)
    if fmt == GRAPH_FORMAT:
        return graph_from_document(doc)
    if fmt == TOPOLOGY_FORMAT:
        return topology_from_document(doc)
    if fmt == PLAN_FORMAT:
        return plan_from_document(doc)
    return dict(doc)


def load_graph(path: str | Path) -> OpGraph:
    return graph_from_document(read_json(path))


def load_topology(path: str | Path) -> Topology:
    return topology_from_document(read_json(path))


def load_plan(path: str | Path) -> Plan:
    return plan_from_document(read_json(path))


def write_json(doc: Any, path: str | Path) -> None:
    """Write a document as indented JSON (gzip when the name ends in ``.gz``)."""
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
    path = Path(path)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
