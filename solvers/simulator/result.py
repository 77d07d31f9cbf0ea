"""What a simulation returns: the metrics dictionary and, on request, the timeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One interval on one resource: a device (``"gpu0"``) or a channel (``"gpu0->gpu1"``)."""

    resource: str
    task: str
    start_s: float
    end_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"resource": self.resource, "task": self.task, "start_s": self.start_s, "end_s": self.end_s}


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
