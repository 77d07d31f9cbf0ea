"""Solvers choose the pipeline schedule: settings, the virtual-stage cut, and every throughput solver's plans."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from solvers import Problem, generate_graph, generate_topology, simulate, solve
from solvers.model.errors import InvalidProblem
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage, plan_from_document
from solvers.model.problem import ProblemSettings
from solvers.model.schedules import stage_ranks
from solvers.model.settings import settings_from_dict
from solvers.partition import schedules
from solvers.partition.cut_positions import MIN_CUT_POSITIONS, cheapest_positions, crossing_bytes
from solvers.partition.schedule_estimates import CandidateEstimates
from solvers.partition.schedules import cut_virtual_stages, schedule_candidates
from solvers.validity import resolve_plan

THROUGHPUT_SOLVERS = ("even", "parmesan", "rannc", "pipedream", "exact", "auto")


@pytest.fixture(scope="module")
def problem4() -> Problem:
    graph = generate_graph("transformer", layers=4)
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=4)
    return Problem(graph, topology, "throughput", ProblemSettings(micro_batches=(8,), schedule="1f1b"))


@pytest.mark.parametrize(("raw", "field"), [
    ({"schedule": "1f1b", "virtual_stages": 2}, "settings.virtual_stages"),
    ({"schedule": "dualpipev", "virtual_stages": 4}, "settings.virtual_stages"),
    ({"schedule": "interleaved"}, "settings.schedule"),
    ({"virtual_stages": 0}, "settings.virtual_stages"),
    ({"virtual_stages": "2"}, "settings.virtual_stages"),
])
def test_settings_errors_name_the_field(raw: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidProblem) as info:
        settings_from_dict(raw)
    assert info.value.field == field and field in str(info.value)


def test_unset_virtual_stages_keep_the_problem_digest() -> None:
    assert "virtual_stages" not in ProblemSettings().to_dict()
    assert ProblemSettings(schedule="auto", virtual_stages=2).to_dict()["virtual_stages"] == 2


def test_candidates_follow_each_schedule_rule() -> None:
    auto = schedule_candidates(ProblemSettings(schedule="auto"), 4, 100, 4)
    assert ("gpipe", 1) in auto and ("1f1b", 1) in auto and ("zbv", 2) in auto
    assert ("dualpipev", 2) not in auto  # needs 2 x 4 micro-batches
    assert ("interleaved-zb", 4) in auto and ("interleaved-1f1b", 1) not in auto
    assert schedule_candidates(ProblemSettings(schedule="auto"), 4, 100, 8).count(("dualpipev", 2)) == 1
    assert schedule_candidates(ProblemSettings(schedule="interleaved-1f1b", virtual_stages=2), 4, 100, 8) == \
        [("interleaved-1f1b", 2)]
    assert schedule_candidates(ProblemSettings(schedule="interleaved-zb"), 4, 10, 8) == [("interleaved-zb", 1),
                                                                                      ("interleaved-zb", 2)]


def test_cut_balances_equal_ops_and_follows_rank_speed() -> None:
    ones = np.ones(12)
    assert cut_virtual_stages([ones, ones], stage_ranks("interleaved-1f1b", 2, 2)) == [0, 3, 6, 9, 12]
    # rank 1 twice as slow: its stages get half the ops of rank 0's
    assert cut_virtual_stages([ones, 2 * ones], stage_ranks("zbv", 2, 2)) == [0, 4, 6, 8, 12]


def test_cut_gives_every_stage_an_op_that_computes() -> None:
    """An input and a constant of no work at the front, and rank 0 ten times slower than rank 1: the
    balanced cut gives rank 0's first stage the input alone, which the runtime cannot run
    (solvers.runnable); with the flags every stage holds an op that computes."""
    weights = np.array([0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    computes = weights > 0
    where = stage_ranks("interleaved-1f1b", 2, 2)
    assert cut_virtual_stages([10 * weights, weights], where) == [0, 1, 3, 4, 6]  # stage 0: the input alone
    cuts = cut_virtual_stages([10 * weights, weights], where, computes=computes)
    assert cuts is not None
    assert all(computes[a:b].any() for a, b in pairwise(cuts))
    assert cut_virtual_stages([weights[:5]] * 2, where, computes=computes[:5]) is None  # 3 ops compute, 4 stages


def test_cut_avoids_an_expensive_crossing() -> None:
    ones = np.ones(4)
    costly = np.array([0.0, 0.0, 10.0, 0.0, 0.0])  # cutting after op 1 sends for 10 s
    cuts = cut_virtual_stages([ones, ones], (0, 1), [(costly, costly)])
    assert cuts in ([0, 1, 4], [0, 3, 4])


@pytest.mark.parametrize("solver", THROUGHPUT_SOLVERS)
def test_auto_schedule_never_slower_than_the_solvers_1f1b_plan(problem4: Problem, solver: str) -> None:
    one = solve(problem4, solver, time_limit_s=20)
    best = solve(problem4.with_settings(schedule="auto"), solver, time_limit_s=20)
    assert one.metrics is not None and best.metrics is not None
    assert best.metrics["time_per_sample_s"] <= one.metrics["time_per_sample_s"] * (1 + 1e-9)
    assert best.status != "optimal"  # the proofs cover one-stage-per-rank GPipe/1F1B only
    tried, estimated = best.stats["schedule_candidates"], best.stats["schedule_estimates"]
    auto = problem4.with_settings(schedule="auto").settings
    every = {f"{n}/{v}" for n, v in schedule_candidates(auto, 4, problem4.graph.n_ops, 8)}
    if len({len(stage.devices) for stage in one.stages}) > 1 or any(stage.tp > 1 for stage in one.stages):
        every = {"gpipe/1", "1f1b/1"}  # uneven replica counts or tensor-parallel stages: GPipe and 1F1B only
    assert f"{best.schedule}/{best.virtual_stages}" in tried and set(tried) <= set(estimated) == every
    assert "1f1b/1" in tried  # the solver's own plan
    assert "gpipe/1" in tried or estimated["gpipe/1"] >= min(v for v in tried.values() if v is not None)
    others = [key for key in estimated if key.split("/")[0] not in ("1f1b", "gpipe")]
    assert bool(others) == (every != {"gpipe/1", "1f1b/1"})
    if others:
        first = min(others, key=estimated.__getitem__)
        assert first in tried or estimated[first] >= tried["1f1b/1"]  # the best estimate is simulated unless hopeless
    again = plan_from_document(best.to_document())  # the chosen plan resolves and simulates as it reports
    resolve_plan(problem4, again)
    assert simulate(problem4, again).metrics["iteration_s"] == pytest.approx(best.metrics["iteration_s"], rel=1e-12)
    assert best.metrics["schedule"] == best.schedule and 0.0 <= best.metrics["bubble_fraction"] < 1.0


@pytest.mark.parametrize(("schedule", "v"), [("zbv", 2), ("dualpipev", 2), ("interleaved-1f1b", 2),
                                             ("looped-bfs", 2), ("interleaved-zb", 1)])
def test_a_schedule_by_name_gives_that_schedule(problem4: Problem, schedule: str, v: int) -> None:
    plan = solve(problem4.with_settings(schedule=schedule, virtual_stages=v), "parmesan", time_limit_s=20)
    assert plan.status == "feasible" and plan.schedule == schedule and plan.virtual_stages == v
    ranks = len(plan.stages) // v
    where = stage_ranks(schedule, ranks, v)
    assert all(plan.stages[j].devices == plan.stages[where[j]].devices for j in range(len(plan.stages)))
    assert plan.metrics is not None and plan.metrics["virtual_stages"] == v


def test_exact_under_1f1b_keeps_its_proof(problem4: Problem) -> None:
    assert solve(problem4, "exact", time_limit_s=20).status == "optimal"


def test_a_schedule_that_cannot_run_is_infeasible_and_named(problem4: Problem) -> None:
    plan = solve(problem4.with_settings(schedule="dualpipev", micro_batches=(2,)), "parmesan", time_limit_s=20)
    assert plan.status == "infeasible" and any("dualpipev" in note for note in plan.notes)


def test_the_catalogue_states_each_solvers_schedules_and_proofs() -> None:
    from solvers import registry
    from solvers.model.schedules import PIPELINE_SCHEDULES
    for name in THROUGHPUT_SOLVERS:
        entry = registry.info(name).to_dict()
        assert entry["schedules"] == list(PIPELINE_SCHEDULES)
        assert entry["proven_schedules"] == (["gpipe", "1f1b"] if name == "exact" else [])
        assert entry["tp_schedules"] == (["gpipe", "1f1b"] if name in ("exact", "pipedream", "rannc", "parmesan") else [])
    assert registry.info("moirai").to_dict()["schedules"] == []


def test_auto_is_the_default_and_a_plan_names_the_schedule_chosen() -> None:
    graph = generate_graph("transformer", layers=4)
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=4)
    plan = solve(Problem(graph, topology, "throughput", ProblemSettings(micro_batches=(8,))), "even")
    assert ProblemSettings().schedule == "auto" and len(plan.stats["schedule_candidates"]) > 1
    assert plan.schedule in schedules.AUTO_SCHEDULES and plan.metrics is not None
    assert plan.metrics["schedule"] == plan.schedule
    latency = solve(Problem(graph, topology, "latency"), "heft")
    assert latency.schedule == "1f1b" and "schedule_candidates" not in latency.stats


@pytest.mark.parametrize(("widths", "multi_stage"), [((1, 1), True), ((2, 1), False)])
def test_auto_runs_uneven_replica_counts_as_gpipe_or_1f1b(widths: tuple[int, int], multi_stage: bool) -> None:
    """The launcher runs the multi-stage schedules one pipeline per replica: under ``auto`` rank groups with
    different replica counts compete as GPipe and 1F1B only; equal ones as every schedule."""
    nodes = [Node(f"op{i}", "aten.mm", 1.0, 2.0, param_bytes=4.0) for i in range(8)]
    graph = OpGraph.build("chain", nodes, [Edge(f"op{i}", f"op{i + 1}", 0.0) for i in range(7)])
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=3)
    problem = Problem(graph, topology, "throughput", ProblemSettings(micro_batches=(4,), recompute=False))
    devices = [d.id for d in topology.devices]
    plan = Plan(stages=(Stage(tuple(graph.ids[:4]), tuple(devices[:widths[0]])),
                        Stage(tuple(graph.ids[4:]), tuple(devices[widths[0]:widths[0] + widths[1]]))),
                micro_batches=4, status="feasible")
    best = schedules.search_schedules(problem, plan)
    names = {key.split("/")[0] for key in best.stats["schedule_estimates"]}
    assert names >= {"gpipe", "1f1b"} and (names <= {"gpipe", "1f1b"}) != multi_stage
    assert best.schedule in (schedules.AUTO_SCHEDULES if multi_stage else ("gpipe", "1f1b"))


def test_a_tie_keeps_the_solvers_own_plan() -> None:
    """One rank group interleaving its own stages runs the same work in the same time (to rounding): the
    search keeps the one-stage plan rather than a split that only costs memory."""
    graph = generate_graph("transformer", layers=4)
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    settings = ProblemSettings(micro_batches=(4,), schedule="auto", stages=1)
    plan = solve(Problem(graph, topology, "throughput", settings), "parmesan")
    tried = plan.stats["schedule_candidates"]
    assert len(tried) > 1 and plan.schedule == "1f1b" and plan.virtual_stages == 1 and len(plan.stages) == 1


def test_the_search_simulates_what_its_estimates_rank_first(problem4: Problem, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the margin wide open every candidate estimated below the best simulated time
    is simulated, and the answer is at least as fast as the pruned search's; with no margin, only the
    best-estimated one that fits; with the default margin, only candidates estimated within it of that one."""
    auto = problem4.with_settings(schedule="auto")
    pruned = solve(auto, "parmesan", time_limit_s=20)
    monkeypatch.setattr(schedules, "ESTIMATE_MARGIN", float("inf"))
    wide = solve(auto, "parmesan", time_limit_s=20)
    monkeypatch.setattr(schedules, "ESTIMATE_MARGIN", 0.0)
    first = solve(auto, "parmesan", time_limit_s=20)
    assert set(first.stats["schedule_candidates"]) <= set(pruned.stats["schedule_candidates"]) \
        <= set(wide.stats["schedule_candidates"])
    assert wide.stats["schedule_estimates"] == pruned.stats["schedule_estimates"] == first.stats["schedule_estimates"]
    assert wide.metrics is not None and pruned.metrics is not None and first.metrics is not None
    assert wide.metrics["time_per_sample_s"] <= pruned.metrics["time_per_sample_s"] * (1 + 1e-9)
    assert pruned.metrics["time_per_sample_s"] <= first.metrics["time_per_sample_s"] * (1 + 1e-9)
    fitting = [key for key, value in wide.stats["schedule_candidates"].items() if value is not None
               and key.split("/")[0] not in ("1f1b", "gpipe")]
    estimates = pruned.stats["schedule_estimates"]
    simulated = [key for key in first.stats["schedule_candidates"] if key.split("/")[0] not in ("1f1b", "gpipe")]
    assert simulated and min(fitting, key=estimates.__getitem__) == simulated[-1]
    more = [key for key in pruned.stats["schedule_candidates"] if key.split("/")[0] not in ("1f1b", "gpipe")]
    assert more[:len(simulated)] == simulated
    assert all(estimates[key] < estimates[simulated[-1]] * (1 + 0.15) for key in more)


def test_a_first_fit_search_simulates_the_first_fit_only(problem4: Problem, monkeypatch: pytest.MonkeyPatch) -> None:
    """``even`` asks for the first fit only: no candidate after the first that fits, whatever the margin (GPipe
    exempt); ``parmesan``'s search goes on within the margin.  Both answers are the same from run to run."""
    monkeypatch.setattr(schedules, "ESTIMATE_MARGIN", float("inf"))
    auto = problem4.with_settings(schedule="auto")
    plan = solve(auto, "even")
    tried = [key for key, value in plan.stats["schedule_candidates"].items() if key.split("/")[0] not in ("1f1b", "gpipe")]
    assert tried and all(plan.stats["schedule_candidates"][key] is None for key in tried[:-1])
    assert solve(auto, "even").stats["schedule_candidates"] == plan.stats["schedule_candidates"]
    wide = solve(auto, "parmesan", time_limit_s=20)
    fitting = [key for key, value in wide.stats["schedule_candidates"].items() if value is not None
               and key.split("/")[0] not in ("1f1b", "gpipe")]
    assert len(fitting) > 1


def _prologue_graph(prologue: int = 120, layers: int = 8, per_layer: int = 6) -> OpGraph:
    """A chain shaped like an extracted language model: a prologue of many cheap ops with tiny outputs
    (embedding lookups, position ids, masks), then layers whose boundaries carry the residual stream (1 MB)
    and whose insides carry more (3 MB)."""
    nodes = [Node(f"p{i}", "aten.view", 1e-4, 1e-4) for i in range(prologue)]
    nodes += [Node(f"l{k}_{j}", "aten.mm", 1.0, 2.0, param_bytes=4e6) for k in range(layers) for j in range(per_layer)]
    ids = [node.id for node in nodes]
    edges = [Edge(a, b, 4.0 if a.startswith("p") else 1e6 if b.endswith("_0") else 3e6) for a, b in pairwise(ids)]
    return OpGraph.build("prologue", nodes, edges)


def test_cut_positions_reach_every_share_of_the_work() -> None:
    """The 96 cheapest positions of the prologue graph all lie in its prologue (a sliver of the work); with the
    work the positions also cover every equal-work span, the layer boundaries among them.  On a transformer
    the spans hold layer boundaries already but the head's."""
    graph = _prologue_graph()
    crossing = crossing_bytes(graph, graph.topo_position)
    work = (graph.fwd_s + graph.bwd_s)[graph.topo_order]
    assert cheapest_positions(crossing, 8).max() <= 120
    allowed = cheapest_positions(crossing, 8, work)
    assert len(allowed) <= MIN_CUT_POSITIONS + MIN_CUT_POSITIONS // 2
    done = np.cumsum(work) / work.sum()
    spans = np.minimum((done[allowed - 1] * (MIN_CUT_POSITIONS // 2)).astype(int), MIN_CUT_POSITIONS // 2 - 1)
    assert set(spans.tolist()) == set(range(MIN_CUT_POSITIONS // 2))
    assert {120 + 6 * k for k in range(1, 8)} <= set(allowed.tolist())
    transformer = generate_graph("transformer", layers=48)
    crossing = crossing_bytes(transformer, transformer.topo_position)
    work = (transformer.fwd_s + transformer.bwd_s)[transformer.topo_order]
    plain, spread = set(cheapest_positions(crossing, 16).tolist()), set(cheapest_positions(crossing, 16, work).tolist())
    assert plain <= spread and len(spread - plain) <= 2  # only the head's span, past the last layer boundary


@pytest.mark.parametrize("solver", ["even", "parmesan"])
def test_a_cheap_prologue_no_longer_hides_the_faster_schedule(solver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The missed case of issue 30 (a tiny GPT-2 on two devices), as a chain: the multi-stage candidates could
    only cut in the prologue, simulated far slower than estimated, and the search kept 1F1B although
    zero-bubble schedules run faster.  Now the search returns the fastest candidate of all."""
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    problem = Problem(_prologue_graph(), topology, "throughput",
                      ProblemSettings(micro_batches=(8,), schedule="auto", recompute=False))
    one = solve(problem.with_settings(schedule="1f1b"), solver)
    best = solve(problem, solver)
    monkeypatch.setattr(schedules, "ESTIMATE_MARGIN", float("inf"))
    wide = solve(problem, solver)
    assert one.metrics is not None and best.metrics is not None and wide.metrics is not None
    assert best.virtual_stages > 1 and best.schedule != "1f1b"
    assert best.metrics["time_per_sample_s"] < 0.95 * one.metrics["time_per_sample_s"]
    assert best.metrics["time_per_sample_s"] == pytest.approx(wide.metrics["time_per_sample_s"], rel=1e-12)


def test_estimates_follow_the_closed_forms() -> None:
    """Two ranks, equal ops with parameters (f = 1, b = 2, w = 1 each), no bytes between them: 1F1B's bubble
    is (R - 1)(f + b), ZB-H1's (R - 1)(f + i - w) = 1 per op, ZBV's (R - 1) max(f + i - 2w, f, i) = f."""
    nodes = [Node(f"op{i}", "aten.mm", 1.0, 2.0, param_bytes=4.0) for i in range(8)]
    graph = OpGraph.build("chain", nodes, [Edge(f"op{i}", f"op{i + 1}", 0.0) for i in range(7)])
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    problem = Problem(graph, topology, "throughput", ProblemSettings(micro_batches=(4,)))
    devices = [d.id for d in topology.devices]
    plan = Plan(stages=(Stage(tuple(graph.ids[:4]), (devices[0],)), Stage(tuple(graph.ids[4:]), (devices[1],))),
                micro_batches=4)
    estimates = CandidateEstimates(problem, plan, np.zeros(9))
    speed = topology.devices[0].speed
    stage = 4 * 3.0 / speed  # f + b of a stage's four ops
    assert estimates.iteration_s("1f1b", 1) == pytest.approx(4 * stage + stage)
    assert estimates.iteration_s("interleaved-zb", 1) == pytest.approx(4 * stage + 4 * 1.0 / speed)
    assert estimates.iteration_s("zbv", 2) == pytest.approx(4 * stage + 2 * 1.0 / speed)
    assert estimates.iteration_s("interleaved-1f1b", 2) == pytest.approx(4 * stage + stage / 2)


@pytest.mark.parametrize(("ranks", "edge_bytes"), [(2, 0.0), (4, 0.0), (4, 1e8)])
def test_estimates_are_the_simulated_iterations_of_equal_chains(ranks: int, edge_bytes: float) -> None:
    """The simulator as the oracle: on a chain of equal ops every candidate's estimate is its simulated
    iteration, with free transfers and, for 1F1B (the round trip) and the others (each hop once), with
    transfers short against a stage."""
    nodes = [Node(f"op{i}", "aten.mm", 1.0, 2.0, param_bytes=4.0) for i in range(12 * ranks)]
    graph = OpGraph.build("chain", nodes, [Edge(f"op{i}", f"op{i + 1}", edge_bytes) for i in range(12 * ranks - 1)])
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=ranks)
    problem = Problem(graph, topology, "throughput",
                      ProblemSettings(micro_batches=(4 * ranks,), schedule="auto", recompute=False))
    devices = [d.id for d in topology.devices]
    plan = Plan(stages=tuple(Stage(tuple(graph.ids[12 * r:12 * (r + 1)]), (devices[r],)) for r in range(ranks)),
                micro_batches=4 * ranks, schedule="1f1b")
    estimates = CandidateEstimates(problem, plan, crossing_bytes(graph, graph.topo_position))
    candidates = schedule_candidates(problem.settings, ranks, graph.n_ops, 4 * ranks)
    assert len(candidates) >= 8
    for name, v in candidates:
        candidate = plan.with_(schedule=name) if v == 1 else schedules.virtual_plan(problem, plan, name, v, False)
        assert candidate is not None
        simulated = simulate(problem, candidate).metrics["iteration_s"]
        assert estimates.iteration_s(name, v) == pytest.approx(simulated, rel=1e-9 if edge_bytes == 0 else 2e-3), name
