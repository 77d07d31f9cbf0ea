"""What the plan page computes: the diff of two plans, the Chrome trace, task categories."""

from __future__ import annotations

from typing import Any

from service.dashboard.plan_view import PlanContext, category, chrome_trace, plan_diff
from solvers.model.plan import Plan, Stage
from solvers.simulator import TimelineEntry


def _plan(*stages: tuple[tuple[str, ...], tuple[str, ...]]) -> Plan:
    return Plan(stages=tuple(Stage(ops=ops, devices=devs) for ops, devs in stages))


def test_diff_lists_the_ops_on_other_devices() -> None:
    a = _plan((("x", "y"), ("g0",)), (("z",), ("g1",)))
    b = _plan((("x",), ("g0",)), (("y", "z"), ("g1",)))
    moved = plan_diff(a, b)
    assert [(m.op, m.stage_a, m.devices_a, m.stage_b, m.devices_b) for m in moved] == [
        ("y", 0, ("g0",), 1, ("g1",))]
    assert plan_diff(a, a) == []


def test_diff_counts_replication_changes_and_missing_ops() -> None:
    a = _plan((("x", "y"), ("g0", "g1")))
    b = _plan((("x",), ("g0", "g1")), (("y",), ("g2",)), (("w",), ("g3",)))
    assert [m.op for m in plan_diff(a, b)] == ["y", "w"]
    assert plan_diff(a, b)[1].stage_a is None


def test_chrome_trace_is_the_trace_event_format() -> None:
    entries = [TimelineEntry("gpu0", "F0", 0.0, 1e-3), TimelineEntry("gpu0->gpu1", "F0 s0->s1", 1e-3, 1.5e-3),
               TimelineEntry("gpu1", "F0", 1.5e-3, 2.5e-3), TimelineEntry("gpu0", "B0", 3e-3, 5e-3)]
    ctx: Any = PlanContext(row=type("Row", (), {"id": "plan_1"})(), doc={}, plan=_plan((("x",), ("gpu0",))),
                           job=None, problem=None)
    trace = chrome_trace(ctx, entries)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in complete] == [
        ("F0", 0.0, 1000.0), ("F0 s0->s1", 1000.0, 500.0), ("F0", 1500.0, 1000.0), ("B0", 3000.0, 2000.0)]
    assert [e["cat"] for e in complete] == ["forward", "transfer", "forward", "backward"]
    assert complete[0]["tid"] == complete[3]["tid"] != complete[2]["tid"]
    assert complete[1]["pid"] == 2 and complete[0]["pid"] == 1
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {(1, 1): "gpu0", (2, 2): "gpu0->gpu1", (1, 3): "gpu1"}


def test_categories() -> None:
    assert [category(t) for t in ("F12", "B0", "R3", "allreduce", "fc1", "Fx", "B")] == [
        "forward", "backward", "recompute", "allreduce", "op", "op", "op"]
