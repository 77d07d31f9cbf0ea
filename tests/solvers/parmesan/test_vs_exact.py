"""Parmesan against the ``exact`` oracle and the trivial splits (compute-only setting).

Zero edge bytes, no memory limit, 6 identical devices, 6 stages, 1 micro-batch.  With one
micro-batch every split has the same iteration time, so plans are compared by their simulated
bottleneck stage.  Parmesan is never behind ``even`` or ``pipedream``, and within 1 % of the exact
optimum wherever the oracle finishes (``max_ideals`` keeps the oracle fast here; the full
figures are in docs/benchmarks.md, ``bench.bench_exact``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings

from solvers.generate import generate_graph
from solvers.model.graph import OpGraph
from solvers.model.importers import import_pipedream, import_piper
from solvers.model.problem import Problem
from solvers.solving import solve
from tests.solvers.parmesan.strategies import compute_only_problem
from tests.strategies import examples, partition_problems

_ROOT = Path(__file__).resolve().parents[3]
DATA = next((p for p in (_ROOT / "shared" / "data", _ROOT.parent / "shared" / "data",
                         _ROOT.parent.parent / "shared" / "data") if p.is_dir()), _ROOT / "shared" / "data")
PIPER = sorted((DATA / "piper").glob("*.json"))
PIPEDREAM = sorted((DATA / "pipedream" / "profiles").glob("*/graph.txt"))
ORACLE = {"max_ideals": 2_000}  # gnmt's 17,914 ideals take ~30 s: the bench covers them
LIMIT_S = 10.0


def _graph(key: str) -> OpGraph:
    kind, _, name = key.partition("/")
    if kind == "piper":
        return import_piper(json.loads((DATA / "piper" / f"{name}.json").read_text()), name)
    if kind == "pipedream":
        return import_pipedream((DATA / "pipedream" / "profiles" / name / "graph.txt").read_text(), name)
    if name == "cnn":
        return generate_graph("cnn")
    if name == "transformer":
        return generate_graph("transformer", layers=4)
    return generate_graph("random_dag", n_ops=60, width=3, seed=int(name.rpartition("-")[2]))


KEYS = ([f"piper/{p.stem}" for p in PIPER] + [f"pipedream/{p.parent.name}" for p in PIPEDREAM]
        + ["generated/cnn", "generated/transformer", "generated/random-1", "generated/random-2"])


def _bottleneck_s(problem: Problem, solver: str, options: dict[str, object] | None = None) -> tuple[float, dict]:
    plan = solve(problem, solver, options, time_limit_s=LIMIT_S)
    assert plan.metrics is not None
    return float(plan.metrics["bottleneck_stage_s"]), {**plan.stats, "objective_s": plan.metrics["objective_s"]}


def _not_behind(a: tuple[float, dict], b: tuple[float, dict]) -> bool:
    """Plan ``a`` is at least as good as ``b``: a smaller iteration time, or the same and a
    bottleneck stage no larger (with one micro-batch iteration times mostly tie)."""
    (a_b, a_s), (b_b, b_s) = a, b
    if a_s["objective_s"] < b_s["objective_s"] * (1 - 1e-9):
        return True
    return a_s["objective_s"] <= b_s["objective_s"] * (1 + 1e-9) and a_b <= b_b * (1 + 1e-9)


@pytest.mark.parametrize("key", KEYS)
def test_parmesan_never_behind_even_pipedream_and_near_the_oracle(key: str) -> None:
    problem = compute_only_problem(_graph(key))
    found = _bottleneck_s(problem, "parmesan")
    parmesan, stats = found
    even, pipedream = _bottleneck_s(problem, "even"), _bottleneck_s(problem, "pipedream")
    exact, oracle = _bottleneck_s(problem, "exact", ORACLE)
    assert _not_behind(found, even)
    assert _not_behind(found, pipedream)
    even_b, pipedream_b = even[0], pipedream[0]
    if oracle["bottleneck_optimal"]:
        assert exact <= min(parmesan, even_b, pipedream_b) * (1 + 1e-9)
        assert parmesan <= exact * 1.01
        # the fix, not the safety net: Parmesan's own partition reaches the optimum here
        assert stats["partition_source"] == "parmesan"


def test_piper_resnet_regression() -> None:
    """The case that was behind: Parmesan's bottleneck was 4.7 % above even's on Piper's resnet."""
    if not PIPER:
        pytest.skip("shared/data not present")
    problem = compute_only_problem(_graph("piper/resnet"))
    plain, stats = _bottleneck_s(problem, "parmesan", {"baseline_guard": False})
    exact, _ = _bottleneck_s(problem, "exact")
    assert plain <= exact * (1 + 1e-9)
    assert stats["partition_source"] == "parmesan"


@settings(max_examples=examples(25), deadline=None)
@given(partition_problems(max_ops=7, zero_bytes=True))
def test_parmesan_matches_the_oracle_on_small_random_graphs(problem: Problem) -> None:
    exact = solve(problem, "exact")
    if exact.status == "infeasible":
        return
    plan = solve(problem, "parmesan", {"baseline_guard": False}, time_limit_s=LIMIT_S)
    assert plan.metrics is not None and exact.metrics is not None
    assert plan.metrics["bottleneck_stage_s"] <= exact.metrics["bottleneck_stage_s"] * 1.01 + 1e-12


@pytest.mark.parametrize("key", ["pipedream/inception_v3", "pipedream/nasnetamobile"])
def test_parmesan_alone_not_behind_where_the_dp_clusters(key: str) -> None:
    """Over the fronted-set budget the DP runs on hyper-operators; the band DP recovers the
    balance (without it Parmesan alone was 0.55 % / 0.07 % behind ``even`` here)."""
    if not PIPEDREAM:
        pytest.skip("shared/data not present")
    problem = compute_only_problem(_graph(key))
    alone = _bottleneck_s(problem, "parmesan", {"baseline_guard": False})
    assert alone[1]["k"] < problem.graph.n_ops and alone[1]["band_improved"]
    assert _not_behind(alone, _bottleneck_s(problem, "even"))
    assert _not_behind(alone, _bottleneck_s(problem, "pipedream"))
