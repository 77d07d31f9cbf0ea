"""Export an op graph (optionally with a plan's stages as clusters) to Graphviz DOT.

Nodes are labelled with id, op and forward time; edges with the bytes they carry.  With a
:class:`ResolvedPlan`, each stage becomes a ``cluster_<s>`` subgraph labelled with its devices,
its ops listed in the stage's topological order.  Output is deterministic (golden-file tested).
"""

from __future__ import annotations

from solvers.model.graph import OpGraph
from solvers.model.plan import ResolvedPlan

_PALETTE = ("#e8f0fe", "#fce8e6", "#e6f4ea", "#fef7e0", "#f3e8fd", "#e4f7fb", "#fde7f3", "#eeeeee")


def _quote(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _seconds(value: float) -> str:
    if value >= 1.0:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def _node_line(graph: OpGraph, i: int, indent: str) -> str:
    n = graph.nodes[i]
    label = f"{n.id}\n{n.op}\nfwd {_seconds(n.fwd_s)}"
    return f"{indent}{_quote(n.id)} [label={_quote(label)}];"


def to_dot(graph: OpGraph, plan: ResolvedPlan | None = None) -> str:
    """The DOT text of ``graph``; with ``plan``, one cluster per stage."""
    lines = [f"digraph {_quote(graph.name)} {{", "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname=Helvetica, fontsize=10];',
             "  edge [fontname=Helvetica, fontsize=8];"]
    if plan is None:
        lines += [_node_line(graph, i, "  ") for i in range(graph.n_ops)]
    else:
        for s, ops in enumerate(plan.stage_ops):
            devices = ", ".join(plan.plan.stages[s].devices)
            lines.append(f"  subgraph cluster_{s} {{")
            lines.append(f"    label={_quote(f'stage {s}: {devices}')};")
            lines.append(f'    style="rounded,filled"; fillcolor="{_PALETTE[s % len(_PALETTE)]}";')
            lines += [_node_line(graph, int(i), "    ") for i in ops]
            lines.append("  }")
    for e in graph.edges:
        attrs = f" [label={_quote(_bytes(e.bytes))}]" if e.bytes > 0 else ""
        lines.append(f"  {_quote(e.src)} -> {_quote(e.dst)}{attrs};")
    lines.append("}")
    return "\n".join(lines) + "\n"
