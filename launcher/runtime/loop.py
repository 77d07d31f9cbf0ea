"""The training (or inference) loop around a runner, and the measurements it writes.

A runner has ``train_step(inputs, target) -> loss | None``, ``infer(inputs) -> outputs | None``,
``named_parameters()``, ``counted_parameters()`` (those this rank adds to the global gradient
norm), ``stage_index``, ``replica`` and ``fwd_s`` (forward compute seconds so far).  The loop asks
the data source for the global batch of each step (``--accumulate`` batches per optimizer step);
every rank takes its share.  Optimizer, learning rate, clipping and checkpoints:
:mod:`launcher.runtime.training`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import gc
import resource
import time
from contextlib import nullcontext
from pathlib import Path
from statistics import median
from typing import Any, Protocol

import torch
import torch.distributed as dist

from launcher.bundle import plan_kind
from launcher.runtime.compat import runs_on_pipeline_stage
from launcher.runtime.context import LaunchContext
from launcher.runtime.dataflow import DataflowRunner
from launcher.runtime.multistage import MultiStageRunner
from launcher.runtime.pipeline import PipelineRunner
from launcher.runtime.record import StepRecorder, environment, gather_ranks, rank_record
from launcher.runtime.tensor_parallel import full_tensor, local_tensor
from launcher.runtime.training import (
    clip_global_norm,
    latest_checkpoint,
    learning_rate,
    load_checkpoint,
    make_optimizer,
    save_checkpoint,
)
from launcher.runtime.uneven import UnevenRunner
from launcher.stagemap import is_multi_stage
from launcher.tensor_plan import tensor_parallel_degree
from solvers.model.canonical import plain_json
from solvers.model.run import RunRecord, run_summary


class Runner(Protocol):
    stage_index: int
    replica: int
    fwd_s: float
    materialized_bytes: int  # the parameters and buffers this rank holds (its stage's, not the model's)

    def counted_parameters(self) -> set[str]: ...

    def train_step(self, inputs: dict[str, torch.Tensor], target: torch.Tensor) -> float | None: ...

    def infer(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...] | None: ...

    def named_parameters(self) -> dict[str, torch.nn.Parameter]: ...


def peak_memory_bytes(device: torch.device) -> int:
    """Peak allocated CUDA memory, or the process's peak resident set on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def settle_memory(device: torch.device) -> tuple[int, int]:
    """End the setup's share of the peak: its high-water mark, then the mark reset to what the process holds now.

    Setup (the export of the whole model on ``meta``, the construction log, the stage's
    materialisation) leaves freed memory behind; it is collected and handed back to the system
    (glibc's ``malloc_trim``), and the high-water mark restarts from the resident set that remains
    (Linux ``/proc/self/clear_refs``, 5), so that ``peak_memory_bytes`` is the training steps' own
    peak.  On CUDA the allocator's peak restarts from what is allocated.  Returns the setup's peak
    and what the process holds once settled (the resident set on CPU, allocated bytes on CUDA).
    """
    setup_peak = peak_memory_bytes(device)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return setup_peak, int(torch.cuda.memory_allocated(device))
    libc = ctypes.util.find_library("c")
    if libc is not None:
        trim = getattr(ctypes.CDLL(libc), "malloc_trim", None)
        if trim is not None:
            trim(0)
    with contextlib.suppress(OSError):  # not Linux, or not permitted: the peak keeps the setup's share
        Path("/proc/self/clear_refs").write_text("5")
    return setup_peak, resident_bytes()


def resident_bytes() -> int:
    """The process's current resident set (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * resource.getpagesize()


def summarize(times_s: list[float], warmup: int) -> dict[str, float]:
    kept = times_s[warmup:] or times_s
    return {"median_s": median(kept), "min_s": min(kept), "max_s": max(kept)}


def now() -> float:
    return time.perf_counter()


def make_runner(ctx: LaunchContext) -> Runner:
    tensor_parallel_degree(ctx.plan)  # refuses the tensor-parallel plans no runner runs
    if plan_kind(ctx.plan) == "latency":
        return DataflowRunner(ctx)
    if is_multi_stage(ctx.plan.schedule):
        return MultiStageRunner(ctx)  # launcher check refuses what torch's multi-stage classes cannot run
    if not runs_on_pipeline_stage(ctx.plan):
        return UnevenRunner(ctx)  # replica counts or tp differ, or fewer micro-batches than stages for Schedule1F1B
    return PipelineRunner(ctx)


def global_rows(ctx: LaunchContext) -> int:
    """Rows of one iteration: micro-batches times the graph's batch (one batch for a latency plan)."""
    return ctx.batch if plan_kind(ctx.plan) == "latency" else ctx.batch * ctx.plan.micro_batches


def run_loop(ctx: LaunchContext, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Run every step; the metrics (``placer.metrics/v1``) and, on rank 0, the run record (``placer.run/v1``)."""
    runner = make_runner(ctx)
    recorder = StepRecorder(runner if args.profile_steps else None)
    params = runner.named_parameters()
    optimizer = (make_optimizer(args.optimizer, args.optimizer_arg, list(params.values()), args.lr)
                 if params and not args.inference else None)
    setup_peak_bytes, settled_bytes = settle_memory(ctx.world.torch_device)
    first = 0
    if args.resume and optimizer is not None:
        first = load_checkpoint(latest_checkpoint(Path(args.resume)), runner.stage_index, params, optimizer)
    rows = global_rows(ctx)
    times_s: list[float] = []
    losses: list[float | None] = []
    # the warm-up and the profiled steps are left out of metrics.json's figures, as run.json's summary leaves them
    settled = settled_steps(args.steps - first, args.warmup, args.profile_steps)
    fwd_before_s = 0.0  # forward seconds of the steps left out
    for step in range(first, args.steps):
        if step - first == settled:
            fwd_before_s = runner.fwd_s
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, args.lr, args.lr_warmup, args.steps, args.lr_decay)
        profiled = args.warmup <= step - first < args.warmup + args.profile_steps
        with recorder.step(step - first) if profiled else nullcontext():
            dist.barrier()
            started = now()
            outputs: tuple[torch.Tensor, ...] | None = None
            if args.inference:
                outputs, loss = runner.infer(ctx.data.batch(step, rows)[0]), None
            else:
                loss = accumulate(runner, params, [ctx.data.batch(step * args.accumulate + k, rows)
                                                   for k in range(args.accumulate)])
            dist.barrier()
            times_s.append(now() - started)
        losses.append(loss)
        if step == first and args.save_step:
            save_step(Path(args.save_step), ctx, runner, loss, outputs)
        if optimizer is not None:
            if args.clip_norm is not None:
                clip_global_norm(params, runner.counted_parameters(), args.clip_norm, ctx.world.torch_device)
            optimizer.step()
            if args.save and ((args.save_every and (step + 1) % args.save_every == 0) or step == args.steps - 1):
                checkpoint(Path(args.save) / f"step{step + 1}", runner, params, optimizer, step + 1)
        print(f"rank {ctx.world.rank} ({ctx.world.device}) step {step}: {times_s[-1] * 1e3:.1f} ms"
              + (f", loss {loss:.6g}" if loss is not None else "")
              + f", peak memory {peak_memory_bytes(ctx.world.torch_device) / 2**20:.1f} MiB", flush=True)
    metrics = gather_metrics(ctx, runner, times_s, losses, args, settled, fwd_before_s,
                             (setup_peak_bytes, settled_bytes))
    return metrics, record_run(ctx, runner, times_s, recorder, args)


def accumulate(runner: Runner, params: dict[str, torch.nn.Parameter],
               batches: list[tuple[dict[str, torch.Tensor], torch.Tensor]]) -> float | None:
    """One training step over ``batches``: the mean of their gradients and of their losses.

    Each batch runs the whole schedule (which scales its own gradients), so the gradients of the
    earlier batches are kept aside and added back.
    """
    if len(batches) == 1:
        return runner.train_step(*batches[0])
    kept: dict[str, torch.Tensor] = {}
    losses: list[float] = []
    for inputs, target in batches:
        for p in params.values():
            p.grad = None
        loss = runner.train_step(inputs, target)
        if loss is not None:
            losses.append(loss)
        for name, p in params.items():
            if p.grad is not None:
                kept[name] = kept[name] + p.grad if name in kept else p.grad.clone()
    for name, p in params.items():
        p.grad = kept[name] / len(batches) if name in kept else None
    return sum(losses) / len(losses) if losses else None


def checkpoint(folder: Path, runner: Runner, params: dict[str, torch.nn.Parameter], optimizer: torch.optim.Optimizer,
               next_step: int) -> None:
    """Replica 0 of every stage writes the stage's checkpoint; every rank waits for all of them."""
    if runner.replica == 0:
        save_checkpoint(folder, runner.stage_index, params, optimizer, next_step)
    dist.barrier()


def save_step(folder: Path, ctx: LaunchContext, runner: Runner, loss: float | None,
              outputs: tuple[torch.Tensor, ...] | None) -> None:
    """The first step of this rank: loss, outputs and gradients (a tensor-parallel shard's gathered whole)."""
    folder.mkdir(parents=True, exist_ok=True)
    params = runner.named_parameters()
    grads = {k: full_tensor(p.grad.detach()).cpu() for k, p in params.items() if p.grad is not None}
    local_shapes = {k: list(local_tensor(p).shape) for k, p in params.items()}  # a tensor-parallel shard's own
    pipelined = runner if isinstance(runner, (PipelineRunner, UnevenRunner)) else None
    parts = pipelined.boundary_parts if pipelined else {}  # sequence-parallel boundaries
    # the seed of the rank's dropout stream (launcher.runtime.tp_random)
    random_seed = runner.random_seed if isinstance(runner, (PipelineRunner, UnevenRunner, MultiStageRunner)) else None
    torch.save({"loss": loss, "grads": grads, "outputs": None if outputs is None else [o.cpu() for o in outputs],
                "device": ctx.world.device, "stage": runner.stage_index, "local_shapes": local_shapes,
                "boundary_parts": parts, "random_seed": random_seed},
               folder / f"rank{ctx.world.rank}.pt")


def settled_steps(steps: int, warmup: int, profile_steps: int) -> int:
    """How many first steps the figures leave out: the warm-up, and the profiled steps where others follow."""
    return warmup + profile_steps if steps > warmup + profile_steps else warmup


def gather_metrics(ctx: LaunchContext, runner: Runner, times_s: list[float], losses: list[float | None],
                   args: argparse.Namespace, settled: int, fwd_before_s: float = 0.0,
                   setup_bytes: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """Rank 0's ``metrics.json``: times after the first ``settled`` steps (all when the run is no longer)."""
    kept = len(times_s) - settled
    fwd_s, steps = (runner.fwd_s - fwd_before_s, kept) if kept > 0 else (runner.fwd_s, max(1, len(times_s)))
    mine = {"rank": ctx.world.rank, "device": ctx.world.device, "stage": runner.stage_index,
            "iteration": summarize(times_s, settled), "iteration_s": times_s,
            "fwd_s_per_iteration": fwd_s / steps,
            "peak_memory_bytes": peak_memory_bytes(ctx.world.torch_device),
            "start_memory_bytes": ctx.start_memory_bytes, "setup_peak_memory_bytes": setup_bytes[0],
            "settled_memory_bytes": setup_bytes[1],
            "materialized_bytes": runner.materialized_bytes,
            "losses": losses}
    ranks: list[Any] = [None] * ctx.world.size
    dist.all_gather_object(ranks, mine)
    stages: dict[int, list[float]] = {}
    for r in ranks:
        stages.setdefault(int(r["stage"]), []).append(float(r["fwd_s_per_iteration"]))
    loss = next((r["losses"][-1] for r in ranks if r["losses"] and r["losses"][-1] is not None), None)
    iteration = [max(float(r["iteration_s"][i]) for r in ranks) for i in range(len(times_s))]
    return {
        "format": "placer.metrics/v1", "plan_digest": ctx.manifest["plan_digest"], "kind": plan_kind(ctx.plan),
        "solver": ctx.plan.solver, "mode": "inference" if args.inference else "training",
        "steps": len(times_s), "warmup": args.warmup, "rows_per_iteration": global_rows(ctx),
        "iteration_s": summarize(iteration, settled)["median_s"], "iterations_s": iteration,
        "stages": [{"stage": s, "fwd_s_per_iteration": max(v)} for s, v in sorted(stages.items())],
        "last_loss": loss, "ranks": ranks,
    }


def record_run(ctx: LaunchContext, runner: Runner, times_s: list[float], recorder: StepRecorder,
               args: argparse.Namespace) -> dict[str, Any] | None:
    """Every rank's part gathered on rank 0 into a ``placer.run/v1`` document (None on the other ranks)."""
    mine = rank_record(ctx.world.rank, ctx.world.device, runner.stage_index, runner.replica, times_s, recorder,
                       ctx.world.torch_device)
    ranks = gather_ranks(mine, ctx.world.size)
    if ranks is None:
        return None
    ranks.sort(key=lambda r: r.rank)
    plan = ctx.plan
    iterations = [max(r.iterations_s[i] for r in ranks) for i in range(len(times_s))]
    run = RunRecord(
        plan_digest=ctx.manifest["plan_digest"], graph_digest=ctx.manifest.get("graph_digest") or ctx.graph.digest,
        topology_digest=plan.topology_digest, solver=plan.solver, kind=plan_kind(plan),
        mode="inference" if args.inference else "training", micro_batches=plan.micro_batches,
        schedule=plan.schedule, steps=len(times_s), warmup=args.warmup, profile_steps=args.profile_steps,
        rows_per_iteration=global_rows(ctx), environment=environment(ctx.world.size, ctx.world.torch_device),
        iterations_s=tuple(iterations), ranks=tuple(ranks),
        summary=run_summary(ranks, len(plan.stages), args.warmup))
    return dict(plain_json(run.to_document()))
