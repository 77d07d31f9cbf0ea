"""m-ETF (Baechi): earliest (op, device) start first, memory-constrained."""

from __future__ import annotations

import pytest

from solvers.base import Budget, no_progress
from solvers.baselines.metf import METFOptions, METFSolver
from tests.solvers import contract_fixtures as fx
from tests.solvers.baselines._fixtures import GiB, chain, check_plan, devices_used, independent, pcie, problem


def _solve(p: object, budget_s: float = 10.0) -> object:
    return METFSolver().solve(p, METFOptions(), Budget(budget_s), no_progress)  # type: ignore[arg-type]


def test_independent_ops_are_balanced() -> None:
    p = problem(independent(8), pcie(4))
    assert check_plan(p, _solve(p)) == pytest.approx(2.0)  # type: ignore[arg-type]


def test_expensive_messages_keep_a_chain_on_one_device() -> None:
    p = problem(chain(10, 1e9), pcie(4))
    plan = _solve(p)
    check_plan(p, plan)  # type: ignore[arg-type]
    assert devices_used(plan) == 1  # type: ignore[arg-type]


def test_memory_forces_devices_without_room_out() -> None:
    """Each device holds two of the eight 1 GiB ops (x4 in training on 9 GiB devices)."""
    p = problem(chain(8, 1e3, param_bytes=1 * GiB), pcie(4, memory_bytes=9 * GiB), "training")
    plan = _solve(p)
    check_plan(p, plan)  # type: ignore[arg-type]
    assert devices_used(plan) == 4  # type: ignore[arg-type]


def test_pins_and_time_out() -> None:
    p = fx.larger_problem("latency", 20).with_settings(pinned={"l3.a": "h1g2"})
    plan = _solve(p, budget_s=0.0)
    assert plan.stats["timed_out"]  # type: ignore[attr-defined]
    check_plan(p, plan)  # type: ignore[arg-type]
    assert any("l3.a" in s.ops and s.devices == ("h1g2",) for s in plan.stages)  # type: ignore[attr-defined]
    plan = _solve(p)
    check_plan(p, plan)  # type: ignore[arg-type]
    assert any("l3.a" in s.ops and s.devices == ("h1g2",) for s in plan.stages)  # type: ignore[attr-defined]
