"""How plans are ranked wherever plans of different micro-batch counts meet (docs/simulator.md).

A throughput plan runs ``micro_batches`` micro-batches of ``graph.profiled_batch_size`` samples
per iteration, so two plans with different micro-batch counts train different global batches in
an iteration: their iteration times do not compare.  The comparison key is the time per sample,
``iteration_s / (micro_batches × profiled_batch_size)`` — unless the problem fixes the global
batch (``settings.global_batch``): then every plan trains the same samples per iteration and the
key is the iteration time itself.  A latency plan's key is its makespan.

Every place that picks between plans uses :func:`comparison_key_s`: each solver's search over
its candidates, ``auto``, a comparison's best solver, the dashboard and the client's ``.best``.
Each plan keeps its own lower bound; :func:`bound_key_s` expresses it in the key's unit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

RankedBy = Literal["time_per_sample_s", "iteration_s", "latency_s"]
RANKINGS: tuple[str, ...] = ("time_per_sample_s", "iteration_s", "latency_s")


def ranked_by(objective: str, global_batch: int | None) -> RankedBy:
    """The metric plans of a problem are ranked by: ``latency_s`` for latency problems,
    ``iteration_s`` for throughput problems with a fixed global batch, ``time_per_sample_s``
    otherwise."""
    if objective == "latency":
        return "latency_s"
    return "iteration_s" if global_batch is not None else "time_per_sample_s"


def time_per_sample_s(iteration_s: float, micro_batches: int, micro_batch_size: int) -> float:
    """Seconds per sample of a throughput plan: ``iteration_s / (micro_batches × micro_batch_size)``."""
    return iteration_s / (micro_batches * micro_batch_size)


def _number(figures: Mapping[str, Any], key: str) -> float | None:
    value = figures.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def samples_per_iteration(figures: Mapping[str, Any]) -> float | None:
    """Samples one iteration trains, from a plan's simulated figures (``samples_per_iteration``,
    or ``throughput_samples_per_s × iteration_s`` for figures that lack it); ``None`` if unknown."""
    samples = _number(figures, "samples_per_iteration")
    if samples is not None:
        return samples
    throughput, iteration = _number(figures, "throughput_samples_per_s"), _number(figures, "iteration_s")
    return throughput * iteration if throughput is not None and iteration is not None else None


def comparison_key_s(figures: Mapping[str, Any], objective: str, global_batch: int | None) -> float | None:
    """The plan's comparison key (smaller is better) from its simulated figures: a plan's
    ``metrics``, or a comparison row with the same names.

    Throughput: seconds per sample (``time_per_sample_s``, or ``iteration_s`` over
    :func:`samples_per_iteration`) by default, the iteration time with ``global_batch`` set.
    Latency: the makespan (``objective_s``).  ``None`` when the figures do not give it.
    """
    by = ranked_by(objective, global_batch)
    if by == "latency_s":
        return _number(figures, "objective_s")
    iteration = _number(figures, "iteration_s")
    if by == "iteration_s" or iteration is None:
        return iteration
    per_sample = _number(figures, "time_per_sample_s")
    if per_sample is not None:
        return per_sample
    samples = samples_per_iteration(figures)
    return iteration / samples if samples else None


def bound_key_s(figures: Mapping[str, Any], objective: str, global_batch: int | None) -> float | None:
    """The plan's own lower bound (``lower_bound_s``, one iteration of this plan) in the unit of
    :func:`comparison_key_s`: per sample where the key is per sample."""
    bound = _number(figures, "lower_bound_s")
    if bound is None or ranked_by(objective, global_batch) != "time_per_sample_s":
        return bound
    samples = samples_per_iteration(figures)
    return bound / samples if samples else None


def best_index(keys: list[float | None]) -> int | None:
    """Position of the least key (the first among equals), ``None`` if no key is known."""
    known = [(k, i) for i, k in enumerate(keys) if k is not None]
    return min(known)[1] if known else None
