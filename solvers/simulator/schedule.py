"""Per-stage task orders of the pipeline schedules (GPipe, 1F1B) as data.

A task is ``(pass, micro_batch)`` with pass ``0`` = forward, ``1`` = backward.
"""

from __future__ import annotations

from solvers.model.errors import InvalidPlan
from solvers.model.settings import SCHEDULES

FORWARD, BACKWARD = 0, 1


def stage_task_order(schedule: str, n_stages: int, stage: int, micro_batches: int) -> list[tuple[int, int]]:
    """The order in which stage ``stage`` (0-based) of ``n_stages`` runs its tasks.

    GPipe: ``F0 .. F(MB-1)`` then ``B0 .. B(MB-1)``.  1F1B: ``w = min(S - s - 1, MB)`` warm-up
    forwards, then alternately one forward and one backward, then the remaining backwards.

    Raises
    ------
    InvalidPlan
        ``schedule`` is not one of :data:`~solvers.model.settings.SCHEDULES`; the message lists them.
    """
    mb = micro_batches
    if schedule == "gpipe":
        return [(FORWARD, m) for m in range(mb)] + [(BACKWARD, m) for m in range(mb)]
    if schedule != "1f1b":
        raise InvalidPlan(f"schedule: must be one of {', '.join(SCHEDULES)}, got {schedule!r}", field="schedule")
    warm = min(n_stages - stage - 1, mb)
    order = [(FORWARD, m) for m in range(warm)]
    for i in range(mb - warm):
        order.append((FORWARD, warm + i))
        order.append((BACKWARD, i))
    order.extend((BACKWARD, m) for m in range(mb - warm, mb))
    return order


def task_label(pass_: int, micro_batch: int) -> str:
    """Compact name of a stage task: ``F3`` / ``B3``."""
    return f"{'F' if pass_ == FORWARD else 'B'}{micro_batch}"
