"""Whether the launcher can run a plan: every pipeline stage does work.

A stage of a throughput plan whose ops are only model inputs and constants (values that depend
on no input: position ids, masks built from shapes) does no work but pays a pipeline boundary and
a device: it is not a stage.  :func:`idle_stages` finds them; :func:`finish_plan
<solvers.solving.finish_plan>` marks a plan that has one infeasible with a note naming it, so no
solver returns a plan that the runtime cannot run.  Latency plans place single ops and are not
pipelines: a device holding only constants there is a valid choice.
"""

from __future__ import annotations

import numpy as np

from solvers.arrays import BoolArray
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan

__all__ = ["computing_ops", "does_compute", "idle_stages", "runnable_notes"]


def does_compute(graph: OpGraph, op: str) -> bool:
    """Whether ``op`` computes from the model's inputs (not an input, not a constant)."""
    node = graph.nodes[graph.index[op]]
    return node.op != "input" and not node.constant


def computing_ops(graph: OpGraph) -> BoolArray:
    """Per op position: :func:`does_compute` (a stage computes when it holds one such op)."""
    inputs = np.fromiter((n.op == "input" for n in graph.nodes), dtype=bool, count=graph.n_ops)
    return np.asarray(~inputs & ~graph.constant, dtype=bool)


def idle_stages(graph: OpGraph, plan: Plan) -> list[int]:
    """Indices of the throughput plan's stages that hold no op computing from the inputs."""
    if plan.objective == "latency" or len(plan.stages) < 2:
        return []
    return [s for s, stage in enumerate(plan.stages)
            if not any(does_compute(graph, op) for op in stage.ops if op in graph.index)]


def runnable_notes(graph: OpGraph, plan: Plan) -> list[str]:
    """Why the launcher cannot run the plan (empty when it can)."""
    return [f"stages[{s}] holds only inputs and constants ({', '.join(plan.stages[s].ops[:4])}"
            f"{', ...' if len(plan.stages[s].ops) > 4 else ''}): a stage without compute is not a stage; "
            f"{plan.solver} could not give every one of the {len(plan.stages)} stages work"
            for s in idle_stages(graph, plan)]
