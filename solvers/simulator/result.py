"""What a simulation returns: the metrics dictionary and, on request, the timeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One interval on one resource: a device (``"gpu0"``) or a channel (``"gpu0->gpu1"``).

    A pipeline task also says what it is (``None`` where it does not apply, e.g. an op-level task):
    ``kind`` is the action (:data:`TASK_KINDS`: ``F`` forward, ``B`` full backward, ``I`` input
    gradient, ``W`` weight gradient), ``allreduce`` or ``transfer``; ``stage`` the virtual stage
    (the sending stage of a transfer), ``chunk`` its index among its rank's stages (0 with one stage
    per rank), ``rank`` the rank group that runs it, ``micro_batch`` the micro-batch.
    """

    resource: str
    task: str
    start_s: float
    end_s: float
    kind: str | None = None
    stage: int | None = None
    chunk: int | None = None
    rank: int | None = None
    micro_batch: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The four fields, then those of :attr:`kind` ... :attr:`micro_batch` that are set."""
        out: dict[str, Any] = {"resource": self.resource, "task": self.task, "start_s": self.start_s,
                               "end_s": self.end_s}
        for name in TASK_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


TASK_KINDS: tuple[str, ...] = ("F", "B", "I", "W", "allreduce", "transfer")
TASK_FIELDS: tuple[str, ...] = ("kind", "stage", "chunk", "rank", "micro_batch")


@dataclass(frozen=True)
class SimulationResult:
    """The simulator's verdict on a plan (see docs/simulator.md for every metric)."""

    metrics: dict[str, Any]
    timeline: list[TimelineEntry] | None = field(default=None)


@dataclass
class EngineRun:
    """What one engine run produces: the makespan, traffic and (optionally) the timeline."""

    makespan_s: float
    bytes_per_channel: dict[tuple[int, int], float]
    timeline: list[TimelineEntry] | None
