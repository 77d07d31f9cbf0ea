"""What the plan page computes: the diff of two plans, the Chrome trace, task categories."""

from __future__ import annotations

from typing import Any

from service.dashboard.plan_view import PlanContext, chrome_trace, diff_plans, plan_diff
from solvers.model.plan import Plan, Stage
from solvers.simulator import TimelineEntry
from solvers.simulator.trace import task_category


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


def test_diff_of_replication_only_names_the_replicas_not_every_op() -> None:
    a = Plan(stages=(Stage(("x", "y"), ("g0",)), Stage(("z",), ("g1",))), micro_batches=8,
             metrics={"stage_times_s": [2e-3, 1e-3], "iteration_s": 0.03})
    b = Plan(stages=(Stage(("x", "y"), ("g0", "g2")), Stage(("z",), ("g1",))), micro_batches=16,
             metrics={"stage_times_s": [1e-3, 1e-3], "iteration_s": 0.02})
    diff = diff_plans(a, b)
    assert diff.boundaries_moved == ()
    assert [s.stage for s in diff.replicas_changed] == [0]
    assert diff.stages[0].devices_added == ("g2",) and diff.stages[0].devices_removed == ()
    assert [(s.time_a_s, s.time_b_s) for s in diff.stages] == [(2e-3, 1e-3), (1e-3, 1e-3)]
    assert [s.status for s in diff.stages] == ["changed", "same"]
    assert [(c.name, c.a, c.b) for c in diff.settings if c.changed] == [("micro-batches", 8, 16)]
    assert [(t.name, t.a, t.b) for t in diff.times] == [("iteration", 0.03, 0.02)]
    assert diff.summary() == ["no stage boundary moved", "stage 0: 1 replica → 2", "micro-batches: 8 → 16",
                              "2 of 3 ops on other devices"]


def test_diff_names_the_moved_boundary_and_the_added_stage() -> None:
    a = _plan((("x", "y", "z"), ("g0",)))
    b = Plan(stages=(Stage(("x",), ("g0",)), Stage(("y", "z"), ("g1",))), schedule="gpipe", recompute=True)
    diff = diff_plans(a, b)
    first, added = diff.stages
    assert (first.last_a, first.last_b, first.boundary_moved, first.status) == ("z", "x", True, "changed")
    assert (added.status, added.ops_a, added.ops_b, added.first_b, added.last_b) == ("added", None, 2, "y", "z")
    assert added.time_a_s is None and added.time_b_s is None
    assert diff.summary()[:2] == ["1 stage → 2 stages", "1 stage boundary moved"]
    assert "schedule: 1f1b → gpipe" in diff.summary() and "recompute: off → on" in diff.summary()
    assert "pass" not in [c.name for c in diff.settings]  # shown for latency plans only
    assert diff_plans(a, a).summary() == ["no stage boundary moved", "0 of 3 ops on other devices"]


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
    assert [task_category(t) for t in ("F12", "B0", "R3", "allreduce", "fc1", "Fx", "B")] == [
        "forward", "backward", "recompute", "allreduce", "op", "op", "op"]


def test_a_zbv_timeline_draws_chunks_and_hatched_weight_tasks() -> None:
    """ZBV on 2 ranks (stages 0 and 3 on d0, 1 and 2 on d1), 4 micro-batches: each action one bar
    with its stage, chunk and micro-batch; W bars hatched and in the legend; bars read ``s<stage>:<mb>``."""
    import re

    from service.dashboard.charts.gantt import gantt
    from solvers.simulator import simulate
    from tests.solvers.simulator.test_virtual_plans import _plan as chain_plan

    problem, plan = chain_plan("zbv", 2, 2, 4)
    entries = list(simulate(problem, plan, timeline=True).timeline or [])
    svg = str(gantt(entries, ["d0", "d1"], "t"))
    bars = re.findall(r'<rect [^>]*class="task-([a-z-]+)" data-stage="(\d)" data-chunk="(\d)" data-mb="(\d)"', svg)
    stage_chunk = {"0": "0", "3": "1", "1": "0", "2": "1"}
    assert {(k, s, m) for k, s, _, m in bars} == {
        (k, str(s), str(m)) for k in ("forward", "backward-input", "backward-weight") for s in range(4) for m in range(4)}
    assert all(stage_chunk[s] == c for _, s, c, _ in bars)
    assert svg.count('class="task-backward-weight"') == 16 and 'fill="url(#w-hatch)" class="task-backward-weight"' in svg
    assert 'data-legend="backward-weight"' in svg and "weight grad (W)" in svg and 'data-legend="backward-input"' in svg
    assert 'pointer-events="none">s3:2</text>' in svg
    assert "3W2: weight-grad of virtual stage 3 (chunk 1 of rank 0), micro-batch 2 on d0" in svg
    ctx: Any = PlanContext(row=type("Row", (), {"id": "plan_1"})(), doc={}, plan=plan, job=None, problem=problem)
    complete = [e for e in chrome_trace(ctx, entries)["traceEvents"] if e["ph"] == "X"]
    weight = [e for e in complete if e["cat"] == "backward-weight"]
    assert len(weight) == 16 and {e["name"] for e in weight} == {f"weight-grad s{s} mb{m}" for s in range(4)
                                                                 for m in range(4)}
    assert all(e["args"]["kind"] == "W" and e["args"]["rank"] == (0 if e["args"]["stage"] in (0, 3) else 1)
               for e in weight)


def test_timeline_entries_say_what_they_are_only_when_known() -> None:
    assert TimelineEntry("gpu0", "F0", 0.0, 1.0).to_dict() == {"resource": "gpu0", "task": "F0", "start_s": 0.0,
                                                               "end_s": 1.0}
    entry = TimelineEntry("gpu0", "2W1", 0.0, 1.0, "W", 2, 1, 0, 1)
    assert entry.to_dict() == {"resource": "gpu0", "task": "2W1", "start_s": 0.0, "end_s": 1.0, "kind": "W",
                               "stage": 2, "chunk": 1, "rank": 0, "micro_batch": 1}
