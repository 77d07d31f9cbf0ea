"""The MILP's timing rules (``schedule.replay``) are the simulator's; GCOF on a generated CNN."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.generate import generate_graph
from solvers.moirai.gcof import gcof, identity_grouping
from solvers.moirai.instance import build_instance
from solvers.moirai.rules import FusionRules
from solvers.moirai.schedule import full_order, replay
from solvers.simulator import simulate
from tests.solvers.moirai.tiny import plan_of, tiny_problem
from tests.strategies import examples


@settings(max_examples=examples(80), deadline=None)
@given(st.integers(0, 10_000), st.booleans(), st.randoms(use_true_random=False))
def test_replay_equals_the_simulator(seed: int, training: bool, rnd: random.Random) -> None:
    problem = tiny_problem(seed, n_ops=6, n_dev=3, training=training, memory_gib=64.0)
    g = problem.graph
    device_of = tuple(rnd.randrange(3) for _ in range(g.n_ops))
    indeg = [len(p) for p in g.pred]
    ready = [v for v in range(g.n_ops) if indeg[v] == 0]
    order: list[int] = []
    while ready:  # a random linear extension (Kahn, random choice among the ready ops)
        v = ready.pop(rnd.randrange(len(ready)))
        order.append(v)
        for s in g.succ[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    inst = build_instance(problem, identity_grouping(g))
    unit_of = {v: u for u, ops in enumerate(inst.grouping.groups) for v in ops}
    forward: dict[int, list[int]] = {}
    for v in order:
        forward.setdefault(device_of[v], []).append(unit_of[v])
    device_of_unit = [device_of[inst.grouping.groups[u][0]] for u in range(inst.n_units)]
    sched = replay(inst, device_of_unit, full_order(inst, forward))
    latency = simulate(problem, plan_of(problem, device_of, order)).metrics["latency_s"]
    assert sched.makespan_s == pytest.approx(latency, rel=1e-12)


def test_gcof_on_a_generated_cnn() -> None:
    graph = generate_graph("cnn", blocks="1,1,1,1", bottleneck=False, image_size=64, micro_batch=2)
    grouping = gcof(graph, FusionRules.parse(None))
    assert {"conv∘bn∘relu", "conv∘bn∘add∘relu"} <= set(grouping.labels)
    assert grouping.n_units < graph.n_ops
