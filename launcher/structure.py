"""What the runtime checks the re-exported model against, computed from the graph document alone.

The **structure digest** of an op graph is the sha256 of its op ids, op names, merged op lists
(``attrs.ops`` of a ``--granularity module`` graph) and edges with their bytes: everything the
export determines and nothing that profiling or the time estimate changes.  ``placer extract``
and ``placer profile`` of the same model and inputs give graphs with the same structure digest,
and so does the runtime's re-export on each node (:mod:`launcher.runtime.model`).

A plan names graph node ids; a merged node stands for the FX nodes in its ``attrs.ops``.
:func:`op_stage` maps every FX node name (the op ids of an op-level graph) to its stage.
"""

from __future__ import annotations

from typing import Any

from solvers.model.canonical import digest
from solvers.model.errors import InvalidPlan
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan


def structure_digest(graph: OpGraph) -> str:
    """``sha256:<hex>`` of the graph's ops, merged op lists and edges (no times, no memory)."""
    nodes = [[n.id, n.op, list((n.attrs or {}).get("ops") or [])] for n in graph.nodes]
    edges = [[e.src, e.dst, e.bytes] for e in graph.edges]
    return digest({"nodes": nodes, "edges": edges, "batch": graph.profiled_batch_size})


def fx_ops(graph: OpGraph) -> dict[str, list[str]]:
    """Graph node id -> the FX node names it stands for (itself, or ``attrs.ops`` when merged)."""
    out: dict[str, list[str]] = {}
    for node in graph.nodes:
        merged = (node.attrs or {}).get("ops")
        out[node.id] = [str(x) for x in merged] if merged else [node.id]
    return out


def op_stage(graph: OpGraph, plan: Plan) -> dict[str, int]:
    """FX node name -> stage index; refuses a plan that leaves a graph op out or names an unknown one."""
    expand = fx_ops(graph)
    out: dict[str, int] = {}
    for s, stage in enumerate(plan.stages):
        for op in stage.ops:
            if op not in expand:
                raise InvalidPlan(f"stages[{s}]: op {op!r} is not in the graph", field=f"stages[{s}].ops", ref=op)
            for name in expand[op]:
                out[name] = s
    missing = [n.id for n in graph.nodes if n.id not in {o for st in plan.stages for o in st.ops}]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise InvalidPlan(f"the plan leaves {len(missing)} op(s) of the graph out: {shown}", field="stages",
                          ref=missing[0])
    return out


def model_source(graph: OpGraph) -> dict[str, Any]:
    """The ``attrs.source`` record ``placer extract`` wrote (how to rebuild the model)."""
    source = (graph.attrs or {}).get("source")
    if not isinstance(source, dict) or not ("example" in source or "spec" in source):
        raise InvalidPlan("the graph has no attrs.source: only graphs made by `placer extract` or "
                          "`placer profile` can be launched (they record how to rebuild the model)",
                          field="attrs.source")
    return dict(source)


def granularity_depth(graph: OpGraph) -> int | None:
    """None for an op-level graph, DEPTH for a ``module:DEPTH`` graph."""
    text = str((graph.attrs or {}).get("granularity") or "op")
    if text == "op":
        return None
    return int(text.partition(":")[2] or "1")
