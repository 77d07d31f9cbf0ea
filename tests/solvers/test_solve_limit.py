"""``solve``'s time limit counts from the call: loading the solver's module is part of it (docs/python.md)."""

from __future__ import annotations

import sys
import time

import pytest

from solvers import registry
from solvers.base import Budget
from solvers.solving import solve
from tests.solvers import contract_fixtures as fx

MODULE = "tests.solvers.slow_loading_member"
LIMIT_S = 3.0
GRACE_S = 1.0


def test_the_limit_covers_loading_the_solvers_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, MODULE, raising=False)  # loaded by this call, not before
    table = {**registry._table(), "slow-loading-even": f"{MODULE}:SlowLoadingEven"}
    monkeypatch.setattr(registry, "_table", lambda: table)
    started = time.monotonic()
    plan = solve(fx.throughput_problem(), "slow-loading-even", time_limit_s=LIMIT_S)
    elapsed = time.monotonic() - started
    load_s = sys.modules[MODULE].LOAD_S
    assert elapsed >= load_s  # the module did load within the call
    assert elapsed <= LIMIT_S + GRACE_S, f"{elapsed:.2f} s for a {LIMIT_S} s limit with a {load_s} s load"
    assert plan.solve_time_s is not None and plan.solve_time_s <= LIMIT_S + GRACE_S
    assert plan.stages and plan.status == "feasible"


def test_a_share_of_a_budget_names_the_stated_limit() -> None:
    """A sub-budget (a share of what remains) keeps the limit the call stated, for messages."""
    whole = Budget(60.0)
    share = whole.sub(2 / 3)
    assert share.time_limit_s is not None and share.time_limit_s <= 40.0
    assert share.stated_limit_s() == 60.0
    assert share.sub(0.5).stated_limit_s() == 60.0
    assert whole.stated_limit_s() == 60.0
    assert Budget(None).sub(0.5).stated_limit_s() is None
