"""simulate() on plans with any schedule and several virtual stages per rank: closed forms on equal chains."""

from __future__ import annotations

import pytest

from solvers.model.errors import InvalidPlan
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.schedules import PIPELINE_SCHEDULES, build_schedule, stage_ranks
from solvers.simulator import simulate
from solvers.simulator.schedule_engine import simulate_schedule
from tests.solvers.simulator.cases import line_topology


def _plan(name: str, ranks: int, v: int, mb: int, act_bytes: float = 0.0) -> tuple[Problem, Plan]:
    """One op per virtual stage (forward 1 s, backward 2 s), rank ``r`` on device ``d{r}``."""
    n = ranks * v
    nodes = [Node(f"op{i}", "aten.mm", 1.0, 2.0, param_bytes=1.0, act_bytes=act_bytes) for i in range(n)]
    graph = OpGraph.build("chain", nodes, [Edge(f"op{i}", f"op{i + 1}", 0.0) for i in range(n - 1)])
    problem = Problem(graph, line_topology(ranks), "throughput", ProblemSettings(micro_batches=(mb,)))
    where = stage_ranks(name, ranks, v)
    stages = tuple(Stage((f"op{j}",), (f"d{where[j]}",)) for j in range(ranks * v))
    return problem, Plan(stages, micro_batches=mb, schedule=name, virtual_stages=v)


@pytest.mark.parametrize(("ranks", "v", "mb"), [(2, 2, 4), (4, 2, 8), (4, 4, 8), (3, 2, 6)])
def test_interleaved_1f1b_bubble_is_p_minus_1_over_mv_plus_p_minus_1(ranks: int, v: int, mb: int) -> None:
    """Narayanan et al. (arXiv 2104.04473) Section 2.2: bubble ``(p - 1) / (m v + p - 1)`` with equal stages."""
    problem, plan = _plan("interleaved-1f1b", ranks, v, mb)
    m = simulate(problem, plan).metrics
    assert m["iteration_s"] == pytest.approx((mb * v + ranks - 1) * 3.0, rel=1e-12)
    assert m["bubble_fraction"] == pytest.approx((ranks - 1) / (mb * v + ranks - 1), rel=1e-9)
    assert m["virtual_stages"] == v and m["schedule"] == "interleaved-1f1b"
    assert m["busy_s"] == pytest.approx({f"d{r}": mb * v * 3.0 for r in range(ranks)})


@pytest.mark.parametrize(("name", "expected"), [("gpipe", lambda r, m: (m + r - 1) * 3.0),
                                                ("1f1b", lambda r, m: (m + r - 1) * 3.0),
                                                ("interleaved-zb", lambda r, m: m * 3.0 + (r - 1) * 1.0)])
@pytest.mark.parametrize(("ranks", "mb"), [(2, 4), (4, 8)])
def test_one_stage_per_rank_schedules(name: str, expected: object, ranks: int, mb: int) -> None:
    """GPipe/1F1B ``(m + p - 1)(f + b)``; ZB-H1 (Qi et al., arXiv 2401.10241, Section 3) ``m (f + b) + (p - 1)(F + I - W)``."""
    problem, plan = _plan(name, ranks, 1, mb)
    m = simulate(problem, plan).metrics
    assert callable(expected)
    assert m["iteration_s"] == pytest.approx(expected(ranks, mb), rel=1e-12)
    assert m["bubble_fraction"] == pytest.approx(1.0 - mb * 3.0 / m["iteration_s"], rel=1e-9)


@pytest.mark.parametrize("name", PIPELINE_SCHEDULES)
def test_simulate_equals_the_action_list_engine(name: str) -> None:
    ranks, v = 3, (1 if name in ("gpipe", "1f1b") else 2)
    mb = 6
    problem, plan = _plan(name, ranks, v, mb)
    m = simulate(problem, plan, timeline=True)
    run = simulate_schedule(problem, build_schedule(name, ranks, v, mb), [[j] for j in range(ranks * v)],
                            [[r] for r in range(ranks)])
    assert m.metrics["iteration_s"] == pytest.approx(run.iteration_s, rel=1e-12)
    assert m.metrics["bubble_fraction"] == pytest.approx(run.bubble_fraction, rel=1e-9, abs=1e-12)
    assert m.timeline is not None and {e.resource for e in m.timeline} >= {"d0", "d1", "d2"}
    # one micro-batch: forward down the pipeline and back, every stage 3 s
    assert m.metrics["latency_s"] == pytest.approx(ranks * v * 3.0, rel=1e-12)


def test_zero_bubble_holds_activations_until_w() -> None:
    """ZB-H1 keeps a micro-batch's activations from F until W, so a rank may hold more than under 1F1B."""
    act = 1e6
    peaks = {}
    for name in ("1f1b", "interleaved-zb"):
        problem, plan = _plan(name, 4, 1, 8, act_bytes=act)
        peaks[name] = simulate(problem, plan).metrics["peak_memory_bytes"]
    assert peaks["1f1b"]["d0"] == pytest.approx(4 * act + 4.0 + 0.0, rel=1e-9)  # 4 in flight + params x (1 + 3)
    assert peaks["interleaved-zb"]["d3"] > peaks["1f1b"]["d3"]
    assert all(peaks["interleaved-zb"][d] >= peaks["1f1b"][d] for d in peaks["1f1b"])


def test_several_virtual_stages_sum_their_memory() -> None:
    problem, plan = _plan("interleaved-1f1b", 2, 2, 4, act_bytes=1e6)
    m = simulate(problem, plan).metrics
    params = 2 * 1.0 * 4.0  # two stages' parameters with optimizer state
    # rank 0 runs 0F0 0F1 2F0 2F1 (per torch's rounds) before its first backward: 4 micro-batches' stages held
    held = max(m["peak_memory_bytes"].values()) - params
    assert held >= 3e6


def test_counts_breaking_a_schedule_name_the_field() -> None:
    problem, plan = _plan("dualpipev", 2, 2, 2)
    with pytest.raises(InvalidPlan) as info:
        simulate(problem, plan)
    assert info.value.field == "micro_batches" and "dualpipev" in str(info.value)


def test_engine_op_refuses_virtual_stages() -> None:
    problem, plan = _plan("interleaved-1f1b", 2, 2, 4)
    with pytest.raises(InvalidPlan) as info:
        simulate(problem, plan, engine="op")
    assert info.value.field == "engine"
