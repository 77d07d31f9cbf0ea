"""A plan's run measured beside its simulation, as the plan page draws it: the iteration, every
stage and every device on one time scale, each figure with its relative error (docs/dashboard.md).

Stage and device figures are per iteration so that they share the timeline's scale: a stage's
forward + backward per micro-batch (``stage_times_s``, solvers/model/run.py) times the plan's
micro-batches, and a device's compute (the simulator's ``busy_s``) beside the rank's profiled
forward and backward passes per profiled step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from solvers.model.run import LinedUp, RunRecord


@dataclass(frozen=True)
class TimeBar:
    """One figure in seconds per iteration, measured beside simulated (``None`` where not known)."""

    group: str  # "iteration" | "stage" | "device"
    label: str  # what the row is: "iteration", "stage 1 × 4" (its time per micro-batch × 4 micro-batches), "gpu3"
    key: str  # the figure's name: iteration_s, stage_times_s[1] × 4, busy_s[gpu3]
    measured_s: float | None
    simulated_s: float | None

    @property
    def relative_error(self) -> float | None:
        """(measured − simulated) / simulated, as :class:`~solvers.model.run.LinedUp` computes it."""
        return LinedUp(self.key, "s", self.measured_s, self.simulated_s).relative_error


def _times(value: Any, i: int) -> float | None:
    return float(value[i]) if isinstance(value, list) and i < len(value) and value[i] is not None else None


def _scaled(value: float | None, factor: int) -> float | None:
    return None if value is None else value * factor


def measured_bars(run: RunRecord, metrics: Mapping[str, Any], micro_batches: int,
                  device_order: list[str]) -> list[TimeBar]:
    """The iteration, every stage (per iteration: per micro-batch × ``micro_batches``) and every
    device's compute per iteration, measured by ``run`` beside the simulation's ``metrics``.
    Devices come in ``device_order`` (the topology's), then any the run names that it lacks."""
    m = max(1, micro_batches)
    bars = [TimeBar("iteration", "iteration", "iteration_s", run.summary.get("iteration_s"),
                    metrics.get("iteration_s"))]
    sim_stages, got_stages = metrics.get("stage_times_s"), run.summary.get("stage_times_s")
    n_stages = max(len(sim_stages or []), len(got_stages or []))
    for k in range(n_stages):
        bars.append(TimeBar("stage", f"stage {k} × {m}",
                            f"stage_times_s[{k}] × {m}", _scaled(_times(got_stages, k), m),
                            _scaled(_times(sim_stages, k), m)))
    busy = dict(metrics.get("busy_s") or {})
    ranks = {r.device: r for r in run.ranks}
    for device in [d for d in device_order if d in ranks or d in busy] + sorted(set(ranks) - set(device_order)):
        rank = ranks.get(device)
        measured = None
        if rank is not None and rank.forward_s and rank.profiled_steps:
            measured = (sum(rank.forward_s) + sum(rank.backward_s)) / len(rank.profiled_steps)
        simulated = busy.get(device)
        bars.append(TimeBar("device", device, f"busy_s[{device}]", measured,
                            None if simulated is None else float(simulated)))
    return bars
