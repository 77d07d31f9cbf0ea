"""The least memory any plan needs, against what the devices offer (docs/cost-model.md).

An infeasible answer says why with these numbers.  Both bounds hold for every plan
:func:`~solvers.validity.resolve_plan` accepts, whatever its stages, replicas and micro-batch
count, from the memory model of :mod:`solvers.cost.memory`:

* **all devices together.**  A pipeline stage ``s`` on ``R_s`` devices holds on each of them at
  least ``P_s (1 + o) + (k_s K_s + W_s) / R_s`` with ``k_s >= 1`` micro-batches in flight, so its
  devices together hold at least ``P_s (1 + o) + K_s + W_s``; summed over the stages, every plan
  needs at least ``P (1 + o) + k K + max_v w_v`` bytes, where ``K`` is every op's activations
  without recomputation and 0 with it (only stage-boundary inputs are kept, which a plan may
  make small), ``w_v`` is op ``v``'s working memory, and ``k`` is 1 under 1F1B (the last stage
  holds one micro-batch) and the least candidate micro-batch count under GPipe (every stage
  holds all of them).  A latency plan keeps every output:
  ``P f + A + max_v w_v`` (``f = 1 + o`` in a training pass, else 1).
* **one device.**  Every replica holds all its stage's parameters, so the device that runs the
  op with the most parameter bytes holds at least ``max_v p_v (1 + o)``.

The devices offer their memory less the headroom; per-stage caps only lower it, so a plan
needing more than the uncapped total is infeasible a fortiori.
"""

from __future__ import annotations

from dataclasses import dataclass

from solvers.cost.memory import capacity_bytes, held_micro_batches, param_bytes_factor
from solvers.model.problem import Problem

GIB = float(2**30)


@dataclass(frozen=True)
class MemoryNeed:
    """The least memory any plan needs (``recompute``: with recomputation in every stage)."""

    recompute: bool
    total_bytes: float  # least bytes summed over the devices a plan uses
    one_device_bytes: float  # least bytes on the device running the op with the most parameters
    usable_bytes: float  # the devices' usable memory summed (headroom applied)
    largest_usable_bytes: float  # the largest device's usable memory
    n_devices: int

    @property
    def fits(self) -> bool:
        """False when no plan can fit: the need exceeds what the devices offer."""
        return self.total_bytes <= self.usable_bytes and self.one_device_bytes <= self.largest_usable_bytes

    def reason(self) -> str:
        """One sentence with the numbers (GiB)."""
        how = "with recomputation in every stage" if self.recompute else "without recomputation"
        return (f"memory: any plan {how} needs at least {self.total_bytes / GIB:.2f} GiB over all devices "
                f"({self.total_bytes / self.n_devices / GIB:.2f} GiB per device on average) and "
                f"{self.one_device_bytes / GIB:.2f} GiB on one device; the {self.n_devices} devices offer "
                f"{self.usable_bytes / GIB:.2f} GiB usable ({self.largest_usable_bytes / GIB:.2f} GiB on the largest)")

    def to_stats(self) -> dict[str, float | bool]:
        return {"memory_need_recompute": self.recompute, "memory_need_total_bytes": self.total_bytes,
                "memory_need_one_device_bytes": self.one_device_bytes,
                "memory_usable_bytes": self.usable_bytes, "memory_largest_usable_bytes": self.largest_usable_bytes}


def least_memory(problem: Problem, *, recompute: bool) -> MemoryNeed:
    """The least memory any plan of ``problem`` needs (see the module doc).

    ``recompute`` applies to throughput plans only: a latency plan keeps every output.
    """
    g = problem.graph
    throughput = problem.objective == "throughput"
    factor = 1.0 + problem.settings.optimizer_bytes_per_param_byte if throughput else param_bytes_factor(problem)
    params = float(g.param_bytes.sum()) * factor
    kept = 0.0 if throughput and recompute else float(g.act_bytes.sum())
    if throughput and problem.settings.own_schedule == "gpipe":
        kept *= min(problem.micro_batch_candidates)
    working = float(max(g.mem_fwd_bytes.max(), g.mem_bwd_bytes.max())) if g.n_ops else 0.0
    caps = [capacity_bytes(problem, d) for d in range(problem.topology.n_devices)]
    return MemoryNeed(
        recompute=throughput and recompute, total_bytes=params + kept + working,
        one_device_bytes=float(g.param_bytes.max()) * factor if g.n_ops else 0.0,
        usable_bytes=float(sum(caps)), largest_usable_bytes=max(caps), n_devices=len(caps))


def most_memory_bytes(problem: Problem) -> float:
    """Bytes a throughput stage holding the whole graph on one device needs without recomputation,
    with the most micro-batches in flight (on a calibrated topology, with the share ``r`` of the others that
    :func:`~solvers.cost.memory.held_micro_batches` counts): no plan needs more on any device (its stages
    hold subsets, replicas divide the activations), so recomputation is never required when this fits
    the smallest usable capacity (:func:`recompute_never_needed`)."""
    g = problem.graph
    s = problem.settings
    in_flight = max(held_micro_batches(problem, s.schedule, problem.topology.n_devices, 0, mb)
                    for mb in problem.micro_batch_candidates)  # the first of as many stages as devices
    shared = sum(float(r.get("bytes", 0.0)) for r in (g.attrs or {}).get("shared_params") or [])
    working = float(max(g.mem_fwd_bytes.max(), g.mem_bwd_bytes.max())) if g.n_ops else 0.0
    return ((float(g.param_bytes.sum()) + shared) * (1.0 + s.optimizer_bytes_per_param_byte)
            + in_flight * float(g.act_bytes.sum()) + working)


def recompute_never_needed(problem: Problem) -> bool:
    """True when every plan fits every device without recomputation (:func:`most_memory_bytes`)."""
    smallest = min(capacity_bytes(problem, d) for d in range(problem.topology.n_devices))
    caps = problem.settings.stage_memory_caps_bytes
    return most_memory_bytes(problem) <= min([smallest, *caps.values()])
