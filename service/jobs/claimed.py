"""A claimed job: everything the solver child needs, and nothing that needs the database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Claimed:
    """What a worker needs to run a claimed job (sent as is to the solver child)."""

    job_id: str
    attempt: int
    solver: str
    objective: str
    settings: dict[str, Any]
    options: dict[str, Any]
    time_limit_s: float
    graph_body: bytes
    topology_body: bytes
    calibration_body: bytes | None = None  # the placer.calibration/v1 it simulates with (service.calibrations)
