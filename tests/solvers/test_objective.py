"""Throughput is time per sample wherever plans of different micro-batch counts meet, and a
fixed ``global_batch`` makes the iteration time the objective (docs/simulator.md, docs/formats.md)."""

from __future__ import annotations

import pytest

from solvers import Problem, generate_graph, generate_topology, solve
from solvers.base import ProgressEvent
from solvers.model.errors import InvalidPlan, InvalidProblem
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.ranking import best_index, bound_key_s, comparison_key_s, ranked_by
from solvers.model.scaling import graph_at_batch
from solvers.model.settings import ProblemSettings, global_batch_candidates, settings_from_dict
from solvers.model.topology import Topology
from solvers.simulator import simulate

THROUGHPUT_SOLVERS = ("parmesan", "even", "pipedream", "rannc", "exact")


@pytest.fixture(scope="module")
def transformer() -> tuple[OpGraph, Topology]:
    """A small version of the issue's example: a generated transformer on a hierarchical topology."""
    return generate_graph("transformer", layers=2), generate_topology("hierarchical", nodes=2, gpus_per_node=2)


def _problem(case: tuple[OpGraph, Topology], **settings: object) -> Problem:
    return Problem(case[0], case[1], "throughput", settings_from_dict(settings))


@pytest.mark.parametrize("solver", THROUGHPUT_SOLVERS)
def test_candidate_search_is_never_worse_per_sample_than_one_candidate(
        transformer: tuple[OpGraph, Topology], solver: str) -> None:
    """The issue's repro at small scale: with micro-batches [4, 8, 16] a solver keeps the best
    time per sample, not the shortest iteration (which 4 micro-batches always have)."""
    searched = solve(_problem(transformer, micro_batches=[4, 8, 16]), solver, time_limit_s=20)
    singles = {m: solve(_problem(transformer, micro_batches=[m]), solver, time_limit_s=20) for m in (4, 8, 16)}
    assert searched.metrics is not None and all(p.metrics for p in singles.values())
    per_sample = searched.metrics["time_per_sample_s"]
    assert per_sample <= min(p.metrics["time_per_sample_s"] for p in singles.values()) * (1 + 1e-9)  # type: ignore[index]
    assert searched.micro_batches > 4  # the shortest iteration is not what wins
    assert searched.metrics["iteration_s"] > singles[4].metrics["iteration_s"]  # type: ignore[index]
    assert searched.metrics["samples_per_iteration"] == searched.micro_batches * transformer[0].profiled_batch_size


def test_auto_ranks_members_per_sample(transformer: tuple[OpGraph, Topology]) -> None:
    # under 1F1B the chosen member's plan is the answer (no schedule search after the portfolio)
    plan = solve(_problem(transformer, micro_batches=[4, 16], schedule="1f1b"), "auto",
                 {"solvers": ["even", "pipedream"], "workers": 1}, time_limit_s=20)
    assert plan.metrics is not None
    rows = plan.stats["portfolio"]
    keys = [r["key_s"] for r in rows]
    assert plan.stats["chosen"] == rows[best_index(keys) or 0]["name"]
    assert plan.metrics["time_per_sample_s"] == pytest.approx(min(k for k in keys if k is not None), rel=1e-12)


def test_the_key_and_each_plans_bound() -> None:
    fast_iteration = {"objective_s": 0.04, "iteration_s": 0.04, "throughput_samples_per_s": 800.0,
                      "lower_bound_s": 0.03}
    fast_per_sample = {"objective_s": 0.1, "iteration_s": 0.1, "samples_per_iteration": 128.0, "lower_bound_s": 0.09}
    assert comparison_key_s(fast_iteration, "throughput", None) == pytest.approx(0.04 / 32)
    assert comparison_key_s(fast_per_sample, "throughput", None) == pytest.approx(0.1 / 128)
    assert best_index([comparison_key_s(f, "throughput", None) for f in (fast_iteration, fast_per_sample)]) == 1
    assert best_index([comparison_key_s(f, "throughput", 128) for f in (fast_iteration, fast_per_sample)]) == 0
    assert bound_key_s(fast_per_sample, "throughput", None) == pytest.approx(0.09 / 128)
    assert bound_key_s(fast_per_sample, "throughput", 128) == 0.09
    assert comparison_key_s({"objective_s": 2.0}, "latency", None) == 2.0
    assert ranked_by("throughput", None) == "time_per_sample_s" and ranked_by("throughput", 8) == "iteration_s"
    assert comparison_key_s({}, "throughput", None) is None and best_index([None, None]) is None


def test_global_batch_scales_the_graph_and_minimises_the_iteration(transformer: tuple[OpGraph, Topology]) -> None:
    graph, topology = transformer
    problem = _problem(transformer, global_batch=64, micro_batches=[4, 16])
    plan = solve(problem, "even")
    assert plan.metrics is not None and plan.metrics["samples_per_iteration"] == 64
    tried = plan.stats["global_batch_candidates"]
    assert set(tried) == {"4", "16"} and plan.metrics["iteration_s"] == pytest.approx(min(tried.values()))
    m = plan.micro_batches
    scaled = Problem(graph_at_batch(graph, 64 // m), topology, "throughput", ProblemSettings(micro_batches=(m,)))
    assert scaled.graph.profiled_batch_size == 64 // m
    assert simulate(scaled, plan).metrics["iteration_s"] == pytest.approx(plan.metrics["iteration_s"], rel=1e-12)
    assert comparison_key_s(plan.metrics, "throughput", 64) == plan.metrics["iteration_s"]
    # the same plan split into micro-batches of the profiled size would train another batch
    assert simulate(Problem(graph, topology, settings=ProblemSettings(micro_batches=(m,))), plan).metrics[
        "samples_per_iteration"] == m * graph.profiled_batch_size


def test_graph_at_batch_scales_what_grows_with_the_batch() -> None:
    graph = generate_graph("transformer", layers=1)
    double = graph_at_batch(graph, 2 * graph.profiled_batch_size)
    assert double.profiled_batch_size == 2 * graph.profiled_batch_size
    for field in ("fwd_s", "bwd_s", "act_bytes", "mem_fwd_bytes", "mem_bwd_bytes", "edge_bytes"):
        assert getattr(double, field) == pytest.approx(2 * getattr(graph, field)), field
    assert double.param_bytes == pytest.approx(graph.param_bytes)
    assert graph_at_batch(graph, graph.profiled_batch_size) is graph


def test_global_batch_defaults_and_bad_values(transformer: tuple[OpGraph, Topology]) -> None:
    assert settings_from_dict({"global_batch": 48}).micro_batches == (1, 2, 4, 8, 16, 48)
    assert settings_from_dict({"global_batch": 512}).micro_batches == (1, 2, 4, 8, 16, 32, 64)
    assert global_batch_candidates(15) == (1, 15)
    again = settings_from_dict(settings_from_dict({"global_batch": 48}).to_dict())
    assert again == settings_from_dict({"global_batch": 48})
    with pytest.raises(InvalidProblem, match="do not split into 16") as bad:
        settings_from_dict({"global_batch": 24, "micro_batches": [4, 16]})
    assert bad.value.field == "settings.global_batch"
    with pytest.raises(InvalidProblem) as bad:
        settings_from_dict({"global_batch": 0})
    assert bad.value.field == "settings.global_batch"
    with pytest.raises(InvalidProblem, match="throughput objective only") as bad:
        Problem(*transformer, "latency", settings_from_dict({"global_batch": 8}))
    assert bad.value.field == "settings.global_batch"
    problem = _problem(transformer, global_batch=8, micro_batches=[2])
    with pytest.raises(InvalidProblem) as bad:
        problem.at_micro_batches(3)
    assert bad.value.field == "settings.global_batch"
    plan = Plan((Stage(tuple(transformer[0].ids), ("gpu0",)),), micro_batches=3)
    with pytest.raises(InvalidPlan) as wrong:
        simulate(problem, plan)
    assert wrong.value.field == "micro_batches"


def test_global_batch_progress_covers_every_candidate_once(transformer: tuple[OpGraph, Topology]) -> None:
    events: list[ProgressEvent] = []
    solve(_problem(transformer, global_batch=32, micro_batches=[2, 8]), "even", progress=events.append)
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions) and 0 < fractions[0] <= 0.5 and fractions[-1] == pytest.approx(1.0)
    assert {e.message.split(":")[0] for e in events} == {"2 micro-batches", "8 micro-batches"}
