"""The op-level engine against a direct reference: fixed orders make timing a recurrence.

With an order on every device, each task starts at max(device free, inputs arrived) and every
channel serves its (single) sender's messages in that sender's task order, so the schedule can
be computed by sweeping the devices until every task is timed, with no event queue at all.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.cost.comm import allreduce_s, transfer_pairs, transfer_s
from solvers.cost.compute import ComputeModel
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.simulator import simulate
from solvers.validity import resolve_plan
from tests.strategies import examples, latency_cases


def _reference_latency(problem: Problem, plan: Plan) -> float:
    g, topo = problem.graph, problem.topology
    rp = resolve_plan(problem, plan)
    assert rp.order is not None
    cm = ComputeModel(g, topo)
    group = rp.stage_of.tolist()
    devs = rp.stage_devices
    fwd = {v: float(cm.group_fwd_s(devs[group[v]])[v]) for v in range(g.n_ops)}
    bwd = {v: float(cm.group_bwd_s(devs[group[v]])[v]) for v in range(g.n_ops)}
    mb, training = plan.micro_batches, problem.training
    seqs = []
    for s in range(rp.n_stages):
        order = rp.order[devs[s][0]]
        seq = [("F", m, v) for m in range(mb) for v in order]
        if training:
            seq += [("B", m, v) for m in range(mb) for v in reversed(order)]
        seqs.append(seq)
    arrival: dict[tuple[str, int, int, int], float] = {}  # (pass, m, producer, consumer op) -> arrival
    end: dict[tuple[str, int, int], float] = {}
    channel_free: dict[tuple[int, int], float] = {}

    def send(src: int, dst: int, size: float, at: float) -> float:
        done = at
        for a, b, share in transfer_pairs(devs[src], devs[dst], size):
            dur = transfer_s(topo, a, b, share)
            if dur > 0:
                start = max(at, channel_free.get((a, b), 0.0))
                channel_free[(a, b)] = start + dur
                done = max(done, start + dur)
        return done

    free = [0.0] * rp.n_stages
    pointer = [0] * rp.n_stages
    while any(pointer[s] < len(seqs[s]) for s in range(rp.n_stages)):
        progressed = False
        for s in range(rp.n_stages):
            while pointer[s] < len(seqs[s]):
                p, m, v = seqs[s][pointer[s]]
                if p == "F":
                    needs = [arrival.get(("F", m, u, v)) for u in g.pred[v]]
                else:
                    needs = [end.get(("F", m, v))] + [arrival.get(("B", m, w, v)) for w in g.succ[v]]
                if any(x is None for x in needs):
                    break
                start = max([free[s]] + [x for x in needs if x is not None])
                finish = end[(p, m, v)] = free[s] = start + (fwd[v] if p == "F" else bwd[v])
                if p == "F":
                    by_group: dict[int, float] = {}
                    for e in g.out_edges[v]:
                        w = int(g.edge_dst[e])
                        if group[w] == s:
                            arrival[("F", m, v, w)] = finish
                        else:
                            by_group[group[w]] = max(by_group.get(group[w], 0.0), float(g.edge_bytes[e]))
                    got = {h: send(s, h, size, finish) for h, size in sorted(by_group.items())}
                    for w in g.succ[v]:
                        if group[w] != s:
                            arrival[("F", m, v, w)] = got[group[w]]
                else:
                    for e in g.in_edges[v]:
                        u = int(g.edge_src[e])
                        arrival[("B", m, v, u)] = (finish if group[u] == s
                                                   else send(s, group[u], float(g.edge_bytes[e]), finish))
                pointer[s] += 1
                progressed = True
        assert progressed, "reference deadlocked"
    tails = [allreduce_s(topo, devs[s], float(g.param_bytes[rp.stage_ops[s]].sum())) if training else 0.0
             for s in range(rp.n_stages)]
    return max(free[s] + tails[s] for s in range(rp.n_stages))


@st.composite
def ordered_latency_cases(draw: st.DrawFn) -> tuple[Problem, Plan]:
    problem, plan = draw(latency_cases(max_ops=9))
    g = problem.graph
    waiting = [len(p) for p in g.pred]
    ready = [v for v in range(g.n_ops) if not waiting[v]]
    rank = {}
    while ready:  # a random topological order of the whole graph
        v = ready.pop(draw(st.integers(0, len(ready) - 1)))
        rank[g.ids[v]] = len(rank)
        for w in g.succ[v]:
            waiting[w] -= 1
            if not waiting[w]:
                ready.append(w)
    order = {stage.devices[0]: tuple(sorted(stage.ops, key=rank.__getitem__)) for stage in plan.stages}
    return problem, plan.with_(order=order)


@settings(max_examples=examples(150), deadline=None)
@given(ordered_latency_cases())
def test_ordered_dataflow_matches_reference(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    assert simulate(problem, plan).metrics["latency_s"] == pytest.approx(_reference_latency(problem, plan), rel=1e-9)


@settings(max_examples=examples(100), deadline=None)
@given(latency_cases())
def test_replaying_the_list_schedule_reproduces_it(case: tuple[Problem, Plan]) -> None:
    problem, plan = case
    problem = Problem(problem.graph, problem.topology, "latency")  # forward pass: one order per device
    plan = plan.with_(micro_batches=1)
    result = simulate(problem, plan, timeline=True)
    assert result.timeline is not None
    order: dict[str, list[str]] = {}
    for stage in plan.stages:
        first = stage.devices[0]
        runs = [e.task for e in result.timeline if e.resource == first]  # logged in start order
        order[first] = [task.split(" ", 1)[1] for task in runs]
    replay = simulate(problem, plan.with_(order={d: tuple(o) for d, o in order.items()}))
    assert replay.metrics["latency_s"] == pytest.approx(result.metrics["latency_s"], rel=1e-12)


@settings(max_examples=examples(150), deadline=None)
@given(ordered_latency_cases())
def test_sequenced_run_equals_the_event_loop(case: tuple[Problem, Plan]) -> None:
    """With an order on every device the engine runs without its event queue
    (``solvers.simulator._events._run_sequenced``); a timeline keeps the event loop.  Every metric,
    the channel traffic included, is the same bit for bit."""
    problem, plan = case
    sequenced = simulate(problem, plan, engine="op").metrics
    event_loop = simulate(problem, plan, timeline=True).metrics
    assert sequenced == event_loop
