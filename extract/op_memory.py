"""Per-op memory measured in a profiled training step: what autograd keeps, and each op's peak.

- **Kept for backward** (``act_bytes``): during the real forward on the profiled device, a
  ``torch.autograd.graph.saved_tensors_hooks`` pack hook sees every tensor autograd saves.  Its
  storage is charged once, to the first op (in execution order) that saves it, so the graph's sum
  is what autograd holds for one micro-batch; parameters, buffers and lifted constants are left
  out (the memory model counts them as parameters).  On a GPU this is what the device's kernels
  save (a fused attention keeps its output and log-sum-exp, not the attention matrix).
- **Peak working memory** (``mem_fwd_bytes`` / ``mem_bwd_bytes``, Parmesan Eq. 14): the
  allocator's events that ``torch.profiler`` records with ``profile_memory=True`` are attributed
  to the innermost call running; the peak of an event is the highest point of the running sum of
  its calls' allocations and frees, in time order, each call at its own peak
  (:func:`event_peak_bytes`), above what was allocated when it started.  It holds the op's
  outputs and its transient buffers; for the backward, the largest backward function of the op.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch


class SavedTensorLog:
    """Bytes of the tensors autograd saves, charged per op id (see the module docstring).

    ``weights``: storage addresses of the parameters, buffers and constants (never activations).
    ``current``: the op whose forward runs now (``None`` outside any op: the loss).
    """

    def __init__(self, weights: set[int]) -> None:
        self.weights = weights
        self.current: str | None = None
        self.seen: set[int] = set()
        self.act_bytes: dict[str, float] = defaultdict(float)

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if self.current is None or key in self.weights or key in self.seen or storage.nbytes() == 0:
            return t
        self.seen.add(key)
        self.act_bytes[self.current] += float(storage.nbytes())
        return t

    def hooks(self) -> Any:
        """The context in which the forward runs: the pack hook above, tensors returned as they are."""
        return torch.autograd.graph.saved_tensors_hooks(self.pack, _unpack)


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def weight_storages(module: torch.nn.Module) -> set[int]:
    """Storage addresses of every parameter, buffer and tensor attribute of ``module`` (lifted constants)."""
    out = {int(t.untyped_storage().data_ptr()) for t in [*module.parameters(), *module.buffers()]}
    for sub in module.modules():
        out.update(int(v.untyped_storage().data_ptr()) for v in vars(sub).values() if isinstance(v, torch.Tensor))
    return out


def event_peak_bytes(event: Any, cuda: bool) -> float:
    """The peak of ``event`` above what was allocated when it began (see the module docstring).

    Its calls run in time order: before call ``k`` the earlier calls have left their net bytes
    (allocated less freed), and call ``k`` reaches its own peak on top; the event's own
    allocations outside any call count at its end.  At least the event's net bytes, at least 0.
    """
    running, peak = 0.0, 0.0
    for child in sorted(event.cpu_children, key=lambda e: e.time_range.start):
        peak = max(peak, running + event_peak_bytes(child, cuda))
        running += _net(child, cuda)
    return max(peak, _net(event, cuda), 0.0)


def _net(event: Any, cuda: bool) -> float:
    return float(event.device_memory_usage if cuda else event.cpu_memory_usage)
