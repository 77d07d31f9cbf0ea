"""Celeritas is never behind a list scheduler: on small generated graphs (fixed seeds, forward and
training pass, 2 to 4 devices) its simulated latency is at most that of ``m-etf``, ``m-topo``,
``m-sct``, ``heft`` and ``cpop`` (the list schedulers are kept among its candidates,
docs/celeritas.md).  Deterministic: the time limit is far above the solve times."""

from __future__ import annotations

import pytest

from solvers.generate import generate_graph, generate_topology
from solvers.model.problem import Problem, ProblemSettings
from solvers.solving import solve

LIST_SCHEDULERS = ("m-etf", "m-topo", "m-sct", "heft", "cpop")
TIME_LIMIT_S = 60.0
CASES = [  # (seed, ops, devices, GB/s, pass)
    (1, 60, 4, 10.0, "training"),
    (2, 80, 4, 10.0, "forward"),
    (3, 60, 2, 1.0, "training"),
    (4, 100, 3, 12.0, "forward"),
    (5, 70, 4, 0.5, "forward"),
]


@pytest.mark.parametrize(("seed", "n_ops", "n_devices", "gbps", "pass_"), CASES)
def test_celeritas_is_never_behind_a_list_scheduler(seed: int, n_ops: int, n_devices: int, gbps: float,
                                                    pass_: str) -> None:
    graph = generate_graph("random_dag", n_ops=n_ops, width=4, edge_prob=0.2, seed=seed)
    topo = generate_topology("hierarchical", nodes=1, gpus_per_node=n_devices, intra_bandwidth_GBps=gbps,
                             device="V100", memory_gib=32.0)
    problem = Problem(graph, topo, "latency", ProblemSettings(pass_=pass_))
    celeritas = solve(problem, "celeritas", time_limit_s=TIME_LIMIT_S)
    assert celeritas.status == "feasible"
    ours = float(celeritas.claimed_objective_s or 0.0)
    for name in LIST_SCHEDULERS:
        theirs = float(solve(problem, name, time_limit_s=TIME_LIMIT_S).claimed_objective_s or 0.0)
        assert ours <= theirs * (1 + 1e-9), f"celeritas {ours:.6f} s behind {name} {theirs:.6f} s"


def test_list_schedulers_off_keeps_a_celeritas_candidate() -> None:
    graph = generate_graph("random_dag", n_ops=60, width=4, edge_prob=0.2, seed=1)
    topo = generate_topology("hierarchical", nodes=1, gpus_per_node=4, intra_bandwidth_GBps=10.0, device="V100",
                             memory_gib=32.0)
    problem = Problem(graph, topo, "latency", ProblemSettings(pass_="training"))
    plan = solve(problem, "celeritas", {"list_schedulers": False}, time_limit_s=TIME_LIMIT_S)
    assert plan.stats["plan_from"] == "celeritas"
    kept = solve(problem, "celeritas", time_limit_s=TIME_LIMIT_S)
    assert kept.stats["plan_from"] in ("celeritas", *LIST_SCHEDULERS)
    assert float(kept.claimed_objective_s or 0.0) <= float(plan.claimed_objective_s or 0.0) * (1 + 1e-9)
