"""Import a PipeDream profiler ``graph.txt`` (msr-fiddle/pipedream, ``profiler/*/profiles``).

One line per node, ``nodeK -- Description(...) -- forward_compute_time=F, backward_compute_time=B,
activation_size=A, parameter_size=P``, and TAB-indented edge lines ``\\tnodeI -- nodeJ``.  Times
are milliseconds per profiled mini-batch (-> seconds); ``activation_size`` is the node's output in
bytes (a ``[a; b; c]`` list for multi-output nodes), ``parameter_size`` bytes.  As PipeDream's own
optimizer does, ``Input*`` sources and ``__getitem__`` sinks are dropped (``keep_inputs=True``
keeps them).  An edge carries its producer's activation size; an edge into ``__getitem__(k)``
from a multi-output node carries the ``k``-th output only.
"""

from __future__ import annotations

import re

from solvers.model.errors import InvalidGraph
from solvers.model.graph import Edge, Node, OpGraph

_FIELDS = ("forward_compute_time", "backward_compute_time", "activation_size", "parameter_size")
_GETITEM = re.compile(r"__getitem__\((\d+)\)")


def default_batch_size(name: str) -> int:
    """PipeDream's profiling batch: 64 for the GNMT translation models, 128 for image models."""
    return 64 if "gnmt" in name.lower() else 128


def _number(text: str, line_no: int, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidGraph(f"graph.txt line {line_no}: {field} is not a number: {text!r}",
                           field=f"line {line_no}") from None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise InvalidGraph(f"graph.txt line {line_no}: {field} must be finite and >= 0, got {text!r}",
                           field=f"line {line_no}")
    return value


def _activations(text: str, line_no: int) -> list[float]:
    """``activation_size``: one number or a ``[a; b; c]`` list (one entry per output)."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        return [_number(part, line_no, "activation_size") for part in text[1:-1].split(";") if part.strip()]
    return [_number(text, line_no, "activation_size")]


def _parse_node(line: str, line_no: int) -> tuple[str, str, dict[str, str]]:
    parts = line.split(" -- ")
    if len(parts) != 3:
        raise InvalidGraph(f"graph.txt line {line_no}: expected 'id -- description -- metadata', got {line[:80]!r}",
                           field=f"line {line_no}")
    node_id, desc, meta = (p.strip() for p in parts)
    values: dict[str, str] = {}
    # split on ", key=" so that the bracketed list (which holds no commas) stays whole
    for item in re.split(r",\s*(?=\w+=)", meta):
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidGraph(f"graph.txt line {line_no}: malformed metadata {item!r}", field=f"line {line_no}")
        values[key.strip()] = value.strip()
    for key in _FIELDS:
        if key not in values:
            raise InvalidGraph(f"graph.txt line {line_no}: node {node_id!r} lacks {key}", field=f"line {line_no}",
                               ref=node_id)
    return node_id, desc, values


def _parse(text: str) -> tuple[dict[str, tuple[str, dict[str, str], int]], list[tuple[str, str, int]]]:
    """Nodes (id -> description, metadata, line) and edges (src, dst, line) in file order."""
    nodes: dict[str, tuple[str, dict[str, str], int]] = {}
    edges: list[tuple[str, str, int]] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if raw[0] in "\t ":
            src, sep, dst = raw.strip().partition(" -- ")
            if not sep or not src or not dst.strip():
                raise InvalidGraph(f"graph.txt line {line_no}: expected an edge 'src -- dst', got {raw.strip()!r}",
                                   field=f"line {line_no}")
            edges.append((src.strip(), dst.strip(), line_no))
            continue
        node_id, desc, values = _parse_node(raw, line_no)
        if node_id in nodes:
            raise InvalidGraph(f"graph.txt line {line_no}: duplicate node {node_id!r} (first on line "
                               f"{nodes[node_id][2]})", field=f"line {line_no}", ref=node_id)
        nodes[node_id] = (desc, values, line_no)
    if not nodes:
        raise InvalidGraph("graph.txt: no nodes", field="nodes")
    for src, dst, line_no in edges:
        for end in (src, dst):
            if end not in nodes:
                raise InvalidGraph(f"graph.txt line {line_no}: edge names unknown node {end!r}",
                                   field=f"line {line_no}", ref=end)
    return nodes, edges


def _dropped(nodes: dict[str, tuple[str, dict[str, str], int]], edges: list[tuple[str, str, int]]) -> set[str]:
    """``Input*`` sources and ``__getitem__`` sinks (one pass, as PipeDream's optimizer)."""
    has_in = {dst for _, dst, _ in edges}
    has_out = {src for src, _, _ in edges}
    return {n for n, (desc, _, _) in nodes.items()
            if (desc.startswith("Input") and n not in has_in) or (desc.startswith("__getitem__") and n not in has_out)}


def import_pipedream(text: str, name: str, *, keep_inputs: bool = False,
                     profiled_batch_size: int | None = None) -> OpGraph:
    """Parse a PipeDream ``graph.txt`` into an op graph (errors name the line number)."""
    nodes, edges = _parse(text)
    drop = set() if keep_inputs else _dropped(nodes, edges)
    outputs: dict[str, list[float]] = {}
    records: list[Node] = []
    for node_id, (desc, values, line_no) in nodes.items():
        outputs[node_id] = acts = _activations(values["activation_size"], line_no)
        if node_id in drop:
            continue
        records.append(Node(
            node_id, desc.split("(")[0].strip() or desc, _number(values["forward_compute_time"], line_no,
                                                                 "forward_compute_time") / 1e3,
            _number(values["backward_compute_time"], line_no, "backward_compute_time") / 1e3,
            _number(values["parameter_size"], line_no, "parameter_size"), sum(acts), attrs={"module": desc},
        ))
    out_edges: list[Edge] = []
    for src, dst, _ in edges:
        if src in drop or dst in drop:
            continue
        acts = outputs[src]
        match = _GETITEM.match(nodes[dst][0])
        size = acts[int(match.group(1))] if match and len(acts) > 1 and int(match.group(1)) < len(acts) else sum(acts)
        out_edges.append(Edge(src, dst, size))
    batch = profiled_batch_size if profiled_batch_size is not None else default_batch_size(name)
    attrs = {"source": "pipedream", "dropped": sorted(drop, key=lambda n: nodes[n][2])}
    return OpGraph.build(name, records, out_edges, batch, attrs)
