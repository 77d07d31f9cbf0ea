"""Every latency solver on every PipeDream profile: forward and training pass, on 4
identical V100 over PCIe and on 4 heterogeneous devices over a slow network.  Each plan must be
valid (the simulator replays its order without deadlock) and claim exactly what the simulator
measures.  Small time limits: 0.5 s per solver, 4 s for the portfolio ``auto`` (marked slow: it
runs each of its 14 cases, every profile on one pass and one topology, for most of its limit)."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import pytest

from solvers import registry
from solvers.model.graph import OpGraph
from solvers.model.importers import import_pipedream
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from solvers.solving import solve

_ROOT = Path(__file__).resolve().parents[2]  # the repository root
DATA = next((p for p in (_ROOT / "shared" / "data", _ROOT.parent / "shared" / "data") if p.is_dir()),
            _ROOT / "shared" / "data")
PROFILES = sorted(p.parent.name for p in (DATA / "pipedream" / "profiles").glob("*/graph.txt"))
LATENCY_SOLVERS = sorted(n for n in registry.BUILTIN if "latency" in registry.get_solver_class(n).objectives)
PORTFOLIO = "auto"
GiB = float(2**30)
TIME_LIMIT_S = 0.5
# ``auto`` splits its limit between its solvers' processes (0.35 s kept back) and kills them at
# the deadline: 4 s gives each of its 8 members about 0.9 s on 2 cores (with 2 s, a run of the
# whole suite under load 8 had members killed before any finished)
PORTFOLIO_TIME_LIMIT_S = 4.0

pytestmark = pytest.mark.skipif(not PROFILES, reason="shared/data not present")


def pcie_identical() -> Topology:
    """4 V100 (32 GiB), every pair 12 GB/s and 10 us."""
    devices = [Device(f"gpu{i}", "V100", "server", 32 * GiB, 1.0) for i in range(4)]
    return Topology.from_links("pcie4", devices, [Link(a.id, b.id, 12e9, 1e-5)
                                                  for i, a in enumerate(devices) for b in devices[i + 1:]])


def heterogeneous_slow() -> Topology:
    """4 devices of different speed and memory on two hosts: 4 GB/s inside a host, 1 GB/s and
    50 us between hosts."""
    specs = [(1.0, 32), (1.6, 16), (0.6, 12), (1.0, 24)]
    devices = [Device(f"gpu{i}", "GPU", f"host{i // 2}", mem * GiB, speed) for i, (speed, mem) in enumerate(specs)]
    links = [Link(a.id, b.id, 4e9 if a.node == b.node else 1e9, 5e-5)
             for i, a in enumerate(devices) for b in devices[i + 1:]]
    return Topology.from_links("hetero4-slow", devices, links)


TOPOLOGIES = {"pcie4": pcie_identical, "hetero4-slow": heterogeneous_slow}


@cache
def _graph(name: str) -> OpGraph:
    return import_pipedream((DATA / "pipedream" / "profiles" / name / "graph.txt").read_text(), name)


def test_the_matrix_covers_every_latency_solver_and_profile() -> None:
    assert len(PROFILES) == 14
    assert {"celeritas", "m-topo", "m-etf", "m-sct", "heft", "moirai", "single", "auto"} <= set(LATENCY_SOLVERS)


def _check(problem: Problem, name: str, time_limit_s: float) -> None:
    plan = solve(problem, name, time_limit_s=time_limit_s)
    assert plan.status in ("feasible", "optimal"), (name, plan.notes)
    measured = float(simulate(problem, plan).metrics["objective_s"])
    assert plan.claimed_objective_s is not None
    assert math.isclose(plan.claimed_objective_s, measured, rel_tol=1e-9), (name, plan.claimed_objective_s, measured)


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
@pytest.mark.parametrize("pass_", ["forward", "training"])
@pytest.mark.parametrize("profile", PROFILES)
def test_every_latency_solver_gives_a_valid_plan_that_claims_its_simulation(profile: str, pass_: str,
                                                                           topology: str) -> None:
    problem = Problem(_graph(profile), TOPOLOGIES[topology](), "latency",
                      ProblemSettings(pass_=pass_))
    for name in LATENCY_SOLVERS:
        if name != PORTFOLIO:
            _check(problem, name, TIME_LIMIT_S)


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_the_portfolio_gives_a_valid_plan_that_claims_its_simulation(profile: str) -> None:
    """Every profile once, the passes and topologies in turn (profile ``i`` takes pass ``i mod 2`` and
    topology ``(i // 2) mod 2``: each pair of pass and topology meets a quarter of the profiles); its
    members' own plans cover every case above."""
    i = PROFILES.index(profile)
    pass_ = ("forward", "training")[i % 2]
    topology = sorted(TOPOLOGIES)[(i // 2) % len(TOPOLOGIES)]
    problem = Problem(_graph(profile), TOPOLOGIES[topology](), "latency",
                      ProblemSettings(pass_=pass_))
    _check(problem, PORTFOLIO, PORTFOLIO_TIME_LIMIT_S)


PAPER_CELERITAS = {"adaptive": False, "fusion": "contiguous", "placement_order": "cpd-topo", "move_threshold": 1.0,
                   "finalists": 1, "list_schedulers": False}


@pytest.mark.parametrize("profile", PROFILES)
def test_celeritas_defaults_are_never_worse_than_the_papers_configuration(profile: str) -> None:
    """The paper's pipeline is one of the candidates the defaults simulate (docs/celeritas.md)."""
    for topology in sorted(TOPOLOGIES):
        for pass_ in ("forward", "training"):
            problem = Problem(_graph(profile), TOPOLOGIES[topology](), "latency",
                              ProblemSettings(pass_=pass_))
            default = solve(problem, "celeritas", time_limit_s=60.0).claimed_objective_s
            paper = solve(problem, "celeritas", PAPER_CELERITAS, time_limit_s=60.0).claimed_objective_s
            assert default is not None and paper is not None
            assert default <= paper * (1 + 1e-9), (topology, pass_, default, paper)
