"""``placer launcher verify``: one training step under torchrun beside the single-process model.

:func:`verify_plan` writes the plan's bundle into a folder (every plan device on this host, so
any plan runs here), runs ``launch.py`` once under ``torchrun --standalone`` (CPU and gloo where
there is no GPU, the plan's world size, one thread per process) with ``--save-step``, and runs
the same step on the model in one process: the same seeded weights, the same global batch, the
same loss.  The single-process step runs micro-batch by micro-batch, each cut into the replica
slices of the plan's stages, as the pipeline does (so batch statistics see the same rows), and
adds the slices' gradients in the pipeline's order (:class:`Slicing`); the loss is the mean over
the slices and a gradient the mean of the slices' gradients.

It reports the largest relative difference (``max |a - b| / max |b|``; a gradient that is zero up
to rounding, its largest entry below 1e-3 of the model's largest gradient entry, is compared at
that scale, and differences below 1e-9 are ignored) of the loss and of every parameter's gradient on
every rank that holds it, tied parameters under their first name in every stage that reads them.

Needs torch; importing this module does not import it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.bundle import build_bundle, plan_kind, write_bundle
from launcher.check import check_plan
from solvers.model.errors import InvalidPlan
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan
from solvers.model.topology import Topology

TOLERANCE = 1e-5  # float32
ZERO_FLOOR = 1e-9  # absolute: a gradient that is zero up to rounding (a bias before a softmax)
NEGLIGIBLE = 1e-3  # a gradient whose largest entry is below this share of the model's largest is compared at that scale


@dataclass
class Difference:
    """The largest relative difference of one quantity (the loss, or a parameter's gradient on a rank)."""

    what: str
    relative: float
    absolute: float

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "relative": self.relative, "absolute": self.absolute}


@dataclass
class VerifyReport:
    loss: float
    reference_loss: float
    differences: list[Difference] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def worst(self) -> Difference | None:
        return max(self.differences, key=lambda d: d.relative, default=None)

    @property
    def first_failure(self) -> str | None:
        if self.missing:
            return f"{self.missing[0]}: no rank has its gradient"
        failing = [d for d in self.differences if d.relative > TOLERANCE and d.absolute > ZERO_FLOOR]
        grads = [d for d in failing if d.what != "loss"]  # the first parameter (model order), else the loss
        first = grads[0] if grads else failing[0] if failing else None
        return None if first is None else f"{first.what}: relative difference {first.relative:.3g} > {TOLERANCE:g}"

    @property
    def ok(self) -> bool:
        return self.first_failure is None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "first_failure": self.first_failure, "loss": self.loss,
                "reference_loss": self.reference_loss, "tolerance": TOLERANCE,
                "differences": [d.to_dict() for d in self.differences], "missing": self.missing,
                "wall_s": self.wall_s}


def verify_plan(plan: Plan, graph: OpGraph, topology: Topology | None = None, *, data: str | None = None,
                folder: Path | None = None, timeout_s: float = 600) -> VerifyReport:
    """Run one step of the plan under torchrun and the same step in one process; compare."""
    import time

    report = check_plan(plan, graph, topology)
    if not report.ok:
        raise InvalidPlan(f"the plan would not launch: {report.reason}", field="plan")
    with tempfile.TemporaryDirectory(prefix="placer-verify-") as scratch:
        root = folder or Path(scratch)
        bundle = build_bundle(plan, graph)  # every device on this host: any plan runs here
        write_bundle(bundle, root)
        started = time.perf_counter()
        log = run_torchrun(root, len(bundle.manifest["devices"]), data, timeout_s)
        steps = load_steps(root / "step", log)
        wall_s = time.perf_counter() - started
        want_loss, want_grads = reference_step(bundle.manifest, plan, data)
    result = compare(steps, want_loss, want_grads)
    result.wall_s = wall_s
    return result


def run_torchrun(root: Path, nproc: int, data: str | None, timeout_s: float) -> str:
    """``launch.py`` for one step under ``torchrun --standalone``; its log; refuses a failed run with its tail."""
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "launch.py", "--steps", "1", "--warmup", "0", "--save-step", "step",
           *(["--data", data] if data else [])]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    log = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(line for line in log.splitlines() if "Error" in line or "refused" in line)[-2000:]
        raise InvalidPlan(f"the run under torchrun failed (exit {done.returncode}): {tail or log[-2000:]}",
                          field="plan")
    return log


def load_steps(folder: Path, log: str) -> list[dict[str, Any]]:
    import torch

    steps = [torch.load(p) for p in sorted(folder.glob("rank*.pt"))]
    if not steps:
        raise InvalidPlan(f"the run wrote no step: {log[-2000:]}", field="plan")
    return steps


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch's intra-op threads set to one while the single-process reference runs, as in every rank.

    A kernel split over threads adds its parts in another order (LayerNorm's weight and bias
    gradients are sums over the rows, cut into one part per thread), so a reference run with the
    machine's threads differs from the one-thread ranks in the last bits.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@one_thread()
def reference_step(manifest: dict[str, Any], plan: Plan, data_spec: str | None,
                   accumulate: int = 1) -> tuple[float, dict[str, Any]]:
    """The single-process step: loss and gradients (by first name), slice by slice as the pipeline runs;
    with ``accumulate`` > 1 the mean over that many batches, as ``launch.py --accumulate`` takes them."""
    from extract.source import InputSpec
    from launcher.runtime.data import load_data
    from launcher.runtime.seeded import seeded_model

    source = manifest["source"]
    model = seeded_model(source)
    data = load_data(data_spec, [InputSpec.from_dict(s) for s in manifest.get("inputs") or []], model)
    slicing = Slicing.of(plan, int(source.get("batch") or 1))
    loss, grads = slicing.accumulated(model, data, 0, accumulate)
    return loss, {k: g.detach().clone() for k, g in grads.items()}


@dataclass(frozen=True)
class Slicing:
    """How the pipeline cuts one iteration's rows, and the order in which it adds their gradients.

    Micro-batching is gradient accumulation: each replica of a stage runs its slice of every
    micro-batch (``launcher.runtime.context.replica_rows``), accumulating the slices' gradients of
    ``loss / micro_batches``; the replicas' sums are then added and divided by the replica count
    (the data-parallel all-reduce).  A tied parameter (one tensor under several module names, the
    input and output embedding of GPT-2) has a copy in every stage that reads it; each copy
    accumulates its own part over the micro-batches and the parts are added after the schedule
    (:class:`launcher.runtime.pipeline.TiedGroups`).  The reference runs the model in the same
    order: one backward per slice, the tied parameter's second and later names read through their
    own copies (``torch.func.functional_call`` with ``tie_weights=False``) and added after the
    micro-batches.  Where a tied parameter's two uses are in different stages of a plan with one
    replica per stage, every gradient is the pipeline's to the bit; otherwise the same up to the
    order of float32 additions.
    """

    batch: int  # the graph's batch: rows of one micro-batch
    micro: int
    width: int  # replicas per stage (the widest stage)

    @staticmethod
    def of(plan: Plan, batch: int) -> Slicing:
        latency = plan_kind(plan) == "latency"
        return Slicing(batch, 1 if latency else plan.micro_batches,
                       1 if latency else max(len(s.devices) // s.tp for s in plan.stages))

    @property
    def rows(self) -> int:
        return self.batch * self.micro

    def accumulated(self, model: Any, data: Any, step: int, accumulate: int) -> tuple[float, dict[str, Any]]:
        """Optimizer step ``step``'s loss and gradients over its ``accumulate`` batches (``step * accumulate + k``):
        their means, added in the order ``launcher.runtime.loop.accumulate`` adds them."""
        kept: dict[str, Any] = {}
        losses = []
        for k in range(accumulate):
            loss, grads = self.gradients(model, data, *data.batch(step * accumulate + k, self.rows))
            losses.append(loss)
            for name, g in grads.items():
                kept[name] = kept[name] + g if name in kept else g.clone()
        if accumulate > 1:
            kept = {name: g / accumulate for name, g in kept.items()}
        return sum(losses) / len(losses), kept

    def gradients(self, model: Any, data: Any, inputs: dict[str, Any], target: Any) -> tuple[float, dict[str, Any]]:
        """One iteration's mean loss and its gradients (by first name), summed in the pipeline's order."""
        import torch
        from torch.func import functional_call
        from torch.utils._pytree import tree_leaves

        named = dict(model.named_parameters())
        first_of = {id(p): k for k, p in named.items()}
        ties = {k: first_of[id(p)] for k, p in model.named_parameters(remove_duplicate=False) if k not in named}
        share = self.batch // self.width
        sums: dict[str, Any] = {}
        replica_losses = []
        for replica in range(self.width):
            for p in named.values():
                p.grad = None
            copies = {k: named[first].detach().requires_grad_() for k, first in ties.items()}
            losses = []
            for m in range(self.micro):
                rows = torch.arange(m * self.batch + replica * share, m * self.batch + (replica + 1) * share)
                args = {k: v[rows] for k, v in inputs.items()}
                out = functional_call(model, copies, (), args, tie_weights=False, strict=False) if copies else model(**args)
                loss = data.loss(tuple(x for x in tree_leaves(out) if isinstance(x, torch.Tensor)), target[rows])
                (loss / self.micro).backward()
                losses.append(loss.detach())
            grads = {k: p.grad for k, p in named.items() if p.grad is not None}
            for k, first in ties.items():  # the stages' parts of a tied parameter, added after the schedule
                part = copies[k].grad
                if part is not None:
                    grads[first] = grads[first] + part if first in grads else part
            for k, g in grads.items():
                sums[k] = sums[k] + g if k in sums else g
            replica_losses.append(torch.stack(losses).mean())
        for p in named.values():
            p.grad = None
        if self.width > 1:
            sums = {k: g / self.width for k, g in sums.items()}
        return float(torch.stack(replica_losses).mean()), sums


def relative(got: Any, want: Any, floor: float = 0.0) -> tuple[float, float]:
    """``max |got - want| / max(max |want|, floor)`` and the absolute difference."""
    scale = max(float(want.abs().max()) if want.numel() else 0.0, floor)
    err = float((got.float() - want.float()).abs().max()) if want.numel() else 0.0
    return (err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))), err


def compare(steps: list[dict[str, Any]], want_loss: float, want_grads: dict[str, Any]) -> VerifyReport:
    losses = [float(s["loss"]) for s in steps if s.get("loss") is not None]
    if not losses:
        raise InvalidPlan("no rank reported a loss", field="plan")
    report = VerifyReport(losses[0], want_loss)
    for got in losses:
        err = abs(got - want_loss)
        report.differences.append(Difference("loss", err / abs(want_loss) if want_loss else err, err))
    for step in steps:
        unknown = sorted(set(step["grads"]) - set(want_grads))
        if unknown:
            raise InvalidPlan(f"rank {step['device']} has a gradient for {unknown[0]!r}, which the model does not have",
                              field="plan", ref=unknown[0])
    seen: set[str] = set()
    # a gradient that is zero up to rounding (below 1e-3 of the model's largest entry) is compared at that scale
    floor = NEGLIGIBLE * max((float(g.abs().max()) for g in want_grads.values() if g.numel()), default=0.0)
    for name, want in want_grads.items():  # the model's order
        for step in steps:
            if name in step["grads"]:
                rel, err = relative(step["grads"][name], want, floor)
                report.differences.append(Difference(f"{name} on {step['device']}", rel, err))
                seen.add(name)
    report.missing = sorted(set(want_grads) - seen)
    return report


def format_report(report: VerifyReport) -> str:
    worst = report.worst
    lines = [f"loss {report.loss:.8g} (single process {report.reference_loss:.8g})",
             f"largest relative difference: {worst.relative:.3g} ({worst.what})" if worst else "no differences",
             f"{len(report.differences) - 1 if report.differences else 0} gradient(s) compared; "
             f"torchrun step in {report.wall_s:.1f} s"]
    failure = report.first_failure
    lines.append(f"differs: {failure} (a model with dropout on draws other random numbers in every process: "
                 "extract it with dropout 0 to verify it)" if failure else f"ok: every difference <= {TOLERANCE:g}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Training:
    """The options of a training run (``launch.py``'s), for the single-process reference."""

    steps: int
    data: str | None = None
    optimizer: str = "AdamW"
    optimizer_args: tuple[str, ...] = ()
    lr: float = 1e-3
    lr_warmup: int = 0
    lr_decay: str = "constant"
    clip_norm: float | None = None
    accumulate: int = 1

    def launch_args(self) -> list[str]:
        """The same options as ``launch.py`` arguments."""
        out = ["--steps", str(self.steps), "--optimizer", self.optimizer, "--lr", repr(self.lr),
               "--lr-warmup", str(self.lr_warmup), "--lr-decay", self.lr_decay, "--accumulate", str(self.accumulate),
               "--autocast", "none"]
        out += [x for pair in self.optimizer_args for x in ("--optimizer-arg", pair)]
        out += ["--clip-norm", repr(self.clip_norm)] if self.clip_norm is not None else []
        return out + (["--data", self.data] if self.data else [])


@one_thread()
def reference_losses(manifest: dict[str, Any], plan: Plan, training: Training) -> list[float]:
    """The loss of every step of the same training in one process: same weights, batches, optimizer, schedule.

    Each step accumulates its micro-batches (and ``training.accumulate`` batches) as the pipeline
    does (:class:`Slicing`) and clips with the pipeline's float64 global norm
    (:func:`launcher.runtime.training.clip_global_norm`'s parts).
    """
    from extract.source import InputSpec
    from launcher.runtime.data import load_data
    from launcher.runtime.seeded import seeded_model
    from launcher.runtime.training import learning_rate, make_optimizer, scale_gradients, squared_gradient_sum

    source = manifest["source"]
    slicing = Slicing.of(plan, int(source.get("batch") or 1))
    model = seeded_model(source)
    data = load_data(training.data, [InputSpec.from_dict(s) for s in manifest.get("inputs") or []], model)
    named = dict(model.named_parameters())
    optimizer = make_optimizer(training.optimizer, training.optimizer_args, list(named.values()), training.lr)
    losses = []
    for step in range(training.steps):
        optimizer.zero_grad(set_to_none=True)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, training.lr, training.lr_warmup, training.steps, training.lr_decay)
        loss, grads = slicing.accumulated(model, data, step, training.accumulate)
        for name, p in named.items():
            p.grad = grads.get(name)
        if training.clip_norm is not None:
            scale_gradients(named.values(), float(squared_gradient_sum(named.values()).sqrt()), training.clip_norm)
        optimizer.step()
        losses.append(loss)
    return losses
