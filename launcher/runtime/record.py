"""The run record (``placer.run/v1``, docs/launcher.md): every rank's measurements, gathered and written by rank 0.

Without ``--profile-steps`` a rank records its iteration times and peak memory.  The steps named
by ``--profile-steps N`` (the N after the warm-up) run under ``torch.profiler``; the runner's
stage forwards and backwards run inside ``record_function`` ranges (``placer::forward``,
``placer::backward``), and the process group's own ``send`` / ``recv`` events give each
transfer's time, shape and dtype:

- **Forward**: the stage module's call (forward pre-/post-hooks), one range per micro-batch.
- **Backward**: ``PipelineStage.backward_one_chunk`` (and ``backward_weight_one_chunk``, the
  weight-gradient part of a split backward, a range of its own), or the uneven runner's backward of one
  micro-batch less the receives and sends inside it (``placer::phase`` ranges), so that a wait for a
  neighbour's gradient is not counted as compute.
- **Transfers**: ``gloo:send`` / ``gloo:recv`` (``nccl:`` on GPUs); a transfer's phase (forward
  activation or backward gradient) is that of the last ``placer::phase::<phase>::<send|recv>`` range
  of its kind begun before it was posted (around ``PipelineStage.get_fwd_send_ops`` and its kin,
  the uneven runner's receives and sends; the op-level runner's forward and backward passes mark
  both kinds); what was posted before the first such range (the step's opening barrier) is left
  out.  An op-level (latency)
  plan's runner records transfers but no stage ranges (its stages are devices running op by op).
- **Several stages per rank** (virtual stages): the ranges are ``placer::forward::<stage>`` and
  ``placer::backward::<stage>``; the record lists the stage of each (``forward_stages``,
  ``backward_stages``).
"""

from __future__ import annotations

import functools
import math
import platform
import resource
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from solvers import __version__
from solvers.model.run import RankRecord, Transfer

FORWARD, BACKWARD, COMM = "placer::forward", "placer::backward", "placer::phase"
DTYPE_BYTES = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2, "double": 8, "long int": 8, "int": 4,
               "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
               "c10::complex<double>": 16}


class StepRecorder:
    """Wraps a runner's stage calls in profiler ranges and reads every profiled step's events."""

    def __init__(self, runner: Any | None) -> None:
        """``runner``: the runner whose calls to time (None: no profiled steps, nothing wrapped)."""
        self.forward_s: list[float] = []
        self.backward_s: list[float] = []
        self.forward_stages: list[int] = []  # the stage of each entry, for a runner with several stages
        self.backward_stages: list[int] = []
        self.several = False
        self.transfers: list[Transfer] = []
        self.steps: list[int] = []
        self._open: list[Any] = []
        if runner is not None:
            self._instrument(runner)

    # ---- ranges around the runner's calls ------------------------------------------------------------
    def _instrument(self, runner: Any) -> None:
        if hasattr(runner, "stage_indices"):  # several stages per rank: ranges named by stage
            self.several = True
            for j, module, stage in zip(runner.stage_indices, runner.modules, runner.stages, strict=True):
                module.register_forward_pre_hook(self._opener(f"{FORWARD}::{j}"))
                module.register_forward_hook(self._exit_forward)
                self._instrument_stage(stage, f"{BACKWARD}::{j}")
            return
        module = getattr(runner, "module", None)
        if isinstance(module, torch.nn.Module):
            module.register_forward_pre_hook(self._enter_forward)
            module.register_forward_hook(self._exit_forward)
        stage = getattr(runner, "stage", None)
        if stage is not None and hasattr(stage, "backward_one_chunk"):
            self._instrument_stage(stage, BACKWARD)
        elif hasattr(runner, "_recv_output_grads"):  # the uneven runner
            runner._backward = ranged(BACKWARD, runner._backward)
            for name, phase, op in (("_recv_inputs", "forward", "recv"), ("_send_outputs", "forward", "send"),
                                    ("_recv_output_grads", "backward", "recv"),
                                    ("_send_input_grads", "backward", "send")):
                setattr(runner, name, ranged(f"{COMM}::{phase}::{op}", getattr(runner, name)))
        elif hasattr(runner, "_route_input_grads"):  # the op-level (latency) runner: its passes mark the phases
            runner._forward = ranged(f"{COMM}::forward::any", runner._forward)
            runner._backward = ranged(f"{COMM}::backward::any", runner._backward)

    @staticmethod
    def _instrument_stage(stage: Any, backward: str) -> None:
        """A ``PipelineStage``'s backward (both parts of a split one) in ``backward`` ranges, its sends and
        receives marked by phase.

        A part that does no work gets no range, so that a backward run whole counts once: torch's first
        stage does nothing at ``I`` and all of it at ``W``, and a stage that runs whole at ``I``
        (:class:`launcher.runtime.split_backward.SplitSafeStage`) does nothing at ``W``.
        """
        def input_idle(*_: Any, full_backward: bool = True, **__: Any) -> bool:
            return bool(stage.is_first) and not full_backward

        def weight_idle(*_: Any, **__: Any) -> bool:
            return bool(getattr(stage, "runs_whole", False))

        stage.backward_one_chunk = ranged(backward, stage.backward_one_chunk, unless=input_idle)
        stage.backward_weight_one_chunk = ranged(backward, stage.backward_weight_one_chunk, unless=weight_idle)
        for name, phase, op in (("get_fwd_send_ops", "forward", "send"), ("get_fwd_recv_ops", "forward", "recv"),
                                ("get_bwd_send_ops", "backward", "send"), ("get_bwd_recv_ops", "backward", "recv")):
            setattr(stage, name, ranged(f"{COMM}::{phase}::{op}", getattr(stage, name)))

    def _opener(self, name: str) -> Callable[..., None]:
        """A forward pre-hook that opens a ``name`` range."""
        def hook(*_: Any) -> None:
            self._open_range(name)
        return hook

    def _enter_forward(self, *_: Any) -> None:
        self._open_range(FORWARD)

    def _open_range(self, name: str) -> None:
        scope: Any = record_function(name)
        scope.__enter__()
        self._open.append(scope)

    def _exit_forward(self, *_: Any) -> None:
        if self._open:
            self._open.pop().__exit__(None, None, None)

    # ---- one profiled step -----------------------------------------------------------------------------
    @contextmanager
    def step(self, index: int) -> Iterator[None]:
        """Run the body under torch.profiler and keep what it recorded as step ``index``."""
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with profile(activities=activities, record_shapes=True) as prof:
            yield
        self._read(prof.events(), index)
        self.steps.append(index)

    def _read(self, events: Any, index: int) -> None:
        ranges: dict[str, list[tuple[float, float]]] = {}
        marks: list[tuple[float, float, str, str]] = []  # (start, end, phase, op) of every placer::phase range
        comms: list[Any] = []
        for e in events:
            name = str(e.name)
            if name.startswith(COMM):
                _, _, mark_phase, mark_op = name.split("::")
                marks.append((e.time_range.start, e.time_range.end, mark_phase, mark_op))
            elif name.startswith((FORWARD, BACKWARD)) or "barrier" in name:
                ranges.setdefault("barrier" if "barrier" in name else name, []).append(
                    (e.time_range.start, e.time_range.end))
            elif name.split(":")[-1] in ("send", "recv") and name.split(":")[0] in ("gloo", "nccl"):
                comms.append(e)
        inside = [(a, b) for a, b, _, op in marks if op != "any"]
        forwards = sorted((a, b, key) for key, spans in ranges.items() if key.startswith(FORWARD) for a, b in spans)
        backwards = sorted((a, b, key) for key, spans in ranges.items() if key.startswith(BACKWARD) for a, b in spans)
        self.forward_s += [(b - a) * 1e-6 for a, b, _ in forwards]
        for a, b, _ in backwards:
            waited = sum(d - c for c, d in inside if a <= c and d <= b)
            self.backward_s.append(max(0.0, b - a - waited) * 1e-6)
        if self.several:  # "placer::forward::<stage>"
            self.forward_stages += [int(key.rsplit("::", 1)[1]) for _, _, key in forwards]
            self.backward_stages += [int(key.rsplit("::", 1)[1]) for _, _, key in backwards]
        origin = min([*(a for spans in ranges.values() for a, _ in spans), *(m[0] for m in marks),
                      *(e.time_range.start for e in comms)], default=0.0)
        for e in sorted(comms, key=lambda ev: ev.time_range.start):
            op = str(e.name).split(":")[-1]
            start = e.time_range.start
            if any(a <= start <= b for a, b in ranges.get("barrier", [])):
                continue  # the step's own barriers
            phase = _phase_at(start, op, marks)
            if phase is None:
                continue  # posted before the runner's first send or receive: the step's opening barrier
            shape = tuple(int(x) for x in (e.input_shapes[0] if e.input_shapes and e.input_shapes[0] else ()))
            dtype = str(e.input_dtypes[0]) if getattr(e, "input_dtypes", None) else ""
            self.transfers.append(Transfer(op, index, (start - origin) * 1e-6, (e.time_range.end - start) * 1e-6,
                                           math.prod(shape) * DTYPE_BYTES.get(dtype, 4), phase, shape, dtype))


def _phase_at(time_us: float, op: str, marks: list[tuple[float, float, str, str]]) -> str | None:
    """The phase of the last ``placer::phase`` range of ``op`` (or of both) begun at or before ``time_us``
    (the transfer's post): a schedule may make its sends and receives first and post them together."""
    before = [(a, phase) for a, _, phase, kind in marks if a <= time_us and kind in (op, "any")]
    return max(before)[1] if before else None


def ranged(name: str, fn: Callable[..., Any], unless: Callable[..., bool] | None = None) -> Callable[..., Any]:
    """``fn`` run inside a ``record_function(name)`` range (outside one where ``unless(*args, **kwargs)``)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if unless is not None and unless(*args, **kwargs):
            return fn(*args, **kwargs)
        with record_function(name):
            return fn(*args, **kwargs)
    return wrapper


def memory_peaks(device: torch.device) -> dict[str, int | None]:
    """CUDA allocator peaks (allocated, reserved) and the process's peak resident set."""
    rss = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * (1 if sys.platform == "darwin" else 1024)
    if device.type == "cuda":
        return {"peak_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
                "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(device)), "peak_resident_bytes": rss}
    return {"peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_resident_bytes": rss}


def environment(world_size: int, device: torch.device) -> dict[str, Any]:
    """Versions, device kind, threads, world size and host name of this (rank 0's) process."""
    kind = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"python": platform.python_version(), "torch": str(torch.__version__), "placer": __version__,
            "device_kind": kind, "threads": torch.get_num_threads(), "world_size": world_size,
            "hostname": socket.gethostname(), "backend": str(dist.get_backend())}


def rank_record(rank: int, device: str, stage: int, replica: int, times_s: list[float], recorder: StepRecorder,
                torch_device: torch.device) -> RankRecord:
    return RankRecord(rank=rank, device=device, stage=stage, replica=replica, hostname=socket.gethostname(),
                      iterations_s=tuple(times_s), memory=memory_peaks(torch_device),
                      profiled_steps=tuple(recorder.steps), forward_s=tuple(recorder.forward_s),
                      backward_s=tuple(recorder.backward_s), transfers=tuple(recorder.transfers),
                      forward_stages=tuple(recorder.forward_stages), backward_stages=tuple(recorder.backward_stages))


def gather_ranks(mine: RankRecord, world_size: int) -> list[RankRecord] | None:
    """Every rank's part on rank 0 (gather_object over gloo); None on the other ranks."""
    group = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else None
    out: list[Any] | None = [None] * world_size if dist.get_rank() == 0 else None
    dist.gather_object(mine, out, dst=0, group=group)
    return None if out is None else [r for r in out if r is not None]
