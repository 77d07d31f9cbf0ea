"""``pipedream`` with tensor parallelism: the flat DP over (S, t, R) beside PipeDream's own plan."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.bench_tp_search import megatron_gpt
from solvers import generate_graph, generate_topology, solve
from solvers.baselines._pipedream_dp import mixed_flat_dp
from solvers.model.plan import Plan
from solvers.model.problem import Problem, ProblemSettings
from solvers.partition.tp import allocate_mixed_groups
from tests.solvers.exact.test_exact_tp import LAT, one_host, problem
from tests.solvers.partition.test_tp_search import hosts
from tests.strategies import examples


def test_tp_wins_where_only_split_weights_fit() -> None:
    """The closed form of tests/solvers/exact/test_exact_tp.py: one stage split two ways on a 1 GB/s link."""
    plan = solve(problem(one_host(2, 1e9, 25e6), 1), "pipedream", time_limit_s=20)
    assert [(s.devices, s.tp) for s in plan.stages] == [(("d0", "d1"), 2)]
    fwd = 3.0 / 2 + 0.75 + 4e6 / 1e9 + 2 * LAT
    bwd = 6.0 / 2 + 0.25 + 4e6 / 1e9 + 2 * LAT
    assert plan.metrics["objective_s"] == pytest.approx(fwd + bwd, rel=1e-12)
    assert plan.stats["tp"] == 2
    without = solve(problem(one_host(2, 1e9, 25e6), 1, max_tp=1), "pipedream", time_limit_s=20)
    assert all(s.tp == 1 for s in without.stages) and without.metrics["objective_s"] > 10.0


def test_fixed_tp_and_max_tp_1() -> None:
    plan = solve(problem(one_host(4, 1e9, 1e12), 2, tp=2), "pipedream", time_limit_s=20)
    assert plan.stages and all(s.tp == 2 for s in plan.stages)
    graph = generate_graph("transformer", layers=4, causal=True)
    topo = generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    plans = [solve(Problem(graph, topo, settings=ProblemSettings(micro_batches=(8,), max_tp=m)), "pipedream",
                   time_limit_s=30) for m in (1, 8)]
    assert plans[0].stats["mode"] == "hierarchical" and all(s.tp == 1 for s in plans[0].stages)
    # the split LM head lets two 4-device stages of 2 x 2 beat PipeDream's hierarchical plan here
    assert plans[1].stats["tp"] == 2 and plans[1].metrics["objective_s"] < plans[0].metrics["objective_s"]


def _brute_force(n: int, stages: int, replicas: int, devices: int,
                 costs: dict[int, tuple[list[np.ndarray], list[np.ndarray]]]) -> float:
    best = np.inf
    for cuts in itertools.combinations(range(n - 1), stages - 1):
        lasts = [*cuts, n - 1]
        for degrees in itertools.product(sorted(costs), repeat=stages):
            if sum(degrees) * replicas > devices:
                continue
            value, first = 0.0, 0
            for s, (last, t) in enumerate(zip(lasts, degrees, strict=True)):
                stage_cost, cut_cost = costs[t]
                value = max(value, stage_cost[s][first, last], cut_cost[s][first - 1] if s else 0.0)
                first = last + 1
            best = min(best, value)
    return float(best)


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 6), stages=st.integers(1, 4), replicas=st.integers(1, 2),
       devices=st.integers(1, 12))
def test_the_degree_per_stage_recurrence_is_exact(seed: int, n: int, stages: int, replicas: int, devices: int) -> None:
    """mixed_flat_dp against every split and every degree per stage under the device count."""
    rng = np.random.default_rng(seed)
    costs = {}
    for t in (1, 2, 4):
        stage_cost, cut_cost = [], []
        for _ in range(stages):
            c = np.triu(rng.random((n, n)) * 10 / t + rng.random())
            c[np.tril_indices(n, -1)] = np.inf
            if rng.random() < 0.2:  # a stage that does not fit
                c[rng.integers(0, n), rng.integers(0, n)] = np.inf
            stage_cost.append(c)
            cut_cost.append(rng.random(n))
        costs[t] = (stage_cost, cut_cost)
    found = mixed_flat_dp(n, stages, replicas, devices, costs)
    best = _brute_force(n, stages, replicas, devices, costs) if stages <= n else np.inf
    if found is None:
        assert not np.isfinite(best)
        return
    value, lasts, degrees = found
    assert value == pytest.approx(best, rel=1e-12) and len(lasts) == len(degrees) == stages
    assert sum(degrees) * replicas <= devices and lasts[-1] == n - 1 and lasts == sorted(set(lasts))
    first, again = 0, 0.0
    for s, (last, t) in enumerate(zip(lasts, degrees, strict=True)):  # the split returned has the value returned
        again = max(again, costs[t][0][s][first, last], costs[t][1][s][first - 1] if s else 0.0)
        first = last + 1
    assert again == value


def test_mixed_groups_sit_in_hosts_widest_first() -> None:
    topo = hosts(6, 2)
    assert allocate_mixed_groups(topo, [4, 2, 1], 2) is None  # 14 devices of 12
    placed = allocate_mixed_groups(topo, [4, 2], 2)  # a group of 4 on each host, then the two left on each
    assert placed is not None and [[len(g) for g in stage] for stage in placed] == [[4, 4], [2, 2]]
    used = [d for stage in placed for group in stage for d in group]
    assert len(used) == len(set(used))  # disjoint
    for stage in placed:
        for group in stage:
            assert len({topo.devices[d].node for d in group}) == 1  # one host per group
    assert allocate_mixed_groups(topo, [4, 4], 2) is None  # four groups of 4: no host holds two
    assert allocate_mixed_groups(hosts(3, 2), [4], 1) is None  # no host of 4
    small = hosts(3, 2)
    across = allocate_mixed_groups(small, [4], 1, within_host=False)
    assert across is not None and len({small.devices[d].node for d in across[0][0]}) == 2


def test_stages_of_different_degrees_beat_every_single_degree() -> None:
    """Six GPUs on one host and micro-batches of 4 rows: a single degree gives 3 groups of 2 (3 replicas do not
    split 4 rows: a 3-stage pipeline) or 6 devices (a 5-stage pipeline); 2 replicas of a tp-2 stage then
    2 replicas of a tp-1 stage use all six and beat both."""
    graph = megatron_gpt(8)

    def plan_with(**kw: object) -> Plan:
        settings = ProblemSettings(micro_batches=(4,), schedule="1f1b", **kw)  # type: ignore[arg-type]
        return solve(Problem(graph, hosts(6, 1), "throughput", settings), "pipedream", time_limit_s=30)

    mixed = plan_with()
    assert mixed.stats["mode"] == "flat, tp per stage" and len({s.tp for s in mixed.stages}) == 2
    assert sum(len(s.devices) for s in mixed.stages) == 6
    for single in (plan_with(max_tp=1), plan_with(tp=2), plan_with(tp=4)):
        assert mixed.metrics["objective_s"] < 0.9 * single.metrics["objective_s"]
