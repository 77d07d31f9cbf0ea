"""Analytic per-op cost: FLOPs, bytes moved and saved tensors, and roofline times.

Every op of the exported graph runs alone on ``meta`` tensors (shapes only, no arithmetic):
its inputs are fresh tensors with the metadata ``torch.export`` recorded, floating-point inputs
and parameters require grad.  During the forward call and one ``torch.autograd.grad`` call
over its outputs we count

- FLOPs with PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` (forward and backward
  separately: the backward is counted from the ATen ops autograd runs, not a fixed ratio);
- bytes moved: for every ATen op dispatched that is not a view, the bytes of its tensor inputs
  and outputs (each op reads its inputs once and writes its outputs once);
- ``act_bytes``: the tensors autograd saves for the backward pass (``saved_tensors_hooks``),
  without parameters, buffers and constants, the whole storage of each.  A tensor saved by several
  ops (an op's output saved by the op itself and by its consumers, an input read by Q, K and V
  projections) is counted once, at the first op in graph order that saves it, so the
  graph's sum is what autograd keeps for the whole model; views taken by an op count as
  their own tensors;
- ``mem_fwd_bytes``: the op's newly allocated outputs; ``mem_bwd_bytes``: the gradients it
  produces (inputs and parameters);
- the weight-gradient part of the backward (``bwd_weight_s``): the FLOPs and bytes of a second
  ``torch.autograd.grad`` call over the op's parameters alone (for ``Y = X W`` the one GEMM
  ``dW = X^T dY``, the forward's FLOPs; Qi et al., arXiv 2401.10241, Section 2.1); the input
  gradient (``bwd_input_s``) is the whole backward's count less it.  An op without trainable
  parameters has a weight gradient of 0.

Time on a device kind is the roofline ``max(flops / peak_flops, bytes / memory_bandwidth)``
(Williams et al., Roofline, CACM 2009), with the peak for the op's floating-point dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.flop_counter import FlopCounterMode

from solvers.model.errors import InvalidInput


@dataclass(frozen=True)
class DeviceSpec:
    """Peak dense FLOP/s by dtype class and memory bandwidth (vendor data sheets, SXM parts)."""

    name: str
    fp32_flops: float
    half_flops: float  # bf16 / fp16 tensor cores, dense
    bandwidth_Bps: float


DEVICES: dict[str, DeviceSpec] = {
    "H100": DeviceSpec("H100", 67e12, 989e12, 3.35e12),
    "A100": DeviceSpec("A100", 19.5e12, 312e12, 2.039e12),
    "V100": DeviceSpec("V100", 15.7e12, 125e12, 0.9e12),
    # One server CPU socket order of magnitude (AVX-512, ~32 cores); refine with `placer profile`.
    "cpu": DeviceSpec("cpu", 2e12, 2e12, 0.2e12),
}


def device_spec(kind: str) -> DeviceSpec:
    for name, spec in DEVICES.items():
        if name.lower() == kind.lower():
            return spec
    raise InvalidInput(f"--device-kind {kind!r}: unknown (valid: {', '.join(DEVICES)})", field="device_kind",
                       ref=kind)


@dataclass
class OpCost:
    """Counted cost of one op at the exported batch size."""

    flops_fwd: float = 0.0
    flops_bwd: float = 0.0
    bytes_fwd: float = 0.0
    bytes_bwd: float = 0.0
    act_bytes: float = 0.0
    mem_fwd_bytes: float = 0.0
    mem_bwd_bytes: float = 0.0
    flops_wgt: float = 0.0  # part of flops_bwd / bytes_bwd that computes the parameters' gradients
    bytes_wgt: float = 0.0
    half: bool = False  # the op computes in bf16 / fp16
    counted: bool = True  # False: the op could not run on meta tensors and counts as free

    def times(self, spec: DeviceSpec) -> tuple[float, float]:
        """(fwd_s, bwd_s) on ``spec`` by the roofline."""
        peak = spec.half_flops if self.half else spec.fp32_flops
        fwd = max(self.flops_fwd / peak, self.bytes_fwd / spec.bandwidth_Bps)
        bwd = max(self.flops_bwd / peak, self.bytes_bwd / spec.bandwidth_Bps)
        return fwd, bwd

    def backward_split_s(self, spec: DeviceSpec) -> tuple[float, float]:
        """(bwd_input_s, bwd_weight_s) on ``spec`` by the roofline, each part timed on its own counts."""
        peak = spec.half_flops if self.half else spec.fp32_flops
        wgt = max(self.flops_wgt / peak, self.bytes_wgt / spec.bandwidth_Bps)
        inp = max((self.flops_bwd - self.flops_wgt) / peak, (self.bytes_bwd - self.bytes_wgt) / spec.bandwidth_Bps)
        return max(inp, 0.0), wgt


class _BytesMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Sums the bytes each non-view ATen op reads and writes."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.total = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if not getattr(func, "is_view", False):
            leaves = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
            self.total += sum(int(t.numel()) * t.element_size() for t in leaves)
        return out


def _storage_key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


class SavedTensors:
    """Keys of tensors already charged as saved activations, across ops."""

    def __init__(self) -> None:
        self.charged: set[tuple[str, int]] = set()


def _meta_like(value: Any, grad: bool) -> Any:
    def one(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            t = torch.empty_strided(tuple(int(s) for s in v.shape), tuple(int(s) for s in v.stride()),
                                    dtype=v.dtype, device="meta")
            return t.requires_grad_(True) if grad and t.is_floating_point() else t
        if isinstance(v, torch.SymInt | torch.SymFloat | torch.SymBool):
            return v.node.hint if v.node.hint is not None else v
        return v
    return tree_map(one, value)


def op_cost(node: torch.fx.Node, get_attr: Callable[[str], Any], weights: set[str], frozen: set[str],
            saved: SavedTensors) -> OpCost:
    """Count one ``call_function`` node (see the module docstring).  ``weights``: placeholders that
    are parameters, buffers or constants (never activations); ``frozen``: placeholders that need
    no gradient.  An op that cannot run on meta tensors (a data-dependent kernel) counts as free
    with ``counted=False``."""
    inputs: dict[str, Any] = {}
    for arg in node.all_input_nodes:
        if arg.op == "get_attr":
            inputs[arg.name] = get_attr(str(arg.target))
        else:
            inputs[arg.name] = _meta_like(arg.meta.get("val"), grad=arg.name not in frozen)
    leaves = [t for v in inputs.values() for t in _tensors(v) if t.requires_grad]
    params = [t for k, v in inputs.items() if k in weights for t in _tensors(v) if t.requires_grad]
    # Non-leaf copies: an in-place op (a residual ``add_``) may write them; gradients go to ``leaves``.
    inputs = {k: tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) and t.requires_grad else t, v)
              for k, v in inputs.items()}
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: inputs[n.name])
    try:
        return _run(node, args, kwargs, inputs, (leaves, params), weights, saved)
    except Exception:
        return OpCost(counted=False)


def _run(node: torch.fx.Node, args: Any, kwargs: Any, inputs: dict[str, Any],
         leaves: tuple[list[torch.Tensor], list[torch.Tensor]], weights: set[str], saved: SavedTensors) -> OpCost:
    """Count one op; ``leaves``: every input that needs a gradient, and those of them that are parameters."""
    key_of: dict[int, tuple[str, int] | None] = {}
    for name, value in inputs.items():
        for i, t in enumerate(_tensors(value)):
            key_of[_storage_key(t)] = None if name in weights else (name, i)
    packed: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(t)
        return t

    cost = OpCost()
    flops, moved = FlopCounterMode(display=False), _BytesMode()
    with flops, moved, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = node.target(*args, **kwargs)  # type: ignore[operator]
    cost.flops_fwd, cost.bytes_fwd = float(flops.get_total_flops()), float(moved.total)
    outs = _tensors(out)
    cost.half = any(t.dtype in (torch.float16, torch.bfloat16) for t in outs)
    for i, t in enumerate(outs):
        key = _storage_key(t)
        if key not in key_of:
            cost.mem_fwd_bytes += t.untyped_storage().nbytes()
            key_of[key] = (node.name, i)
    cost.act_bytes = _charge(packed, key_of, node.name, saved)
    _backward(cost, outs, *leaves)
    return cost


def _charge(packed: list[torch.Tensor], key_of: dict[int, tuple[str, int] | None], name: str,
            saved: SavedTensors) -> float:
    total = 0.0
    seen: set[int] = set()
    for t in packed:
        skey = _storage_key(t)
        if skey in seen:
            continue
        seen.add(skey)
        if skey in key_of and key_of[skey] is None:
            continue  # a parameter, buffer or constant
        key = key_of.get(skey) or (name, -len(seen))
        if key in saved.charged:
            continue
        saved.charged.add(key)
        total += t.untyped_storage().nbytes()
    return total


def _backward(cost: OpCost, outs: list[torch.Tensor], leaves: list[torch.Tensor], params: list[torch.Tensor]) -> None:
    diff = [t for t in outs if t.requires_grad]
    if not diff or not leaves:
        return
    if params:  # the weight gradients alone, then the whole backward
        flops, moved = FlopCounterMode(display=False), _BytesMode()
        with flops, moved:
            torch.autograd.grad(diff, params, grad_outputs=[torch.empty_like(t) for t in diff], allow_unused=True,
                                retain_graph=True)
        cost.flops_wgt, cost.bytes_wgt = float(flops.get_total_flops()), float(moved.total)
    flops, moved = FlopCounterMode(display=False), _BytesMode()
    with flops, moved:
        grads = torch.autograd.grad(diff, leaves, grad_outputs=[torch.empty_like(t) for t in diff],
                                    allow_unused=True)
    cost.flops_bwd, cost.bytes_bwd = float(flops.get_total_flops()), float(moved.total)
    cost.mem_bwd_bytes = float(sum(g.untyped_storage().nbytes() for g in grads if g is not None))


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]
