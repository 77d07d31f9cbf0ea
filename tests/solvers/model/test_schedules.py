"""Pipeline schedules as data: every generator's action lists are complete, ordered and on the right ranks."""

from __future__ import annotations

import itertools

import pytest

from solvers.cost.memory import in_flight_micro_batches
from solvers.model.errors import InvalidProblem
from solvers.model.schedules import (
    PIPELINE_SCHEDULES,
    Action,
    PipelineSchedule,
    build_schedule,
    check_schedule,
    peak_held_bytes,
    stage_ranks,
)
from solvers.simulator.schedule import BACKWARD, FORWARD, stage_task_order


def _valid_counts() -> list[tuple[str, int, int, int]]:
    out = []
    for name, ranks, v, mb in itertools.product(PIPELINE_SCHEDULES, (1, 2, 3, 4), (1, 2, 3), range(1, 10)):
        try:
            build_schedule(name, ranks, v, mb)
        except InvalidProblem:
            continue
        out.append((name, ranks, v, mb))
    return out


VALID = _valid_counts()


def test_every_schedule_has_valid_counts() -> None:
    assert {name for name, *_ in VALID} == set(PIPELINE_SCHEDULES)


@pytest.mark.parametrize("name", PIPELINE_SCHEDULES)
def test_every_action_runs_once_on_its_rank_after_its_inputs(name: str) -> None:
    for _, ranks, v, mb in (c for c in VALID if c[0] == name):
        sch = build_schedule(name, ranks, v, mb)
        assert sch.n_stages == ranks * v and len(sch.actions) == ranks
        assert sorted(sch.stage_rank) == sorted(r for r in range(ranks) for _ in range(v))
        seen: set[Action] = set()
        for r, acts in enumerate(sch.actions):
            for a in acts:
                assert sch.stage_rank[a.stage] == r, (sch.format(), a)
                assert a not in seen and 0 <= a.micro_batch < mb
                if a.kind in "BI":
                    assert Action("F", a.stage, a.micro_batch) in seen
                if a.kind == "W":
                    assert Action("I", a.stage, a.micro_batch) in seen
                seen.add(a)
        for j, m in itertools.product(range(sch.n_stages), range(mb)):  # F, and B or I + W, for each
            assert Action("F", j, m) in seen
            assert (Action("B", j, m) in seen) != (Action("I", j, m) in seen and Action("W", j, m) in seen)


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_one_stage_per_rank_schedules_are_the_stage_engines_orders(name: str) -> None:
    for ranks, mb in itertools.product((1, 2, 3, 5), range(1, 8)):
        sch = build_schedule(name, ranks, 1, mb)
        kind = {FORWARD: "F", BACKWARD: "B"}
        for r in range(ranks):
            expected = [Action(kind[p], r, m) for p, m in stage_task_order(name, ranks, r, mb)]
            assert list(sch.actions[r]) == expected


def test_stage_ranks_loop_round_robin_or_in_a_v() -> None:
    assert stage_ranks("interleaved-1f1b", 3, 2) == (0, 1, 2, 0, 1, 2)
    assert stage_ranks("zbv", 3, 2) == (0, 1, 2, 2, 1, 0)
    assert build_schedule("dualpipev", 2, 2, 4).rank_stages(0) == [0, 3]


def test_the_compact_form_is_torchs() -> None:
    assert build_schedule("gpipe", 2, 1, 2).format() == ["0F0 0F1 0B0 0B1", "1F0 1F1 1B0 1B1"]
    assert str(Action("W", 3, 1)) == "3W1" and Action.from_str(" 3W1") == Action("W", 3, 1)
    with pytest.raises(InvalidProblem, match="'3X1' is not an action"):
        Action.from_str("3X1")


@pytest.mark.parametrize(("name", "ranks", "v", "mb", "field", "text"), [
    ("pipedream", 2, 1, 4, "schedule", "'pipedream'"),
    ("gpipe", 2, 2, 4, "virtual_stages", "one stage per rank"),
    ("1f1b", 2, 2, 4, "virtual_stages", "one stage per rank"),
    ("zbv", 2, 1, 4, "virtual_stages", "exactly 2"),
    ("dualpipev", 2, 4, 4, "virtual_stages", "exactly 2"),
    ("dualpipev", 3, 2, 5, "micro_batches", "at least 2 x ranks = 6"),
    ("interleaved-1f1b", 4, 2, 9, "micro_batches", "multiple of max(1, micro_batches // ranks) = 2"),
    ("interleaved-zb", 2, 2, 5, "micro_batches", "multiple"),
    ("looped-bfs", 0, 2, 4, "ranks", ">= 1"),
    ("looped-bfs", 2, 0, 4, "virtual_stages", ">= 1"),
    ("looped-bfs", 2, 2, 0, "micro_batches", ">= 1"),
])
def test_counts_a_schedule_cannot_run_name_the_setting(name: str, ranks: int, v: int, mb: int, field: str,
                                                        text: str) -> None:
    with pytest.raises(InvalidProblem) as info:
        build_schedule(name, ranks, v, mb)
    assert info.value.field == field and text in info.value.message
    if field == "schedule":
        assert all(valid in info.value.message for valid in PIPELINE_SCHEDULES)


def test_peak_activations_match_the_memory_models_in_flight_counts() -> None:
    for name, ranks, mb in itertools.product(("gpipe", "1f1b"), (1, 2, 4), (1, 3, 8)):
        sch = build_schedule(name, ranks, 1, mb)
        assert peak_held_bytes(sch, [1.0] * ranks) == [in_flight_micro_batches(name, ranks, r, mb)
                                                        for r in range(ranks)]


def test_a_split_backward_holds_activations_until_its_weight_gradient() -> None:
    def one_rank(*acts: str) -> PipelineSchedule:
        return PipelineSchedule("custom", 1, 1, 2, (0,), (tuple(Action(a[0], 0, int(a[1])) for a in acts),))

    assert peak_held_bytes(one_rank("F0", "B0", "F1", "B1"), [5.0]) == [5.0]
    assert peak_held_bytes(one_rank("F0", "I0", "F1", "I1", "W0", "W1"), [5.0]) == [10.0]
    assert peak_held_bytes(one_rank("F0", "I0", "W0", "F1", "I1", "W1"), [5.0]) == [5.0]


def test_interleaved_stages_hold_their_own_activation_sizes() -> None:
    sch = build_schedule("interleaved-1f1b", 2, 2, 4)
    # rank 0 warms up with 0F0 0F1 2F0 2F1 0F2, holding 1 + 1 + 10 + 10 + 1 before its first backward
    assert sch.format()[0].startswith("0F0 0F1 2F0 2F1 0F2 2B0")
    assert peak_held_bytes(sch, [1.0, 100.0, 10.0, 1000.0])[0] == 23.0


def _two_ranks(*lists: str) -> PipelineSchedule:
    return PipelineSchedule("custom", 2, 1, 1, (0, 1), tuple(tuple(Action.from_str(a) for a in acts.split())
                                                           for acts in lists))


@pytest.mark.parametrize(("lists", "text"), [
    (("0F0 0B0", "1F0 1B0 1B0"), "action 1B0 runs twice"),
    (("0F0 0B0 1F0", "1B0"), "action 1F0 runs on rank 0, but stage 1 is on rank 1"),
    (("0F0 0I0", "1F0 1B0"), "stage 0, micro-batch 0 needs one F and either one B or one I and one W"),
    (("0F0 0B0 0W0", "1F0 1B0"), "stage 0, micro-batch 0 needs"),
    (("0F0 0B0", "1B0"), "stage 1, micro-batch 0 needs"),
    (("0F0 0B0 0F1", "1F0 1B0"), "not an F, B, I or W of a stage below 2 and a micro-batch below 1"),
])
def test_malformed_action_lists_are_refused_naming_the_action(lists: tuple[str, str], text: str) -> None:
    with pytest.raises(InvalidProblem) as info:
        check_schedule(_two_ranks(*lists))
    assert info.value.field == "schedule" and text in info.value.message


def test_generated_schedules_pass_the_check() -> None:
    for name, ranks, v, mb in VALID:
        check_schedule(build_schedule(name, ranks, v, mb))
