"""Generated graphs on generated topologies make problems the baseline solver and simulator accept."""

from __future__ import annotations

import pytest

from solvers.generate import generate_graph, generate_topology
from solvers.model.problem import Problem, ProblemSettings
from solvers.solving import solve
from solvers.validity import resolve_plan


@pytest.mark.parametrize(("topology", "graph", "params"), [
    ("hierarchical", "transformer", {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 128}),
    ("dgx1", "cnn", {"blocks": "2,2,2,2", "bottleneck": False, "micro_batch": 8}),
    ("torus2d", "random_dag", {"n_ops": 200, "seed": 1}),
])
def test_even_baseline_plans_generated_problems(topology: str, graph: str, params: dict[str, object]) -> None:
    problem = Problem(generate_graph(graph, **params), generate_topology(topology), "throughput",
                      ProblemSettings(micro_batches=(4,)))
    plan = solve(problem, "even", {}, time_limit_s=20)
    assert plan.status == "feasible"
    resolve_plan(problem, plan)
    assert plan.metrics is not None and plan.metrics["iteration_s"] > 0
