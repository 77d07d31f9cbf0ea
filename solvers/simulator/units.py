"""Op-level simulation of throughput plans with pipeline-runtime semantics.

What ``torch.distributed.pipelining`` does: a stage runs a micro-batch's forward (backward) as
one unit, its ops back to back in topological (reverse) order, starting when every inbound
message for that micro-batch has arrived; its outbound messages, coalesced per destination
stage, leave when the unit ends.  Task orders (GPipe / 1F1B) and the all-reduce are those of
the stage-level engine, but everything here is derived op by op and timed by the event core
(:mod:`solvers.simulator._events`), so the two engines cross-check each other.
"""

from __future__ import annotations

from solvers.cost.compute import ComputeModel
from solvers.cost.tensor_parallel import boundary_mode
from solvers.model.errors import InvalidPlan
from solvers.model.plan import ResolvedPlan
from solvers.model.problem import Problem
from solvers.simulator._channels import ChannelTable, Transfers
from solvers.simulator._events import EventGraph
from solvers.simulator.dataflow import group_op_times, run_iteration
from solvers.simulator.result import EngineRun
from solvers.simulator.schedule import stage_task_order


def _stage_pair_bytes(problem: Problem, rp: ResolvedPlan) -> dict[tuple[int, int], float]:
    """(a, b) -> bytes per micro-batch: each remote tensor once per consumer stage, at its largest size."""
    g = problem.graph
    stage = rp.stage_of.tolist()
    dst, size = g.edge_dst.tolist(), g.edge_bytes.tolist()
    out: dict[tuple[int, int], float] = {}
    for u, edges in enumerate(g.out_edges):
        a = stage[u]
        largest: dict[int, float] = {}
        for e in edges:
            b = stage[dst[e]]
            if b != a:
                largest[b] = max(largest.get(b, 0.0), size[e])
        for b, x in largest.items():
            if b < a:
                raise InvalidPlan(f"op {g.ids[u]!r} in stage {a} feeds stage {b}: a pipeline needs every "
                                  "edge to go to the same or a later stage", field="stages", ref=g.ids[u])
            out[(a, b)] = out.get((a, b), 0.0) + x
    return out


def _unit_task_graph(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, channels: ChannelTable,
                     micro_batches: int) -> EventGraph:
    n = rp.n_stages
    block = micro_batches * n
    fwd_op, bwd_op = group_op_times(problem, rp, compute)
    fwd_unit, bwd_unit = [], []
    for ops, again in zip(rp.stage_ops, rp.recompute, strict=True):  # forward in topological order, backward reversed
        f = b = 0.0
        for v in ops.tolist():
            f += fwd_op[v]
        for v in reversed(ops.tolist()):
            b += bwd_op[v] + (fwd_op[v] if again else 0.0)
        fwd_unit.append(f)
        bwd_unit.append(b)
    local = [[block] for _ in range(n)] + [[] for _ in range(n)]  # F(s, m) -> B(s, m)
    messages: list[list[tuple[Transfers, list[int]]]] = [[] for _ in range(2 * n)]
    n_inputs = [0] * n + [1] * n
    devs = rp.stage_devices
    for (a, b), size in sorted(_stage_pair_bytes(problem, rp).items()):
        messages[a].append((channels.message(devs[a], devs[b], size, micro_batches, **boundary_mode(rp, a, b)),
                            [b - a]))
        messages[n + b].append((channels.message(devs[b], devs[a], size, micro_batches, **boundary_mode(rp, b, a)),
                                [a - b]))
        n_inputs[b] += 1
        n_inputs[n + a] += 1
    sequences: list[list[int] | None] = [
        [(p * micro_batches + m) * n + s for p, m in stage_task_order(rp.plan.schedule, n, s, micro_batches)]
        for s in range(n)]
    return EventGraph(n, 2, micro_batches, list(range(n)), devs, fwd_unit + bwd_unit, local, messages, n_inputs,
                     [0] * (2 * n), sequences)


def run_units(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, micro_batches: int, *,
              allreduce: bool, timeline: bool) -> EngineRun:
    """Simulate a throughput plan as pipeline units; the makespan includes the all-reduce if asked."""
    channels = ChannelTable(problem.topology)
    tg = _unit_task_graph(problem, rp, compute, channels, micro_batches)
    n, block = tg.n_items, micro_batches * tg.n_items

    def label(t: int) -> str:
        return f"{'F' if t < block else 'B'}{(t % block) // n}"

    def transfer_label(sender: int, consumer: int) -> str:
        return f"{label(sender)} s{sender % n}->s{consumer % n}"

    return run_iteration(problem, rp, tg, channels, label, transfer_label, allreduce=allreduce, timeline=timeline)
