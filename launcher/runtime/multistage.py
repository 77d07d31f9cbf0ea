"""Plans with several stages per rank: torch's multi-stage schedules on ``PipelineStage`` lists.

A plan with ``virtual_stages`` ``v`` lists ``R * v`` stages in pipeline order; stage ``j`` runs on
rank group ``stage_ranks(schedule, R, v)[j]`` (round-robin ``j mod R``, or V-shaped for ZBV and
DualPipeV: ranks ``r`` and ``2R - 1 - r``; :mod:`solvers.model.schedules`).  Every rank builds
each stage of its group (on ``meta``, then its own weights materialised), wraps each as a
``PipelineStage`` with its index and ``num_stages = R * v``, and runs the schedule's torch class
(:data:`solvers.model.schedules.TORCH_SCHEDULE_CLASSES`): ``ScheduleInterleaved1F1B`` (Narayanan
et al., arXiv 2104.04473, Section 2.2), ``ScheduleLoopedBFS`` (Lamy-Poirier, arXiv 2211.05953),
``ScheduleInterleavedZeroBubble`` (ZB-1P, Qi et al., arXiv 2401.10241, Section 3),
``ScheduleZBVZeroBubble`` (ZB-V, same paper, Section 6) and ``ScheduleDualPipeV`` (DeepSeek-V3,
arXiv 2412.19437, Section 3.2.1).

- **Replicas.** With ``W`` devices per rank group there are ``W`` pipelines; pipeline ``r`` is
  replica ``r`` of every group and runs slice ``r`` of every micro-batch (Parmesan Eq. 3), as
  :class:`launcher.runtime.pipeline.PipelineRunner` does; each group's replicas average their
  gradients (all-reduce) after the schedule.
- **Tied parameters.** The stages of one rank that read the same parameter hold one object (its
  gradient accumulates over them); the ranks of every stage that reads it sum their gradients
  (:class:`launcher.runtime.pipeline.TiedGroups`).
- **Gradient scale.** The schedule runs with ``scale_grads=False`` and every parameter's gradient
  is divided once by the micro-batch count afterwards (torch scales per stage, which would divide a
  parameter held by two stages of a rank twice).
- **Integer and bool boundary values** cross encoded in a floating dtype where torch's
  ``PipelineStage`` needs it (:mod:`launcher.runtime.boundary_codec`); the start-up warm-up leaves
  out the pair of stages one rank holds in a V (:class:`launcher.runtime.compat.LocalNeighbourStage`).
- **Refusals.** What torch's classes cannot run is refused before any work
  (:func:`launcher.stagemap.schedule_refusal`, which ``placer launcher check`` applies); here the
  global rank order of every pipeline (:func:`launcher.stagemap.pipeline_ranks`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.distributed import pipelining

from launcher.runtime.boundary_codec import carried_example, stage_codec
from launcher.runtime.context import LaunchContext, replica_rows
from launcher.runtime.data import as_tuple
from launcher.runtime.gradsync import all_reduce_gradients
from launcher.runtime.partition import parameter_aliases, stage_parameters, to_device, wrap_stage
from launcher.runtime.pipeline import TiedGroups, boundary_examples, replica_mean_loss, slice_model, split_model
from launcher.runtime.split_backward import SplitSafeStage
from launcher.runtime.tp_random import seed_shared_stream
from launcher.runtime.weights import materialize, read_targets
from launcher.runtime.world import new_groups
from launcher.stagemap import pipeline_ranks, rank_groups, schedule_refusal
from solvers.model.errors import InvalidInput, InvalidPlan
from solvers.model.schedules import TORCH_SCHEDULE_CLASSES

SPLIT_BACKWARD = frozenset({"interleaved-zb", "zbv", "dualpipev"})  # their backwards run as I, then W


class CopiedOutputs(torch.nn.Module):
    """A stage that returns copies of its tensor outputs.

    The schedules that split a backward into I and W detach the stage's outputs in place after I
    (``stage_backward_input``): a view cannot be detached in place, and an output that the stage's
    own W still reads (an activation saved for a weight gradient) must not be.  The copies are what
    crosses the boundary; the stage keeps its own tensors.
    """

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: torch.Tensor) -> tuple[Any, ...]:
        return tuple(o.clone() if isinstance(o, torch.Tensor) else o for o in as_tuple(self.inner(*args)))


class MultiStageRunner:
    """This rank's stages (one rank group's replica) of one of the W pipelines, and its data-parallel group."""

    def __init__(self, ctx: LaunchContext) -> None:
        self.ctx = ctx
        plan = ctx.plan
        n = len(plan.stages)
        rank_of = ctx.world.rank_of
        schedule_refusal(plan, sorted(rank_of, key=rank_of.__getitem__))
        groups = rank_groups(plan)
        self.width = len(plan.stages[0].devices)
        if ctx.batch % self.width:
            raise InvalidPlan(f"the micro-batch of {ctx.batch} rows does not split evenly over {self.width} replicas",
                              field="stages")
        device = ctx.world.device
        self.stage_indices = [s for s, st in enumerate(plan.stages) if device in st.devices]
        self.stage_index = self.stage_indices[0]  # the group's first stage names the rank (records, checkpoints)
        self.replica = plan.stages[self.stage_index].devices.index(device)
        pipelines = pipeline_ranks(plan, rank_of)
        pp_groups = new_groups(pipelines)
        n_groups = len(pipelines[0])
        dp_groups = new_groups([[rank_of[d] for d in plan.stages[g].devices] for g in range(n_groups)])
        self.dp_group = dp_groups[groups[self.stage_index]]
        sliced = slice_model(ctx, ctx.batch // self.width)
        graphs = split_model(ctx, sliced)
        self.tied = TiedGroups(ctx, sliced.weights, graphs)
        self.aliases = parameter_aliases(sliced.weights)
        self.graphs = [graphs[s] for s in self.stage_indices]
        examples = boundary_examples(sliced.module, ctx.world.torch_device)
        shared: dict[str, torch.Tensor] = {}  # one object per tensor on this rank, whichever of its stages reads it
        self.materialized_bytes = 0
        self.modules: list[torch.nn.Module] = []
        for s, graph in zip(self.stage_indices, self.graphs, strict=True):
            self.materialized_bytes += materialize(graph.module, read_targets(graph.module), self.aliases, ctx.weights,
                                                   ctx.world.torch_device, shared)
            inner: torch.nn.Module = to_device(graph.module, ctx.world.torch_device)
            module = wrap_stage(inner, graph, sliced.module, plan.recomputes(s), ctx.autocast, ctx.world.torch_device)
            if ctx.encode_non_float:  # integer and bool values cross in a floating dtype (boundary_codec)
                module = stage_codec(module, graph.inputs, graph.outputs, {x: e.dtype for x, e in examples.items()},
                                     s == 0, s == n - 1)
            if plan.schedule in SPLIT_BACKWARD:
                module = CopiedOutputs(module)
            module = module.to(ctx.world.torch_device)
            module.register_forward_pre_hook(self._start)
            module.register_forward_hook(self._stop)
            self.modules.append(module)
        self.fwd_s = 0.0
        self._started = 0.0
        mine = pipelines[self.replica]
        to_group_rank = {j: sorted(mine).index(mine[g]) for j, g in enumerate(groups)}
        self.stages: list[pipelining.PipelineStage] = []
        for s, graph, stage_module in zip(self.stage_indices, self.graphs, self.modules, strict=True):
            received = [self._crossing_example(examples[x], x, s > 0) for x in graph.inputs]
            sent = [self._crossing_example(examples[x], x, s < n - 1) for x in graph.outputs]
            stage = SplitSafeStage(stage_module, s, n, ctx.world.torch_device, input_args=tuple(received),
                                        output_args=tuple(sent), group=pp_groups[self.replica])
            stage.stage_index_to_group_rank = dict(to_group_rank)
            self.stages.append(stage)
        schedule_class = getattr(pipelining, TORCH_SCHEDULE_CLASSES[plan.schedule])
        self.schedule = schedule_class(self.stages, plan.micro_batches, loss_fn=self._loss, scale_grads=False)
        self.is_first = 0 in self.stage_indices
        self.is_last = n - 1 in self.stage_indices
        # dropout: one stream per rank, seeded by its first stage and replica (launcher.runtime.tp_random); its
        # stages draw from it in the order the schedule runs them
        self.random_seed: int | None = seed_shared_stream(int(ctx.manifest["source"].get("seed", 0)),
                                                          self.stage_index, self.replica)

    def _crossing_example(self, example: torch.Tensor, name: str, crosses: bool) -> torch.Tensor:
        return carried_example(example, name) if crosses and self.ctx.encode_non_float else example

    def _start(self, *_: Any) -> None:
        self._started = time.perf_counter()

    def _stop(self, *_: Any) -> None:
        self.fwd_s += time.perf_counter() - self._started

    def _loss(self, outputs: Any, target: torch.Tensor) -> torch.Tensor:
        return self.ctx.data.loss(as_tuple(outputs), target)

    def named_parameters(self) -> dict[str, torch.nn.Parameter]:
        """The parameters of this rank's stages under their first names (a tied one once: one object)."""
        out: dict[str, torch.nn.Parameter] = {}
        for module in self.modules:
            for name, p in stage_parameters(module, self.aliases).items():
                out.setdefault(name, p)
        return out

    def counted_parameters(self) -> set[str]:
        """Each parameter once in the world: in replica 0 of the first stage that reads it."""
        mine = set(self.stage_indices)
        return {n for n in self.named_parameters()
                if self.replica == 0 and (n not in self.tied.stages or self.tied.stages[n][0] in mine)}

    def _args(self, inputs: dict[str, torch.Tensor], rows: torch.Tensor) -> list[torch.Tensor]:
        if not self.is_first:
            return []
        return [inputs[name][rows].to(self.ctx.world.torch_device) for name in self.graphs[0].inputs]

    def train_step(self, inputs: dict[str, torch.Tensor], target: torch.Tensor) -> float | None:
        """One iteration: the schedule, the gradient scale, the replicas' average; the loss on the last stage."""
        plan = self.ctx.plan
        rows = replica_rows(plan.micro_batches, self.ctx.batch, self.width, self.replica)
        losses: list[torch.Tensor] = []
        tgt = target[rows].to(self.ctx.world.torch_device) if self.is_last else None
        self.schedule.step(*self._args(inputs, rows), target=tgt, losses=losses)
        for p in self.named_parameters().values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad /= plan.micro_batches
        # replicas average; the ranks whose stages share a tied parameter add their parts
        all_reduce_gradients([(name, p, self.tied.group_of(name) or self.dp_group)
                              for name, p in self.named_parameters().items()
                              if self.tied.group_of(name) is not None or self.width > 1],
                             divide_by=self.width, bucket_bytes=self.ctx.bucket_bytes)
        return replica_mean_loss(losses, self.width, self.dp_group) if self.is_last else None

    def infer(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        """Refused on every rank before any transfer: torch's multi-stage classes have no forward-only pass
        (their ``eval`` still computes the loss, and the V-shaped ones need backward state)."""
        raise InvalidInput(f"--inference: schedule {self.ctx.plan.schedule!r} runs on torch's multi-stage schedule "
                           "classes, which have no forward-only pass; run inference with a gpipe or 1f1b plan",
                           field="inference")
