"""Warnings about a graph's times on a topology, and what to do after measuring a run (docs/simulator.md).

:func:`problem_warnings` is the one place that decides when a plan's predicted times deserve
doubt; ``placer solve``, ``placer simulate``, the service's plans and the dashboard all show what
it returns.  :func:`next_steps` turns measured-over-simulated ratios into advice.

Where the times come from: ``placer extract`` records ``attrs.estimate`` (``rule: roofline``, the
device kind it estimated for); ``placer profile`` adds ``attrs.profile`` (the device kind it
measured on) and per-kind ``times`` on every node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from solvers.model.graph import OpGraph
from solvers.model.topology import Topology

TIMES_FROM_ABSENT_KIND = "times-from-absent-kind"
ROOFLINE_TIMES = "roofline-times"
HOLDS_WITHIN = 0.2  # measured within 20 % of simulated: the prediction holds
UNEVEN_SPREAD = 1.5  # stages whose measured/simulated ratios differ more than this: the balance is wrong


@dataclass(frozen=True)
class PlanWarning:
    """One reason to doubt a prediction: a stable ``code`` and a sentence that says what to do."""

    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def times_kind(graph: OpGraph) -> str | None:
    """The device kind of the graph's ``fwd_s`` / ``bwd_s``: profiled on, else estimated for (None: unknown)."""
    attrs: Mapping[str, Any] = graph.attrs or {}
    for key in ("profile", "estimate"):
        entry = attrs.get(key)
        if isinstance(entry, Mapping) and entry.get("device_kind"):
            return str(entry["device_kind"])
    return None


def is_roofline(graph: OpGraph) -> bool:
    """True when the op times are the extractor's roofline estimate and were never profiled."""
    attrs: Mapping[str, Any] = graph.attrs or {}
    estimate = attrs.get("estimate")
    return isinstance(estimate, Mapping) and estimate.get("rule") == "roofline" and not attrs.get("profile")


def _profile_command(kind: str) -> str:
    """The ``placer profile`` call that measures times of ``kind``: on the CPU, or a GPU of that kind."""
    return "placer profile --device cpu" if kind == "cpu" else f"placer profile --device cuda on a {kind}"


def problem_warnings(graph: OpGraph, topology: Topology) -> list[PlanWarning]:
    """Why the simulated times of plans of ``graph`` on ``topology`` may be far from measured ones."""
    out: list[PlanWarning] = []
    kinds = sorted({d.kind for d in topology.devices})
    source = times_kind(graph)
    with_times = {k for n in graph.nodes for k in (n.times or {})}
    if source is not None and source not in kinds and not with_times & set(kinds):
        out.append(PlanWarning(TIMES_FROM_ABSENT_KIND,
                           f"the graph's times are for device kind {source!r}, which topology {topology.name!r} does "
                           f"not have (its kinds: {', '.join(kinds)}), and the graph has no `times` for any of them: "
                           f"predicted times are {source} times scaled by each device's `speed`; profile the model "
                           f"on the target kind ({_profile_command(kinds[0])})"))
    if is_roofline(graph):
        out.append(PlanWarning(ROOFLINE_TIMES,
                           "the graph's op times are roofline estimates (placer extract), not measurements; small "
                           "ops and CPUs are often many times slower than the roofline: profile the model "
                           "(placer profile) before trusting predicted times"))
    return out


def next_steps(iteration_ratio: float, stage_ratios: Sequence[float], warnings: Sequence[PlanWarning] = ()) -> list[str]:
    """What to do after a run, from measured/simulated ratios (iteration, per stage) and the problem's warnings.

    - times that are estimates, or for another device kind: profile first (nothing else helps);
    - within 20 %: the prediction holds;
    - stages off by different factors (spread over 1.5x): the plan balanced the wrong times — profile on
      the target and re-plan;
    - off by one factor everywhere: calibrate the cost model from the run record, then compare again.
    """
    codes = {w.code for w in warnings}
    if codes & {ROOFLINE_TIMES, TIMES_FROM_ABSENT_KIND}:
        return ["profile: the graph's times are " + ("roofline estimates" if ROOFLINE_TIMES in codes else
                "for another device kind") + "; run placer profile on the target devices, solve again and compare"]
    ratios = [r for r in stage_ratios if r > 0 and r != float("inf")]
    if abs(iteration_ratio - 1.0) <= HOLDS_WITHIN and all(abs(r - 1.0) <= HOLDS_WITHIN for r in ratios):
        return [f"none: measured is within {HOLDS_WITHIN:.0%} of simulated"]
    if len(ratios) > 1 and max(ratios) / min(ratios) > UNEVEN_SPREAD:
        return [f"re-plan: stages are off by factors from {min(ratios):.3g}x to {max(ratios):.3g}x, so the plan "
                "balanced the wrong times; profile the model where it runs (placer profile) and solve again"]
    factor = median(ratios) if ratios else iteration_ratio
    return [f"calibrate: measured is {factor:.3g}x simulated throughout; fit the cost model to this run's record "
            "(placer calibrate run.json --plan plan.json --graph G --topology T -o calibration.json), then solve "
            "and compare again with --calibration calibration.json"]
