"""Throughput plans whose stages have different replica counts (RaNNC) or tensor-parallel degrees: a pipeline
on isend/irecv.

``torch.distributed.pipelining`` pairs each stage with one neighbour; here a stage with R_s
replicas splits every micro-batch into R_s equal row slices (Parmesan Eq. 3), and between stages
of different widths each receiver gathers its rows from the senders that hold them (a scatter on
one side, a gather on the other); gradients go back the same way.

- **Rows.** A boundary tensor's batch dimension is the one whose size changes with the row count
  (found by comparing the exports at two row counts); rows are batch-major along it.  A tensor
  without one (computed from weights or constants only) is sent whole by one sender replica.
- **Schedule.** Every replica of stage s runs GPipe (all forwards, then all backwards) or 1F1B
  (``S - s - 1`` warm-up forwards, then one forward one backward, then the remaining backwards)
  over the micro-batches, with blocking receives and non-blocking sends.
- **Loss and gradients.** Each last-stage replica's loss is the mean over its rows divided by the
  micro-batch count and the last stage's width, so the input gradients are those of the global
  mean loss; the replicas of a stage then sum their parameter gradients (all-reduce), and a
  parameter that several stages read (tied weights) is summed over all their replicas.
- **Tensor-parallel stages** (``stages[s].tp`` = t_s > 1, each stage its own): replica k of stage s is
  the group of t_s devices ``devices[k*t_s:(k+1)*t_s]``, which runs the stage made tensor-parallel over
  a 1-D mesh of its own ranks (:func:`launcher.runtime.tensor_parallel.tensor_parallel_module`, as the
  equal-groups pipeline runs it).  Its boundary values are whole, and the same, on every member, so
  member ``i`` of a receiving group takes its rows from member ``i mod t_a`` of the sending group (the
  transfers docs/cost-model.md charges: :func:`solvers.cost.comm.transfer_pairs`).  Backward, every
  member of the sending group needs the whole gradient of its rows (each member's output feeds the
  same DTensor graph), and the receiving group's input gradient is whole and the same on every member
  (a replicated DTensor's gradient, summed over the group): member ``i`` of the sending group takes it
  from member ``i mod t_b``.  Data-parallel sums run per position in the groups, shard by shard; a
  tied parameter is summed as the whole weight (:func:`sum_tied_gradient`), whichever part each stage
  holds.
- **Dropout**: every replica of every stage draws from the shared stream of
  :mod:`launcher.runtime.tp_random`, seeded by stage and replica (a stage at ``tp`` 1 is a group of
  one); without it a whole stage would draw from the stream the model's build leaves, the same on
  every rank, so two such stages would draw the same masks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard

from launcher.runtime.context import LaunchContext
from launcher.runtime.gradsync import all_reduce_gradients
from launcher.runtime.partition import StageGraph, parameter_aliases, stage_parameters, to_device, wrap_stage
from launcher.runtime.pipeline import TiedGroups, slice_model, split_model
from launcher.runtime.tensor_parallel import (
    dtensor_scope,
    group_mesh,
    is_sharded,
    op_kinds,
    placed_gradient,
    tensor_parallel_module,
)
from launcher.runtime.tp_random import seed_shared_stream
from launcher.runtime.weights import materialize, read_targets
from launcher.runtime.world import new_groups
from launcher.tensor_plan import replica_count
from solvers.model.errors import InvalidPlan


def _rows_shape(shape: tuple[int, ...], dim: int, rows: int, slice_rows: int) -> tuple[int, ...]:
    """``shape`` (of a slice of ``slice_rows`` rows) with ``rows`` rows along ``dim``."""
    per_row = shape[dim] // slice_rows
    return (*shape[:dim], rows * per_row, *shape[dim + 1:])


@dataclass(frozen=True)
class Piece:
    """Rows ``[lo, hi)`` of a micro-batch that one sender replica gives one receiver replica."""

    sender: int
    receiver: int
    lo: int
    hi: int


def pieces(rows: int, senders: int, receivers: int) -> list[Piece]:
    """The overlaps of the senders' and receivers' equal row slices of one micro-batch."""
    out = []
    for i in range(senders):
        for j in range(receivers):
            lo = max(i * rows // senders, j * rows // receivers)
            hi = min((i + 1) * rows // senders, (j + 1) * rows // receivers)
            if lo < hi:
                out.append(Piece(i, j, lo, hi))
    return out


def batch_dims(ctx: LaunchContext, names: list[str], small: Any) -> dict[str, int | None]:
    """Value -> its batch dimension (None: the same at every row count), from two exports' shapes."""
    ref = {n.name: n.meta.get("val") for n in ctx.reference.module.graph.nodes}
    other = {n.name: n.meta.get("val") for n in small.module.graph.nodes}
    out: dict[str, int | None] = {}
    for name in names:
        a, b = ref[name].shape, other[name].shape
        diff = [d for d in range(len(a)) if a[d] != b[d]]
        if len(diff) > 1:
            raise InvalidPlan(f"value {name!r} crossing a stage boundary changes size in dims {diff} with the rows: "
                              "it cannot be split between replicas", field="stages", ref=name)
        out[name] = diff[0] if diff else None
    return out


def sum_tied_gradient(param: torch.nn.Parameter, group: dist.ProcessGroup, first: bool) -> None:
    """Sum a tied parameter's gradient over ``group`` (every device of every stage that reads it) as the whole weight.

    Each device adds its own part into zeros of the whole shape: a shard its rows (the chunk of its place in
    its tensor-parallel mesh, as DTensor's ``Shard`` cuts it), a whole copy only once per tensor-parallel group
    (``first``: the group's first device), so that a stage holding the weight by vocabulary rows and one holding
    it whole add up to the sum over replicas and stages; each device then keeps its part of the sum.
    """
    grad = param.grad
    if grad is None:
        raise AssertionError("sum_tied_gradient needs a gradient (zeros where the stage gave none)")
    local = grad.to_local() if isinstance(grad, DTensor) else grad
    whole = torch.zeros(tuple(param.shape), dtype=local.dtype, device=local.device)
    placement = param.placements[0] if isinstance(param, DTensor) else None
    if isinstance(param, DTensor) and isinstance(placement, Shard):
        mine = whole.chunk(param.device_mesh.size(), placement.dim)[param.device_mesh.get_local_rank()]
        mine.copy_(local)
    else:
        mine = whole
        if first:
            mine.copy_(local)
    dist.all_reduce(whole, group=group)
    local.copy_(mine)


class UnevenRunner:
    """This rank's replica of its stage (a tensor-parallel group of ``tp`` devices where the stage has one),
    with the row exchanges to the neighbouring stages."""

    def __init__(self, ctx: LaunchContext) -> None:
        self.ctx = ctx
        plan = ctx.plan
        self.tps = [st.tp for st in plan.stages]
        self.widths = [replica_count(plan, s) for s in range(len(plan.stages))]  # replicas (tensor-parallel groups)
        for s, width in enumerate(self.widths):
            if ctx.batch % width:
                raise InvalidPlan(f"stages[{s}]: the micro-batch of {ctx.batch} rows does not split evenly over "
                                  f"{width} replicas", field=f"stages[{s}].devices")
        self.stage_index, index = ctx.stage_and_replica()
        self.tp = self.tps[self.stage_index]
        self.replica, self.tp_rank = divmod(index, self.tp)
        width = self.widths[self.stage_index]
        rank_of = ctx.world.rank_of
        # per stage and position j in its groups, the devices at j of every replica: shard j's data-parallel group
        positions = [(s, j) for s, st in enumerate(plan.stages) for j in range(st.tp)]
        groups = new_groups([[rank_of[d] for d in plan.stages[s].devices[j::self.tps[s]]] for s, j in positions])
        self.dp_group = groups[positions.index((self.stage_index, self.tp_rank))]
        # per replica of a tensor-parallel stage, its group
        replicas = [(s, k) for s in range(len(plan.stages)) if self.tps[s] > 1 for k in range(self.widths[s])]
        tp_groups = new_groups([[self._rank(s, k, j) for j in range(self.tps[s])] for s, k in replicas])
        smallest = slice_model(ctx, ctx.batch // max(self.widths))
        mine = slice_model(ctx, ctx.batch // width)
        stages = split_model(ctx, mine)
        self.tied = TiedGroups(ctx, mine.weights, stages)  # every device of the stages that read the parameter
        self.aliases = parameter_aliases(mine.weights)
        self.graph: StageGraph = stages[self.stage_index]
        self.materialized_bytes = materialize(self.graph.module, read_targets(self.graph.module), self.aliases,
                                              ctx.weights, ctx.world.torch_device)
        inner: torch.nn.Module = to_device(self.graph.module, ctx.world.torch_device)
        if self.tp > 1:
            mesh = group_mesh(tp_groups[replicas.index((self.stage_index, self.replica))], ctx.world.torch_device.type)
            inner = tensor_parallel_module(self.graph.module, mesh, op_kinds(mine))
        # dropout: the group's shared stream, seeded by stage and replica (launcher.runtime.tp_random); a stage at
        # tp 1 is a group of one, whose stream would otherwise be the one the model's build leaves on every rank
        self.random_seed: int | None = seed_shared_stream(int(ctx.manifest["source"].get("seed", 0)),
                                                          self.stage_index, self.replica)
        self.module = wrap_stage(inner, self.graph, mine.module, plan.recomputes(self.stage_index), ctx.autocast,
                                 ctx.world.torch_device)
        self.dims = batch_dims(ctx, self.graph.inputs + self.graph.outputs, smallest)
        self.meta = {n.name: n.meta.get("val") for n in mine.module.graph.nodes}
        self.boundary_parts: dict[str, dict[str, list[int]]] = {}  # whole values cross: no parts (sequence parallel)
        self.fwd_s = 0.0

    # ---- helpers ------------------------------------------------------------------------------
    @property
    def is_first(self) -> bool:
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        return self.stage_index == len(self.widths) - 1

    def named_parameters(self) -> dict[str, torch.nn.Parameter]:
        """This stage's parameters under their first names in the model."""
        return stage_parameters(self.module, self.aliases)

    def counted_parameters(self) -> set[str]:
        """Each parameter once in the world: a shard on every device of its group, a whole one on the first."""
        mine = [n for n, p in self.named_parameters().items() if self.tp_rank == 0 or is_sharded(p)]
        return self.tied.counted(mine, self.stage_index, self.replica)

    def _rank(self, stage: int, replica: int, position: int = 0) -> int:
        """The rank of device ``position`` of ``replica``'s tensor-parallel group in ``stage``."""
        return self.ctx.world.rank_of[self.ctx.plan.stages[stage].devices[replica * self.tps[stage] + position]]

    def _peer(self, stage: int) -> int:
        """The device of a neighbouring ``stage``'s group this device receives from: position ``j mod t``
        (every device of a group holds the same whole values and input gradients, docs/cost-model.md)."""
        return self.tp_rank % self.tps[stage]

    def _members(self, stage: int) -> range:
        """The devices of a neighbouring ``stage``'s group this device sends to: those whose peer it is."""
        return range(self.tp_rank, self.tps[stage], self.tp)

    def _tag(self, mb: int, value: int, backward: bool) -> int:
        return ((mb * 1024 + value) * 2) + int(backward)

    def _rows(self, stage: int, replica: int, mb: int) -> torch.Tensor:
        share = self.ctx.batch // self.widths[stage]
        start = mb * self.ctx.batch + replica * share
        return torch.arange(start, start + share)

    def _local(self, stage: int, piece_lo: int, piece_hi: int, replica: int) -> tuple[int, int]:
        """A piece's rows relative to ``replica``'s slice of stage ``stage``."""
        base = replica * self.ctx.batch // self.widths[stage]
        return piece_lo - base, piece_hi - base

    def _dim(self, name: str) -> int:
        dim = self.dims[name]
        if dim is None:
            raise AssertionError(f"{name} has no batch dimension")
        return dim

    def _narrow(self, tensor: torch.Tensor, name: str, lo: int, hi: int, slice_rows: int) -> torch.Tensor:
        dim = self._dim(name)
        per_row = tensor.shape[dim] // slice_rows
        return tensor.narrow(dim, lo * per_row, (hi - lo) * per_row)

    # ---- forward / backward of one micro-batch -----------------------------------------------------
    def _is_float(self, name: str) -> bool:
        return bool(self.meta[name].dtype.is_floating_point)

    def _recv_inputs(self, mb: int, training: bool) -> list[torch.Tensor]:
        s, me = self.stage_index, self.replica
        rows = self.ctx.batch // self.widths[s]
        out = []
        for k, name in enumerate(self.graph.inputs):
            meta = self.meta[name]
            if self.dims[name] is None:
                parts = [(me % self.widths[s - 1], tuple(meta.shape))]
            else:
                parts = [(p.sender, _rows_shape(tuple(meta.shape), self._dim(name), p.hi - p.lo, rows))
                         for p in pieces(self.ctx.batch, self.widths[s - 1], self.widths[s]) if p.receiver == me]
            got = []
            for sender, shape in parts:
                buf = torch.empty(shape, dtype=meta.dtype, device=self.ctx.world.torch_device)
                dist.recv(buf, self._rank(s - 1, sender, self._peer(s - 1)), tag=self._tag(mb, k, False))
                got.append(buf)
            value = got[0] if len(got) == 1 else torch.cat(got, dim=self.dims[name] or 0)
            out.append(value.requires_grad_(training and value.is_floating_point()))
        return out

    def _send_outputs(self, mb: int, outputs: tuple[torch.Tensor, ...]) -> None:
        s, me = self.stage_index, self.replica
        rows = self.ctx.batch // self.widths[s]
        for k, (name, value) in enumerate(zip(self.graph.outputs, outputs, strict=True)):
            if self.dims[name] is None:
                sends = [(j, value) for j in range(self.widths[s + 1]) if j % self.widths[s] == me]
            else:
                sends = [(p.receiver, self._narrow(value, name, *self._local(s, p.lo, p.hi, me), rows))
                         for p in pieces(self.ctx.batch, self.widths[s], self.widths[s + 1]) if p.sender == me]
            for receiver, part in sends:
                sent = part.detach().contiguous()
                for member in self._members(s + 1):
                    self.works.append(dist.isend(sent, self._rank(s + 1, receiver, member), tag=self._tag(mb, k, False)))

    def _recv_output_grads(self, mb: int, outputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor | None]:
        s, me = self.stage_index, self.replica
        grads: list[torch.Tensor | None] = []
        for k, (name, value) in enumerate(zip(self.graph.outputs, outputs, strict=True)):
            if not self._is_float(name):
                grads.append(None)
                continue
            if self.dims[name] is None:
                senders = [(j, tuple(value.shape)) for j in range(self.widths[s + 1]) if j % self.widths[s] == me]
            else:
                rows = self.ctx.batch // self.widths[s]
                senders = [(p.receiver, _rows_shape(tuple(value.shape), self._dim(name), p.hi - p.lo, rows))
                           for p in pieces(self.ctx.batch, self.widths[s], self.widths[s + 1]) if p.sender == me]
            got = []
            for receiver, shape in senders:
                buf = torch.empty(shape, dtype=value.dtype, device=value.device)
                dist.recv(buf, self._rank(s + 1, receiver, self._peer(s + 1)), tag=self._tag(mb, k, True))
                got.append(buf)
            if self.dims[name] is None:
                grads.append(torch.stack(got).sum(0))
            else:
                grads.append(torch.cat(got, dim=self.dims[name] or 0))
        return grads

    def _send_input_grads(self, mb: int, inputs: list[torch.Tensor]) -> None:
        s, me = self.stage_index, self.replica
        rows = self.ctx.batch // self.widths[s]
        for k, (name, value) in enumerate(zip(self.graph.inputs, inputs, strict=True)):
            if not self._is_float(name):
                continue
            grad = value.grad if value.grad is not None else torch.zeros_like(value)
            if self.dims[name] is None:
                sends = [(me % self.widths[s - 1], grad)]
            else:
                sends = [(p.sender, self._narrow(grad, name, *self._local(s, p.lo, p.hi, me), rows))
                         for p in pieces(self.ctx.batch, self.widths[s - 1], self.widths[s]) if p.receiver == me]
            for sender, part in sends:
                sent = part.contiguous()
                for member in self._members(s - 1):
                    self.works.append(dist.isend(sent, self._rank(s - 1, sender, member), tag=self._tag(mb, k, True)))

    def _forward(self, mb: int, inputs: dict[str, torch.Tensor], target: torch.Tensor | None, training: bool) -> None:
        if self.is_first:
            rows = self._rows(0, self.replica, mb)
            args = [inputs[name][rows].to(self.ctx.world.torch_device) for name in self.graph.inputs]
        else:
            args = self._recv_inputs(mb, training)
        started = time.perf_counter()
        outputs = tuple(self.module(*args))
        self.fwd_s += time.perf_counter() - started
        if not self.is_last:
            self._send_outputs(mb, outputs)
        elif target is not None:
            tgt = target[self._rows(self.stage_index, self.replica, mb)].to(self.ctx.world.torch_device)
            loss = self.ctx.data.loss(outputs, tgt)
            self.losses.append(loss.detach())
            outputs = (loss / (self.ctx.plan.micro_batches * self.widths[-1]),)
        self.saved[mb] = (args, outputs)

    def _backward(self, mb: int) -> None:
        args, outputs = self.saved.pop(mb)
        if self.is_last:
            outputs[0].backward()
        else:
            grads = self._recv_output_grads(mb, outputs)
            pairs = [(o, g) for o, g in zip(outputs, grads, strict=True) if g is not None and o.requires_grad]
            if pairs:
                torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        if not self.is_first:
            self._send_input_grads(mb, args)

    # ---- the runner interface ----------------------------------------------------------------
    def actions(self) -> list[tuple[str, int]]:
        """This stage's order of forwards and backwards over the micro-batches (GPipe or 1F1B)."""
        m, s, n = self.ctx.plan.micro_batches, self.stage_index, len(self.widths)
        if self.ctx.plan.schedule == "gpipe":
            return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        warm = min(n - s - 1, m)
        steady = [a for i in range(m - warm) for a in (("F", warm + i), ("B", i))]
        return [("F", i) for i in range(warm)] + steady + [("B", i) for i in range(m - warm, m)]

    def train_step(self, inputs: dict[str, torch.Tensor], target: torch.Tensor) -> float | None:
        self.works: list[Any] = []
        self.saved: dict[int, Any] = {}
        self.losses: list[torch.Tensor] = []
        with dtensor_scope(self.tp):  # the backward passes too: plain tensors saved beside DTensors
            for kind, mb in self.actions():
                if kind == "F":
                    self._forward(mb, inputs, target, training=True)
                else:
                    self._backward(mb)
        for work in self.works:
            work.wait()
        params = self.named_parameters()
        for p in params.values():
            if self.tp > 1:
                p.grad = placed_gradient(p)
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        # the stages sharing a tied parameter add the whole weight's gradient (in name order on every rank) ...
        for name in sorted(params):
            group = self.tied.group_of(name)
            if group is not None:
                sum_tied_gradient(params[name], group, first=self.tp_rank == 0)
        # ... and the replicas add every other one, shard by shard
        if self.widths[self.stage_index] > 1:
            all_reduce_gradients([(name, p, self.dp_group) for name, p in params.items()
                                  if self.tied.group_of(name) is None], bucket_bytes=self.ctx.bucket_bytes)
        if not self.is_last:
            return None
        loss = torch.stack(self.losses).mean()
        if self.widths[-1] > 1:
            dist.all_reduce(loss, group=self.dp_group)
            loss /= self.widths[-1]
        return float(loss)

    def infer(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        self.works, self.saved, self.losses = [], {}, []
        with torch.no_grad(), dtensor_scope(self.tp):
            for mb in range(self.ctx.plan.micro_batches):
                self._forward(mb, inputs, None, training=False)
        for work in self.works:
            work.wait()
        if not self.is_last:
            return None
        chunks = [self.saved[mb][1] for mb in range(self.ctx.plan.micro_batches)]
        return tuple(torch.cat(parts) for parts in zip(*chunks, strict=True))
