"""Throughput plans with equal replica counts: ``PipelineStage`` + ``ScheduleGPipe`` / ``Schedule1F1B``.

With R replicas per stage there are R pipelines; pipeline r is replica r of every stage and
processes slice r of every micro-batch (Parmesan Eq. 3).  Each stage's replicas form one
data-parallel group whose gradients are averaged by all-reduce after the schedule (docs/formats.md:
all-reduce at the end of the iteration).  A stage the plan's ``recompute`` names (``true``: every
stage) is checkpointed (only its inputs are kept for backward).  The model is re-exported at the slice's row count
when R > 1 (the export has static shapes); the op ids must be the same.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from launcher.runtime.boundary_codec import carried_example, stage_codec
from launcher.runtime.context import LaunchContext, replica_rows
from launcher.runtime.data import as_tuple
from launcher.runtime.gradsync import all_reduce_gradients
from launcher.runtime.model import Rebuilt, rebuild
from launcher.runtime.partition import (
    StageGraph,
    assign_stages,
    build_stages,
    parameter_aliases,
    shared_parameters,
    stage_parameters,
    to_device,
    wrap_stage,
)
from launcher.runtime.sequence_parallel import sequence_refusal
from launcher.runtime.tensor_parallel import (
    Crossing,
    dtensor_scope,
    is_sharded,
    op_kinds,
    placed_gradient,
    plan_mesh,
    stage_crossings,
    tensor_parallel_module,
)
from launcher.runtime.tp_random import seed_shared_stream
from launcher.runtime.weights import materialize, read_targets
from launcher.runtime.world import new_groups
from launcher.tensor_plan import tensor_parallel_degree
from solvers.model.errors import InvalidPlan


def slice_model(ctx: LaunchContext, rows: int) -> Rebuilt:
    """The model exported at ``rows`` rows (the reference when it is the graph's batch)."""
    if rows == ctx.batch:
        return ctx.reference
    again = rebuild(ctx.manifest["source"], batch=rows, weights=ctx.reference.weights, device=ctx.export_device)
    want = {n.name for n in ctx.reference.module.graph.nodes if n.op == "call_function"}
    got = {n.name for n in again.module.graph.nodes if n.op == "call_function"}
    if want != got:
        odd = sorted(want ^ got)[:3]
        raise InvalidPlan(f"the model exported at {rows} rows (a micro-batch slice) has other op ids ({odd}); "
                          "use a batch that every stage's replica count divides into equal exports", field="stages")
    return again


def split_model(ctx: LaunchContext, rebuilt: Rebuilt) -> list[StageGraph]:
    """The stage modules (every rank builds every stage's graph; it runs only its own)."""
    assignment = assign_stages(rebuilt.module, ctx.stage_of)
    return build_stages(rebuilt.module, rebuilt.attr, assignment, len(ctx.plan.stages))


def replica_mean_loss(losses: list[torch.Tensor], width: int, dp_group: Any) -> float:
    """The last stage's loss of one step: the mean over its micro-batches, averaged over its ``width`` replicas."""
    loss = torch.stack([x.detach() for x in losses]).mean()
    if width > 1:
        dist.all_reduce(loss, group=dp_group)
        loss /= width
    return float(loss)


class TiedGroups:
    """Parameters that several stages read (tied weights) and the process group of each stage set.

    Every rank creates the same groups in the same order.  A group holds every replica of every
    stage that reads the parameter; after backward the parameter's gradient is summed over it,
    so all copies take the same step and stay equal (the input/output embedding of Megatron-LM).
    With tensor-parallel stages (``tp`` > 1) there is one group per position ``j`` in the
    tensor-parallel groups: the devices that hold the same shard of the (vocabulary-parallel) weight.
    """

    def __init__(self, ctx: LaunchContext, weights: torch.nn.Module, stages: list[StageGraph], tp: int = 1) -> None:
        self.stages = shared_parameters(weights, stages)
        sets = sorted({tuple(v) for v in self.stages.values()})
        # a rank holding several of the stages (virtual stages) is in the group once
        ranks = [sorted({ctx.world.rank_of[d] for s in group for i, d in enumerate(ctx.plan.stages[s].devices)
                         if i % tp == j}) for group in sets for j in range(tp)]
        made = new_groups(ranks)
        self.groups = {(group, j): made[g * tp + j] for g, group in enumerate(sets) for j in range(tp)}

    def counted(self, names: list[str], stage: int, replica: int) -> set[str]:
        """The parameters a rank adds to the global gradient norm: each once, in its first stage's replica 0."""
        return {n for n in names if replica == 0 and (n not in self.stages or self.stages[n][0] == stage)}

    def group_of(self, name: str, tp_rank: int = 0) -> dist.ProcessGroup | None:
        where = self.stages.get(name)
        return None if where is None else self.groups[(tuple(where), tp_rank)]


def boundary_examples(gm: torch.fx.GraphModule, device: torch.device) -> dict[str, torch.Tensor]:
    """Value name -> an empty tensor of its exported shape and dtype (contiguous) on ``device``.

    Floating tensors require grad: their gradients cross the boundary in backward.
    """
    out: dict[str, torch.Tensor] = {}
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            example = torch.empty(tuple(val.shape), dtype=val.dtype, device=device)
            out[node.name] = example.requires_grad_(val.dtype.is_floating_point)
    return out


class PipelineRunner:
    """This rank's stage of one of the R pipelines, and its data-parallel group."""

    def __init__(self, ctx: LaunchContext) -> None:
        self.ctx = ctx
        plan = ctx.plan
        self.tp = tensor_parallel_degree(plan)
        self.width = len(plan.stages[0].devices) // self.tp  # data-parallel replicas
        if ctx.batch % self.width:
            raise InvalidPlan(f"the micro-batch of {ctx.batch} rows does not split evenly over {self.width} replicas",
                              field="stages")
        self.stage_index, index = ctx.stage_and_replica()
        self.replica, self.tp_rank = divmod(index, self.tp)
        rank_of = ctx.world.rank_of
        # pipeline (k, j): device j of replica k's tensor-parallel group in every stage
        pipelines = [[rank_of[st.devices[k * self.tp + j]] for st in plan.stages]
                     for k in range(self.width) for j in range(self.tp)]
        self.mesh: DeviceMesh | None = None
        if self.tp == 1:
            pp_group = new_groups(pipelines)[self.replica]
            self.dp_group = new_groups([[rank_of[d] for d in st.devices] for st in plan.stages])[self.stage_index]
        else:
            self.mesh = plan_mesh(ctx)
            pp_group, self.dp_group = self.mesh["pp"].get_group(), self.mesh["dp"].get_group()
        sliced = slice_model(ctx, ctx.batch // self.width)
        stages = split_model(ctx, sliced)
        self.tied = TiedGroups(ctx, sliced.weights, stages, self.tp)
        self.aliases = parameter_aliases(sliced.weights)
        self.graph = stages[self.stage_index]
        self.materialized_bytes = materialize(self.graph.module, read_targets(self.graph.module), self.aliases,
                                              ctx.weights, ctx.world.torch_device)
        inner: torch.nn.Module = to_device(self.graph.module, ctx.world.torch_device)
        # with sequence parallelism each boundary value crosses as this device's part (Crossing)
        crossings: dict[tuple[int, str], Crossing] = {}
        if self.mesh is not None:
            tp_mesh = self.mesh["tp"]
            kinds = op_kinds(sliced)
            if plan.sequence_parallel:
                sequence_refusal(self.graph.module, kinds, self.tp, self.stage_index)
                crossings = stage_crossings(stages, sliced.module, kinds, tp_mesh)
            inner = tensor_parallel_module(
                self.graph.module, tp_mesh, kinds, sequence_parallel=plan.sequence_parallel,
                entering=[crossings.get((self.stage_index - 1, n)) for n in self.graph.inputs],
                leaving=[crossings.get((self.stage_index, n)) for n in self.graph.outputs])
        module = wrap_stage(inner, self.graph, sliced.module, plan.recomputes(self.stage_index), ctx.autocast,
                            ctx.world.torch_device)
        # the boundary values' shapes and dtypes from the export: no shape inference at run time
        examples = boundary_examples(sliced.module, ctx.world.torch_device)
        if ctx.encode_non_float:  # integer and bool values cross in a floating dtype (boundary_codec)
            module = stage_codec(module, self.graph.inputs, self.graph.outputs,
                                 {n: e.dtype for n, e in examples.items()}, self.is_first, self.is_last)
        self.module = module.to(ctx.world.torch_device)
        self.fwd_s = 0.0
        self.module.register_forward_pre_hook(self._start)
        self.module.register_forward_hook(self._stop)
        mine = pipelines[self.replica * self.tp + self.tp_rank]
        # this device's parts of the values it receives and sends (sequence parallelism; --save-step records them)
        self.boundary_parts = {
            way: {n: list(crossings[(s, n)].local_shape) for n in names if (s, n) in crossings}
            for way, s, names in (("received", self.stage_index - 1, self.graph.inputs),
                                  ("sent", self.stage_index, self.graph.outputs))
        }

        def example(stage: int, name: str, crosses: bool) -> torch.Tensor:
            crossing = crossings.get((stage, name))
            found = examples[name] if crossing is None else crossing.example(ctx.world.torch_device)
            return carried_example(found, name) if crosses and ctx.encode_non_float else found

        stage = PipelineStage(self.module, self.stage_index, len(plan.stages), ctx.world.torch_device,
                              input_args=tuple(example(self.stage_index - 1, n, not self.is_first)
                                               for n in self.graph.inputs),
                              output_args=tuple(example(self.stage_index, n, not self.is_last)
                                                for n in self.graph.outputs),
                              group=pp_group)
        stage.stage_index_to_group_rank = {i: dist.get_group_rank(pp_group, r) for i, r in enumerate(mine)}
        schedule_class = ScheduleGPipe if plan.schedule == "gpipe" else Schedule1F1B
        self.schedule = schedule_class(stage, plan.micro_batches, loss_fn=self._loss)
        self.stage = stage
        # dropout: one stream per stage replica (its tensor-parallel group where it has one), seeded by stage and
        # replica (launcher.runtime.tp_random): without it every rank draws from the state the model's build left
        # (the same seed on every rank), and two stages of one shape would draw the same masks
        self.random_seed: int | None = seed_shared_stream(int(ctx.manifest["source"].get("seed", 0)),
                                                          self.stage_index, self.replica)
        self.forward_only: ScheduleGPipe | None = None
        self._started = 0.0

    def _start(self, *_: Any) -> None:
        self._started = time.perf_counter()

    def _stop(self, *_: Any) -> None:
        self.fwd_s += time.perf_counter() - self._started

    def _loss(self, outputs: Any, target: torch.Tensor) -> torch.Tensor:
        return self.ctx.data.loss(as_tuple(outputs), target)

    @property
    def is_first(self) -> bool:
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        return self.stage_index == len(self.ctx.plan.stages) - 1

    def named_parameters(self) -> dict[str, torch.nn.Parameter]:
        """This stage's parameters under their first names in the model."""
        return stage_parameters(self.module, self.aliases)

    def counted_parameters(self) -> set[str]:
        """Each parameter once in the world: a shard on every device of its group, a replicated one on the first."""
        params = self.named_parameters()
        mine = [n for n, p in params.items() if self.tp_rank == 0 or is_sharded(p)]
        return self.tied.counted(mine, self.stage_index, self.replica)

    def _args(self, inputs: dict[str, torch.Tensor], rows: torch.Tensor) -> list[torch.Tensor]:
        if not self.is_first:
            return []
        return [inputs[name][rows].to(self.ctx.world.torch_device) for name in self.graph.inputs]

    def train_step(self, inputs: dict[str, torch.Tensor], target: torch.Tensor) -> float | None:
        """One iteration: the schedule, then the replicas' gradient average; the loss on the last stage."""
        rows = replica_rows(self.ctx.plan.micro_batches, self.ctx.batch, self.width, self.replica)
        losses: list[torch.Tensor] = []
        tgt = target[rows].to(self.ctx.world.torch_device) if self.is_last else None
        with dtensor_scope(self.tp):  # the backward passes too: plain tensors saved beside DTensors
            self.schedule.step(*self._args(inputs, rows), target=tgt, losses=losses, return_outputs=False)
        params = self.named_parameters()
        if self.tp > 1:
            for p in params.values():
                p.grad = placed_gradient(p)
        # replicas average; the stages that share a tied parameter add their parts (shard by shard)
        groups = {name: self.tied.group_of(name, self.tp_rank) for name in params}
        all_reduce_gradients([(name, p, groups[name] or self.dp_group) for name, p in params.items()
                              if groups[name] is not None or self.width > 1],
                             divide_by=self.width, bucket_bytes=self.ctx.bucket_bytes)
        return replica_mean_loss(losses, self.width, self.dp_group) if self.is_last else None

    def infer(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        """A forward pass of every micro-batch; the last stage returns its replica's outputs, rows in order."""
        rows = replica_rows(self.ctx.plan.micro_batches, self.ctx.batch, self.width, self.replica)
        if self.forward_only is None:  # forwards only: GPipe's order, whatever the plan's schedule
            self.forward_only = ScheduleGPipe(self.stage, self.ctx.plan.micro_batches)
        with torch.no_grad(), dtensor_scope(self.tp):
            out = self.forward_only.step(*self._args(inputs, rows))
        return as_tuple(out) if self.is_last else None
