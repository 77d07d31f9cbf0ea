"""m-TOPO (Baechi): M-TOPO order, devices filled in turn up to a balanced memory share."""

from __future__ import annotations

from solvers.base import Budget, no_progress
from solvers.baselines.mtopo import MTopoOptions, MTopoSolver
from solvers.listsched.orders import m_topo_order
from tests.solvers import contract_fixtures as fx
from tests.solvers.baselines._fixtures import GiB, chain, check_plan, independent, pcie, problem


def _solve(p: object, budget_s: float = 10.0) -> object:
    return MTopoSolver().solve(p, MTopoOptions(), Budget(budget_s), no_progress)  # type: ignore[arg-type]


def test_devices_are_filled_in_m_topo_order() -> None:
    p = problem(chain(40, 1e6, param_bytes=0.25 * GiB), pcie(4))
    plan = _solve(p)
    check_plan(p, plan)  # type: ignore[arg-type]
    where = {op: int(s.devices[0][1:]) for s in plan.stages for op in s.ops}  # type: ignore[attr-defined]
    order = m_topo_order(p.graph.succ, p.graph.pred)
    devices = [where[p.graph.nodes[v].id] for v in order]
    assert devices == sorted(devices) and len(set(devices)) == 4  # contiguous blocks, balanced share


def test_memory_is_respected_when_tight() -> None:
    """4 GiB of parameters x 4 (training, Adam) on 4 devices of 5 GiB each."""
    p = problem(independent(16, param_bytes=0.25 * GiB), pcie(4, memory_bytes=5 * GiB), "training")
    check_plan(p, _solve(p))  # type: ignore[arg-type]


def test_no_packing_is_infeasible() -> None:
    p = problem(independent(3, param_bytes=0.6 * GiB), pcie(2, memory_bytes=1 * GiB))
    plan = _solve(p)
    assert plan.status == "infeasible" and plan.stats["best_effort_ops"] >= 1  # type: ignore[attr-defined]


def test_time_out_still_gives_a_valid_plan() -> None:
    p = fx.larger_problem("latency", 20)
    plan = _solve(p, budget_s=0.0)
    assert plan.stats["timed_out"]  # type: ignore[attr-defined]
    check_plan(p, plan)  # type: ignore[arg-type]
