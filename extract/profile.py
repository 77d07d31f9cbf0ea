"""``placer profile``: measured forward and backward time and peak memory per op.

The exported program (:mod:`extract.export`, the same op ids as ``placer extract``) runs
node by node in an ``torch.fx.Interpreter`` that wraps every node in a
``torch.profiler.record_function`` range named ``placer.op::<id>``; a training step is that
forward, a scalar loss (the mean of every floating-point output, summed) and ``backward()``.

- forward time of an op: its range's CPU time (``--device cpu``) or the time of the device
  kernels launched inside it (``--device cuda``);
- backward time: autograd gives each backward function the sequence number of the forward ATen
  op that created it; the ``autograd::engine::evaluate_function`` events with the sequence
  numbers of an op's forward ATen calls are that op's backward (gradient accumulation into the
  parameters has no forward op and is left out);
- memory (:mod:`extract.op_memory`): ``act_bytes``, the tensors autograd saves in the op's
  forward (a saved-tensor hook on the real device, each storage charged once, parameters left
  out); ``mem_fwd_bytes`` / ``mem_bwd_bytes``, the allocator's peak inside the op's forward range
  and inside its largest backward function (``profile_memory`` events), above what was allocated
  when it began.  ``attrs.profile.memory`` says so;
- backward split (``bwd_input_s`` / ``bwd_weight_s``): every op that reads a parameter runs again
  alone, on the arguments it had in the step, detached; ``torch.autograd.grad`` over its
  outputs is timed once with respect to its other inputs that need a gradient in the step
  (activations; not model inputs or buffers such as running statistics: the input gradient) and
  once with respect to its parameters (the weight gradient), the median of ``repeats`` each;
  the op's measured ``bwd_s`` is split in that ratio (Qi et al., arXiv 2401.10241, Section 2).
  An op that reads no parameter has no weight gradient: ``bwd_weight_s = 0``.
  ``attrs.profile.backward_split`` says so;
- ``warmup`` steps run first and are not recorded; each figure is the median over ``repeats``
  profiled steps.  Between them, a whole step of the unlifted module runs without profiler or
  interpreter; the median is ``attrs.profile.step_s``, to compare with the sum of the op times.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import ProfilerActivity, record_function
from torch.utils._pytree import tree_leaves, tree_map

from extract.build import build
from extract.estimate import DEVICES, device_spec
from extract.export import collect_ops, export_model
from extract.extract import assemble, count_ops, default_name
from extract.op_memory import SavedTensorLog, event_peak_bytes, weight_storages
from solvers.model.errors import InvalidInput
from solvers.model.graph import KindTimes, Node, OpGraph

PREFIX = "placer.op::"
_BACKWARD = "autograd::engine::evaluate_function"


class _Ranges(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule, log: SavedTensorLog | None) -> None:
        super().__init__(module)
        self.log = log

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op != "call_function":
            return super().run_node(n)
        if self.log is not None:
            self.log.current = n.name
        try:
            with record_function(PREFIX + n.name):
                return super().run_node(n)
        finally:
            if self.log is not None:
                self.log.current = None


class _Arguments(torch.fx.Interpreter):
    """Runs the module and keeps the arguments of every op that reads a parameter."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self.params = {id(p) for p in module.parameters() if p.requires_grad}
        self.calls: dict[str, tuple[Any, Any, Any]] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op == "call_function":
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            if any(id(t) in self.params for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)):
                self.calls[n.name] = (n.target, args, kwargs)
        return super().run_node(n)


def gradient_times_s(module: torch.fx.GraphModule, inputs: Mapping[str, torch.Tensor], device: str,
                     repeats: int) -> dict[str, tuple[float, float]]:
    """Per op that reads a parameter, (input-gradient, weight-gradient) time of the op alone (module doc)."""
    names = [n.name for n in module.graph.nodes if n.op == "placeholder"]
    values = list(inputs.values())
    recorder = _Arguments(module)
    recorder.run(*[inputs.get(p, values[i]) for i, p in enumerate(names)])
    out = {}
    for op, (target, args, kwargs) in recorder.calls.items():
        timed = _gradient_times_s(target, args, kwargs, recorder.params, device, repeats)
        if timed is not None:
            out[op] = timed
    module.zero_grad(set_to_none=True)
    return out


def _gradient_times_s(target: Any, args: Any, kwargs: Any, params: set[int], device: str,
                      repeats: int) -> tuple[float, float] | None:
    weights: list[torch.Tensor] = []
    others: list[torch.Tensor] = []

    def fresh(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        t = value.detach()
        if value.requires_grad:  # what the step differentiates: not buffers (running statistics), not model inputs
            t.requires_grad_(True)
            (weights if id(value) in params else others).append(t)
        return t

    fresh_args, fresh_kwargs = tree_map(fresh, (args, kwargs))
    outs = [t for t in tree_leaves(target(*fresh_args, **fresh_kwargs))
            if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs or not weights:
        return None
    grads = [torch.ones_like(t) for t in outs]

    def median_s(leaves: list[torch.Tensor]) -> float:
        if not leaves:
            return 0.0
        times = []
        for _ in range(repeats + 1):  # the first call warms up
            _sync(device)
            start = time.perf_counter()
            torch.autograd.grad(outs, leaves, grads, retain_graph=True, allow_unused=True)
            _sync(device)
            times.append(time.perf_counter() - start)
        return float(statistics.median(times[1:]))

    return median_s(others), median_s(weights)


@dataclass
class StepProfile:
    """One profiled training step, in seconds and bytes per op id."""

    fwd_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    bwd_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    mem_fwd: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    mem_bwd: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    act: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def local_kind(device: str) -> str:
    """The device kind name used by ``--device-kind`` and topologies: H100, A100, V100, cpu or the CUDA name."""
    if device == "cpu":
        return "cpu"
    name = torch.cuda.get_device_name(torch.device(device))
    return next((k for k in ("H100", "A100", "V100") if k in name), name)


def training_step(module: torch.fx.GraphModule, inputs: Mapping[str, torch.Tensor], interpreter: bool,
                  log: SavedTensorLog | None = None) -> None:
    """Forward, loss (sum of the means of the floating-point outputs), backward; node by node in
    an interpreter with one profiler range per op (``log`` sees what each op saves), or as the
    unlifted module's own code."""
    if interpreter:
        names = [n.name for n in module.graph.nodes if n.op == "placeholder"]
        values = list(inputs.values())
        args = [inputs.get(p, values[i]) for i, p in enumerate(names)]
        with log.hooks() if log is not None else contextlib.nullcontext():
            out = _Ranges(module, log).run(*args)
    else:
        out = module(**inputs)
    floats = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not floats:
        raise InvalidInput("profile: the model has no floating-point output that needs a gradient", field="spec")
    loss = torch.stack([t.float().mean() for t in floats]).sum()
    loss.backward()  # type: ignore[no-untyped-call]
    module.zero_grad(set_to_none=True)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_step(module: torch.fx.GraphModule, inputs: Mapping[str, torch.Tensor], device: str, repeats: int,
              warmup: int = 1) -> float:
    """Median wall time of a whole training step (no profiler, no interpreter)."""
    times = []
    for i in range(warmup + repeats):
        _sync(device)
        start = time.perf_counter()
        training_step(module, inputs, interpreter=False)
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def profile_step(module: torch.fx.GraphModule, inputs: Mapping[str, torch.Tensor], device: str) -> StepProfile:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    log = SavedTensorLog(weight_storages(module))
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        training_step(module, inputs, interpreter=True, log=log)
        _sync(device)
    step = parse_events(list(prof.events()), cuda=device.startswith("cuda"))
    step.act.update(log.act_bytes)
    return step


def parse_events(events: Sequence[Any], cuda: bool) -> StepProfile:
    """Per-op forward/backward times and memory from the profiler's function events."""
    step = StepProfile()
    seq_owner: dict[int, str] = {}
    # An ATen call that records no autograd function reports the next sequence number, so the
    # last call (in time) with a number is the one that created the backward function.
    for e in sorted(events, key=lambda e: e.time_range.start):
        if e.name.startswith(PREFIX):
            op = e.name[len(PREFIX):]
            step.fwd_s[op] += _duration_us(e, cuda) * 1e-6
            step.mem_fwd[op] = max(step.mem_fwd[op], event_peak_bytes(e, cuda))
        elif e.sequence_nr >= 0 and not e.name.startswith(_BACKWARD):
            owner = _enclosing_op(e)
            if owner is not None:
                seq_owner[e.sequence_nr] = owner
    for e in events:
        if e.name.startswith(_BACKWARD) and e.sequence_nr in seq_owner:
            op = seq_owner[e.sequence_nr]
            step.bwd_s[op] += _duration_us(e, cuda) * 1e-6
            step.mem_bwd[op] = max(step.mem_bwd[op], event_peak_bytes(e, cuda))
    return step


def _enclosing_op(e: Any) -> str | None:
    parent = e.cpu_parent
    while parent is not None:
        if parent.name.startswith(PREFIX):
            return str(parent.name[len(PREFIX):])
        parent = parent.cpu_parent
    return None


def _duration_us(e: Any, cuda: bool) -> float:
    return float(e.device_time_total if cuda else e.cpu_time_total)


def _median(steps: Sequence[StepProfile], name: str, op: str) -> float:
    return float(statistics.median(getattr(s, name).get(op, 0.0) for s in steps))


def profile(source: Mapping[str, Any], device: str = "cpu", repeats: int = 5, warmup: int = 2,
            name: str | None = None) -> OpGraph:
    """The extracted graph of ``source`` with measured per-op times and memory on ``device``."""
    if repeats < 1 or warmup < 0:
        raise InvalidInput("--repeats must be >= 1 and --warmup >= 0", field="repeats")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidInput(f"--device {device}: CUDA is not available on this machine", field="device")
    kind = local_kind(device)
    built = build(source, device=device)
    exported = collect_ops(built, export_model(built))
    spec = device_spec(kind if kind in DEVICES else "H100")  # the estimate kept in attrs.estimate_s
    estimated = assemble(built, exported, count_ops(exported), spec, name or default_name(source))
    module = exported.program.module()
    inputs = built.inputs
    for _ in range(warmup):
        training_step(module, inputs, interpreter=True)
    steps, whole = [], []
    for _ in range(repeats):  # interleaved, so that a busy machine slows both alike
        steps.append(profile_step(module, inputs, device))
        whole.append(time_step(module, inputs, device, repeats=1, warmup=0))
    step_s = statistics.median(whole)
    split = gradient_times_s(module, inputs, device, repeats)
    nodes = [_measured(n, steps, kind, split.get(n.id)) for n in estimated.nodes]
    attrs = {**estimated.attrs, "profile": {
        "device": device, "device_kind": kind, "repeats": repeats, "warmup": warmup, "step_s": step_s,
        "ops_sum_s": sum(n.fwd_s + n.bwd_s for n in nodes), "torch_threads": torch.get_num_threads(),
        "memory": MEMORY_SOURCES, "backward_split": BACKWARD_SPLIT_SOURCE}}
    return OpGraph.build(estimated.name, nodes, estimated.edges, estimated.profiled_batch_size, attrs)


MEMORY_SOURCES = {
    "act_bytes": "measured: the tensors autograd saves in the op's forward (saved-tensor hook), each storage once",
    "mem_fwd_bytes": "measured: the allocator's peak inside the op's forward above its start (profiler memory events)",
    "mem_bwd_bytes": "measured: the allocator's peak inside the op's largest backward function (profiler memory events)",
    "estimate": "attrs.estimate_bytes of a node: [act_bytes, mem_fwd_bytes, mem_bwd_bytes] counted on meta tensors",
}


BACKWARD_SPLIT_SOURCE = ("measured: bwd_s split in the ratio of the op's input- and weight-gradient times, each "
                         "timed alone on the step's arguments (torch.autograd.grad); 0 weight gradient for an op "
                         "that reads no parameter; attrs.gradient_s of a node: those two times")


def _measured(node: Node, steps: Sequence[StepProfile], kind: str, gradient_s: tuple[float, float] | None) -> Node:
    fwd, bwd = _median(steps, "fwd_s", node.id), _median(steps, "bwd_s", node.id)
    attrs = dict(node.attrs or {})
    attrs["estimate_s"] = [node.fwd_s, node.bwd_s]
    attrs["estimate_bytes"] = [node.act_bytes, node.mem_fwd_bytes, node.mem_bwd_bytes]
    bwd_input_s, bwd_weight_s = bwd, 0.0
    if gradient_s is not None and sum(gradient_s) > 0:
        attrs["gradient_s"] = list(gradient_s)
        # the input's share first, as a ratio in [0, 1]: exactly 0 for an input that takes no gradient, so such
        # an op's whole backward is its weight gradient (``(b * g1) / g1`` can round below ``b``, and
        # ``b * g1 / g1`` above it)
        bwd_input_s = bwd * (gradient_s[0] / (gradient_s[0] + gradient_s[1]))
        bwd_weight_s = bwd - bwd_input_s
    return Node(node.id, node.op, fwd, bwd, node.param_bytes, _median(steps, "act", node.id),
                _median(steps, "mem_fwd", node.id), _median(steps, "mem_bwd", node.id), node.constant, node.layer,
                {kind: KindTimes(fwd, bwd)}, attrs, bwd_input_s, bwd_weight_s)
