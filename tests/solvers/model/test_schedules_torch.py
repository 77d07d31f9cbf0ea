"""Differential test: Placer's action lists equal the compute order torch's schedule classes run.

Nothing is run on a process group.  Multi-stage classes build their ``pipeline_order_with_comms`` in
the constructor from stub stages (they read ``num_stages``, ``group_size``, ``group_rank`` and
``submod``); its compute actions are what ``_PipelineScheduleRuntime`` executes, overlapped
forward+backward pairs running their sub-actions in order.  ``ScheduleGPipe`` and ``Schedule1F1B``
execute their own loop (their ``pipeline_order`` is only a sketch: torch 2.13's 1F1B sketch numbers
the last rank's forwards from 1), so that loop runs on a recording stage without communication.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from torch.distributed.pipelining import schedules as torch_schedules

from solvers.model.errors import InvalidProblem
from solvers.model.schedules import PIPELINE_SCHEDULES, TORCH_SCHEDULE_CLASSES, build_schedule


class _RecordingStage:
    """The attributes and methods torch's schedules use, recording the compute it is asked for."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int, group_rank: int) -> None:
        self.stage_index, self.num_stages = stage_index, num_stages
        self.group_size, self.group_rank = group_size, group_rank
        self.submod = None
        self.is_last = stage_index == num_stages - 1
        self.log: list[str] = []

    def get_fwd_recv_ops(self, mb: int) -> list[Any]:
        return []

    get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = get_fwd_recv_ops

    def forward_one_chunk(self, mb: int, *args: Any, **kwargs: Any) -> None:
        self.log.append(f"{self.stage_index}F{mb}")

    def backward_one_chunk(self, mb: int, **kwargs: Any) -> None:
        self.log.append(f"{self.stage_index}B{mb}")

    def perform_reduce_grad(self, *args: Any) -> None:
        pass

    def clear_runtime_states(self) -> None:
        pass


def _compute(action: Any) -> Iterator[str]:
    if action.sub_actions:
        for sub in action.sub_actions:
            yield from _compute(sub)
    elif action.computation_type.value in ("F", "B", "I", "W"):
        yield str(action)


def torch_order(name: str, ranks: int, v: int, mb: int) -> tuple[list[list[str]], dict[int, int] | None]:
    """Per rank, the compute actions torch runs; and its stage -> rank map (multi-stage classes)."""
    cls = getattr(torch_schedules, TORCH_SCHEDULE_CLASSES[name])
    n = ranks * v
    if name in ("gpipe", "1f1b"):
        out = []
        for r in range(ranks):
            stage = _RecordingStage(r, n, ranks, r)
            schedule = cls(stage, mb)
            schedule._initialize_stage = lambda *args, **kwargs: None  # shape inference needs a process group
            schedule._step_microbatches()
            out.append(stage.log)
        return out, None
    schedule = cls([_RecordingStage(i, n, ranks, 0) for i in range(v)], mb)
    order = [[s for a in schedule.pipeline_order_with_comms[r] for s in _compute(a)] for r in range(ranks)]
    return order, dict(schedule.stage_index_to_group_rank)


def _cases() -> list[tuple[str, int, int, int]]:
    out = []
    for name in PIPELINE_SCHEDULES:
        vs = (1,) if name in ("gpipe", "1f1b") else (2,) if name in ("zbv", "dualpipev") else (1, 2)
        out += [(name, ranks, v, mb) for ranks in (2, 4) for v in vs for mb in (2 * ranks, 4 * ranks)]
    return out


@pytest.fixture(autouse=True)
def _quiet_torch() -> Iterator[None]:
    logging.disable(logging.WARNING)  # zero-bubble classes log their bubble counts
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize(("name", "ranks", "v", "mb"), _cases())
def test_action_lists_equal_torchs_compute_order(name: str, ranks: int, v: int, mb: int) -> None:
    schedule = build_schedule(name, ranks, v, mb)
    expected, stage_rank = torch_order(name, ranks, v, mb)
    assert [[str(a) for a in acts] for acts in schedule.actions] == expected
    if stage_rank is not None:
        assert schedule.stage_rank == tuple(stage_rank[j] for j in range(ranks * v))


@pytest.mark.parametrize(("name", "ranks", "v", "mb", "runs"), [
    ("interleaved-1f1b", 4, 2, 9, False), ("interleaved-1f1b", 4, 2, 10, True), ("interleaved-1f1b", 3, 2, 3, True),
    ("interleaved-zb", 2, 1, 5, False), ("zbv", 2, 1, 4, False), ("zbv", 3, 2, 1, True),
    ("dualpipev", 2, 2, 3, False), ("dualpipev", 4, 2, 7, False), ("dualpipev", 4, 2, 8, True),
])
def test_placer_refuses_the_counts_torch_refuses(name: str, ranks: int, v: int, mb: int, runs: bool) -> None:
    if runs:
        expected, _ = torch_order(name, ranks, v, mb)
        assert [[str(a) for a in acts] for acts in build_schedule(name, ranks, v, mb).actions] == expected
        return
    with pytest.raises(ValueError):
        torch_order(name, ranks, v, mb)
    with pytest.raises(InvalidProblem):
        build_schedule(name, ranks, v, mb)
