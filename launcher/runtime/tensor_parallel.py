"""A tensor-parallel stage: its parameters split by the rules of :mod:`solvers.model.tp_rules`, run as DTensors.

Megatron-LM's tensor parallelism (Shoeybi et al. 2019, §3): a column-parallel linear splits its
weight along its outputs, the row-parallel linear after it along its inputs, the input embedding
and the LM head along the vocabulary.  :func:`op_kinds` annotates every op of the re-exported
model with :func:`solvers.model.tp_rules.split_layout` (the rules the simulator scores, matched on
the same module paths, targets and module types as ``placer extract`` writes), and
:func:`parameter_placements` turns the kind of the op that reads a weight into that weight's
:class:`~torch.distributed.tensor.Placement` on the stage's tensor-parallel mesh.
:func:`parallelize_stage` applies them with ``parallelize_module``, one :class:`ShardParameters`
style per module path.

A stage is an exported ATen graph that reads its weights by ``get_attr``, not a tree of
``nn.Linear`` modules: the module hooks of ``ColwiseParallel`` / ``RowwiseParallel`` would never
fire, so the styles here place the parameters only, and :class:`TensorParallelStage` runs the
graph on DTensors: the values that enter the stage become replicated DTensors (Megatron's ``f``:
identity forward, all-reduce of the gradient backward), DTensor's sharding propagation runs every
op on the local shards and inserts the collectives the placements need (the row-parallel output's
all-reduce, Megatron's ``g``), and the stage's outputs leave as full tensors
(``redistribute`` to ``Replicate``).  Every device of a tensor-parallel group therefore sends and
receives the same full boundary values, each to and from its own peer in the neighbouring stages.
Tensors the graph makes itself (masks, positions, lifted constants) take part as replicated values
(``implicit_replication``).

With sequence parallelism (Korthikanti et al. 2022, §4.2.2) the row-parallel outputs are
reduce-scattered along the sequence and the column-parallel inputs all-gathered
(:mod:`launcher.runtime.sequence_parallel`), and the boundary values cross as each device's part
(:class:`Crossing`, found before the first step by :func:`stage_crossings`).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import fx
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Placement, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module

from extract.export import collect_ops
from launcher.runtime.context import LaunchContext
from launcher.runtime.model import Rebuilt
from launcher.runtime.partition import StageGraph
from launcher.runtime.sequence_parallel import rewrite_for_sequence, summed
from launcher.runtime.tp_random import RANDOM_OPS, own_stream
from launcher.tensor_plan import tensor_parallel_degree
from solvers.model.errors import InvalidPlan
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.tp_rules import COLUMN, ROW, SHARDED, VOCAB_EMBEDDING, VOCAB_HEAD, split_layout

_LINEAR = {"aten.linear.default"}  # weight [out, in]
_ADDMM = {"aten.addmm.default", "aten.mm.default", "aten.matmul.default"}  # weight [in, out] (Conv1D)
_EMBEDDING = {"aten.embedding.default"}
_RESHAPES = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default"}


def op_kinds(rebuilt: Rebuilt) -> dict[str, str]:
    """FX node name -> split kind of every op of the exported model (:func:`split_layout` on its ops)."""
    exported = collect_ops(rebuilt.built, rebuilt.program)
    nodes = [
        Node(r.id, r.op, 0.0, layer=r.layer, attrs={"module": r.module_type} if r.module_type else {})
        for r in exported.ops
    ]
    edges = [Edge(src, r.id, float(size)) for r in exported.ops for src, size in dict(r.inputs).items()]
    graph = OpGraph.build("tp", nodes, edges, rebuilt.batch)
    layout = split_layout(graph)
    return dict(zip(graph.ids, layout.kinds, strict=True))


def _weight_placements(kind: str, target: str, n_args: int) -> Sequence[Placement | None]:
    """The placement of each argument of a split op (``None``: not a weight of the split)."""
    if target in _LINEAR:  # linear(x, w[out, in], b[out])
        if kind in (COLUMN, VOCAB_HEAD):
            return [None, Shard(0), Shard(0)][:n_args]
        if kind == ROW:
            return [None, Shard(1), Replicate()][:n_args]
    if target in _ADDMM and kind in (COLUMN, VOCAB_HEAD, ROW):  # addmm(b[out], x, w[in, out]) or mm(x, w[in, out])
        with_bias = target == "aten.addmm.default"
        w, b = (Shard(1), Shard(0)) if kind in (COLUMN, VOCAB_HEAD) else (Shard(0), Replicate())
        return [b, None, w] if with_bias else [None, w]
    if target in _EMBEDDING and kind == VOCAB_EMBEDDING:  # embedding(w[vocab, dim], ids)
        return [Shard(0), None][:n_args]
    return [None] * n_args


def parameter_placements(module: fx.GraphModule, kinds: Mapping[str, str]) -> dict[str, Placement]:
    """``get_attr`` target -> its placement: split as the kind of the op reading it says, else replicated.

    A weight that ops of different kinds would split differently (or one split and one whole)
    stays replicated.
    """
    wanted: dict[str, set[tuple[str, int | None]]] = {}
    for node in module.graph.nodes:
        if node.op != "call_function":
            continue
        target = str(node.target)
        kind = kinds.get(node.name, "")
        placements = _weight_placements(kind, target, len(node.args))
        for arg, placement in zip(node.args, placements, strict=False):
            if isinstance(arg, fx.Node) and arg.op == "get_attr":
                key = ("shard", placement.dim) if isinstance(placement, Shard) else ("replicate", None)
                wanted.setdefault(str(arg.target), set()).add(key)
        for arg in node.all_input_nodes:
            if arg.op == "get_attr" and arg not in node.args[: len(placements)]:
                wanted.setdefault(str(arg.target), set()).add(("replicate", None))
    out: dict[str, Placement] = {}
    for name, keys in wanted.items():
        if len(keys) == 1 and next(iter(keys))[0] == "shard":
            dim = next(iter(keys))[1]
            out[name] = Shard(int(dim if dim is not None else 0))
        else:
            out[name] = Replicate()
    return out


class ShardParameters(ParallelStyle):
    """A parallel style that places a module's own parameters (``placements`` by their local name), for
    modules whose forward the exported graph does not call.  ``made``: the DTensor parameter already
    made for a parameter object (a tied parameter is one object under several names, and stays one)."""

    def __init__(self, placements: Mapping[str, Placement], made: dict[int, torch.nn.Parameter]) -> None:
        super().__init__()
        self.placements = dict(placements)
        self.made = made

    def _apply(self, module: torch.nn.Module, device_mesh: DeviceMesh) -> torch.nn.Module:
        for name, param in list(module._parameters.items()):
            if param is None or name not in self.placements:
                continue
            if id(param) not in self.made:
                # every rank holds the same full value (seeded or read by name): each keeps its own shard
                value = distribute_tensor(param.data, device_mesh, [self.placements[name]], src_data_rank=None)
                self.made[id(param)] = torch.nn.Parameter(value, requires_grad=param.requires_grad)
            module.register_parameter(name, self.made[id(param)])
        return module


def stage_parameter_placements(module: torch.nn.Module, placements: Mapping[str, Placement]) -> dict[str, Placement]:
    """Every parameter name of ``module`` -> its placement (``placements``, else replicated); a parameter under
    several names (tied) takes their common placement, or stays replicated when they differ."""
    names: dict[int, list[str]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    placed: dict[str, Placement] = {}
    for group in names.values():
        kinds = {placements.get(n, Replicate()) for n in group}
        for n in group:
            placed[n] = next(iter(kinds)) if len(kinds) == 1 else Replicate()
    return placed


def parallelize_stage(module: fx.GraphModule, mesh: DeviceMesh, placements: Mapping[str, Placement]) -> None:
    """``parallelize_module`` with one :class:`ShardParameters` per module path that holds a parameter.

    Buffers stay plain tensors (replicated by ``implicit_replication``).  A parameter under
    several names (tied) takes their common placement, or stays replicated when they differ.
    """
    placed = stage_parameter_placements(module, placements)
    by_holder: dict[str, dict[str, Placement]] = {}
    for name, placement in placed.items():
        holder, _, leaf = name.rpartition(".")
        by_holder.setdefault(holder, {})[leaf] = placement
    made: dict[int, torch.nn.Parameter] = {}
    if "" in by_holder:
        ShardParameters(by_holder.pop(""), made)._apply(module, mesh)
    parallelize_module(module, mesh, {holder: ShardParameters(leaves, made) for holder, leaves in by_holder.items()})


def tensor_parallel_module(module: fx.GraphModule, mesh: DeviceMesh, kinds: Mapping[str, str], *,
                           sequence_parallel: bool = False, entering: Sequence[Crossing | None] = (),
                           leaving: Sequence[Crossing | None] = ()) -> TensorParallelStage:
    """A stage graph made tensor-parallel over the 1-D ``mesh``: its weights placed by the rules
    (:func:`parameter_placements`, :func:`parallelize_stage`) and the graph run on DTensors
    (:class:`TensorParallelStage`, which takes the other arguments)."""
    parallelize_stage(module, mesh, parameter_placements(module, kinds))
    return TensorParallelStage(module, mesh, kinds, sequence_parallel=sequence_parallel, entering=entering,
                               leaving=leaving)


def group_mesh(group: Any, device_type: str) -> DeviceMesh:
    """The 1-D ``tp`` mesh of one tensor-parallel group (a process group every rank made; its ranks in increasing
    order, so a device's shard is the one of its place among them)."""
    return DeviceMesh.from_group(group, device_type, mesh_dim_names=("tp",))


def _assert_local_metadata(value: Any, *args: Any, **kwargs: Any) -> None:
    """``aten._assert_tensor_metadata`` (the export's dtype/device check) on a DTensor's local part."""
    torch.ops.aten._assert_tensor_metadata.default(local_tensor(value), *args, **kwargs)


def _attention_by_heads(query: Any, key: Any, value: Any, attn_mask: Any = None, *args: Any, **kwargs: Any) -> Any:
    """``aten.scaled_dot_product_attention`` where each device attends with its own heads.

    Megatron's attention runs per head on the heads of the column-parallel QKV (Shoeybi et al. 2019,
    §3): with the queries split by heads (``Shard`` of the heads dimension, ``[.., heads, seq, dim]``)
    every device runs the local kernel on its heads (the mask cut to them when it has a heads
    dimension), and the output is split the same way, without communication; otherwise the inputs
    are made whole (replicated, gathered where they were split) and every device runs the whole
    attention.  Its dropout (``dropout_p``) draws by heads from each device's own stream, and the whole
    attention's from the stream the group shares (:mod:`launcher.runtime.tp_random`).
    """
    mask = kwargs.pop("attn_mask", attn_mask)
    found = next((t for t in (query, key, value) if isinstance(t, DTensor)), None)
    if found is None:
        return torch.ops.aten.scaled_dot_product_attention.default(query, key, value, mask, *args, **kwargs)
    mesh, heads_dim = found.device_mesh, query.dim() - 3
    placements = {tuple(t.placements) for t in (query, key, value) if isinstance(t, DTensor)}
    by_heads = placements == {(Shard(heads_dim),)} and all(isinstance(t, DTensor) for t in (query, key, value))
    place: list[Placement] = [Shard(heads_dim) if by_heads else Replicate()]

    def local(t: Any, split: bool) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        whole = t if isinstance(t, DTensor) else DTensor.from_local(t, mesh, [Replicate()], run_check=False)
        return whole.redistribute(mesh, place if split else [Replicate()]).to_local()

    split_mask = by_heads and isinstance(mask, torch.Tensor) and mask.dim() == query.dim() and mask.shape[heads_dim] > 1
    dropout_p = args[0] if args else kwargs.get("dropout_p", 0.0)
    # the attention dropout of each device's heads from its own stream; of the whole attention, the shared one
    with own_stream(mesh) if by_heads and dropout_p else nullcontext():
        out = torch.ops.aten.scaled_dot_product_attention.default(
            local(query, True), local(key, True), local(value, True), local(mask, split_mask), *args, **kwargs
        )
    return DTensor.from_local(out, mesh, place, run_check=False)


_ON_LOCAL: dict[Any, Any] = {
    torch.ops.aten._assert_tensor_metadata.default: _assert_local_metadata,
    torch.ops.aten.scaled_dot_product_attention.default: _attention_by_heads,
    **RANDOM_OPS,  # dropout masks from the shared or the device's own stream (launcher.runtime.tp_random)
}


class TensorParallelStage(torch.nn.Module):
    """The stage graph run on DTensors over ``mesh`` (module doc): full tensors in and out, or with sequence
    parallelism each device's part of them.

    The export's metadata checks (no sharding rule: they return nothing) look at the local part,
    attention runs by heads (:func:`_attention_by_heads`), and the output of every row-parallel and
    vocabulary-parallel op (``kinds``: :func:`op_kinds`) is summed as soon as it is made
    (:func:`~launcher.runtime.sequence_parallel.summed`).
    With ``sequence_parallel`` it is reduce-scattered along the sequence instead and the column inputs
    are all-gathered (:mod:`launcher.runtime.sequence_parallel`); ``entering`` and ``leaving`` (per
    input and output, ``None``: a full tensor) are the :class:`Crossing` of each boundary value.
    It runs inside :func:`dtensor_scope`, which the caller holds around forward and backward alike
    (``implicit_replication`` does not nest: its exit turns it off).
    """

    def __init__(self, inner: fx.GraphModule, mesh: DeviceMesh, kinds: Mapping[str, str], *,
                 sequence_parallel: bool = False, entering: Sequence[Crossing | None] = (),
                 leaving: Sequence[Crossing | None] = ()) -> None:
        super().__init__()
        for node in list(inner.graph.nodes):
            if node.op == "call_function" and node.target in _ON_LOCAL:
                node.target = _ON_LOCAL[node.target]
            if not sequence_parallel and node.op == "call_function" and kinds.get(node.name) in (ROW, VOCAB_EMBEDDING):
                with inner.graph.inserting_after(node):
                    made = inner.graph.call_function(summed, (node,))
                node.replace_all_uses_with(made, delete_user_cb=partial(operator.is_not, made))
        if sequence_parallel:
            rewrite_for_sequence(inner.graph, inner, kinds)
        inner.graph.lint()
        inner.recompile()
        self.inner = inner
        self.mesh = mesh
        self.entering = tuple(entering)
        self.leaving = tuple(leaving)

    def _enter(self, value: Any, crossing: Crossing | None) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if crossing is None:  # a full tensor: replicated (Megatron's f) when it is floating, else plain
            return DTensor.from_local(value, self.mesh, [Replicate()], run_check=False) if value.is_floating_point() \
                else value
        part = DTensor.from_local(value, self.mesh, [crossing.placement], run_check=False, shape=crossing.shape,
                                  stride=crossing.stride)
        entered = part if crossing.entry == crossing.placement else part.redistribute(self.mesh, [crossing.entry])
        return entered.to_local() if crossing.plain else entered

    def _leave(self, value: Any, crossing: Crossing | None) -> Any:
        if crossing is not None and isinstance(value, torch.Tensor) and not isinstance(value, DTensor):
            value = DTensor.from_local(value, self.mesh, [Replicate()], run_check=False)  # a whole plain tensor
        if not isinstance(value, DTensor):
            return value
        return value.redistribute(self.mesh, [Replicate() if crossing is None else crossing.placement]).to_local()

    def forward(self, *args: Any) -> tuple[Any, ...]:
        wrapped = [self._enter(a, self.entering[i] if i < len(self.entering) else None) for i, a in enumerate(args)]
        out = self.inner(*wrapped)  # under the caller's dtensor_scope (forward and backward alike)
        return tuple(self._leave(o, self.leaving[i] if i < len(self.leaving) else None) for i, o in enumerate(out))


@dataclass(frozen=True)
class Crossing:
    """How a boundary value travels from a stage to the next with sequence parallelism.

    Each device sends its part (``placement``: ``Shard(d)``, or ``Replicate`` for the whole) to its
    peer in the next stage, which takes it in ``entry`` (``plain``: then as a plain tensor).  A
    floating value its stage holds sharded (the residual stream by the sequence, the attention by
    heads) crosses as its shards and stays sharded; any other value (one held whole: rotary tables,
    masks, positions) crosses cut along its first dimension ``tp`` divides and is all-gathered on
    arrival (the scatter/gather of Narayanan et al. 2021, §4.1), or whole when ``tp`` divides none.
    """

    placement: Placement
    entry: Placement
    plain: bool
    shape: torch.Size
    stride: tuple[int, ...]
    local_shape: tuple[int, ...]
    dtype: torch.dtype

    def example(self, device: torch.device) -> torch.Tensor:
        """An empty tensor of this device's part (floating parts require grad: their gradients cross back)."""
        return torch.empty(self.local_shape, dtype=self.dtype, device=device).requires_grad_(self.dtype.is_floating_point)


def _crossing(value: Any, mesh: DeviceMesh) -> tuple[Crossing | None, Any]:
    """The :class:`Crossing` of a value a stage returns (meta), and the value as the next stage takes it."""
    if not isinstance(value, torch.Tensor):
        return None, value
    whole = value if isinstance(value, DTensor) else DTensor.from_local(value, mesh, [Replicate()], run_check=False)
    held, floating = whole.placements[0], value.is_floating_point()
    placement: Placement
    entry: Placement
    if floating and isinstance(held, Shard):
        placement = entry = held
    else:
        dims = [d for d, size in enumerate(whole.shape) if size and size % mesh.size() == 0]
        placement, entry = (Shard(dims[0]) if dims else Replicate()), Replicate()
    sent = whole.redistribute(mesh, [placement])
    crossing = Crossing(placement, entry, not floating, whole.shape, tuple(whole.stride()),
                        tuple(sent.to_local().shape), value.dtype)
    arrived = sent if entry == placement else sent.redistribute(mesh, [entry])
    return crossing, arrived.to_local() if crossing.plain else arrived


def _on_meta(module: fx.GraphModule, mesh: DeviceMesh, placements: Mapping[str, Placement]) -> fx.GraphModule:
    """A copy of a stage graph that runs on ``meta``: its parameters meta DTensors placed as the runtime places
    them, its buffers and constants meta tensors, every ``device`` argument ``meta``."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(module.graph, {}))
    meta = torch.device("meta")
    attrs: dict[str, Any] = {}
    for node in graph.nodes:
        node.args = tuple(meta if isinstance(a, torch.device) else a for a in node.args)
        if isinstance(node.kwargs.get("device"), torch.device):
            node.kwargs = {**node.kwargs, "device": meta}
        if node.op != "get_attr":
            continue
        target = str(node.target)
        owner, _, leaf = target.rpartition(".")
        value = getattr(module.get_submodule(owner) if owner else module, leaf)
        if isinstance(value, torch.nn.Parameter):
            value = distribute_tensor(value.detach().to(meta), mesh, [placements.get(target, Replicate())],
                                      src_data_rank=None)
        elif isinstance(value, torch.Tensor):
            value = value.detach().to(meta)
        attrs[target] = value
    return fx.GraphModule(attrs, graph)


def stage_crossings(stages: Sequence[StageGraph], whole: fx.GraphModule, kinds: Mapping[str, str],
                    mesh: DeviceMesh) -> dict[tuple[int, str], Crossing]:
    """``(sending stage, value name)`` -> its :class:`Crossing`, for every boundary of a sequence-parallel plan.

    Every stage graph runs once on ``meta`` DTensors over this device's ``tp`` mesh, as it runs for
    real (:class:`TensorParallelStage`, the sequence-parallel rewrite, the values entering as the
    previous stage's crossings give them), so the placement each boundary value has when its stage
    makes it is known before the pipeline allocates its receive buffers; no communication (meta).
    """
    values: dict[str, Any] = {
        n.name: torch.empty(tuple(n.meta["val"].shape), dtype=n.meta["val"].dtype, device="meta")
        for n in whole.graph.nodes if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
    }
    out: dict[tuple[int, str], Crossing] = {}
    with torch.no_grad(), implicit_replication():
        for st in stages[:-1]:
            placements = stage_parameter_placements(st.module, parameter_placements(st.module, kinds))
            stage = TensorParallelStage(_on_meta(st.module, mesh, placements), mesh, kinds, sequence_parallel=True)
            # stage 0 takes the model inputs as the runtime does; a later stage, the values as they arrived
            wrapped = [values[name] if (st.index - 1, name) in out else stage._enter(values[name], None)
                       for name in st.inputs]
            made = stage.inner(*wrapped)
            for name, value in zip(st.outputs, made, strict=True):
                crossing, values[name] = _crossing(value, mesh)
                if crossing is not None:
                    out[(st.index, name)] = crossing
    return out


def head_refusal(module: fx.GraphModule, kinds: Mapping[str, str], tp: int, stage: int) -> None:
    """Refuse (naming the op) a reshape inside a column/row pair that splits the shard into a head
    count ``tp`` does not divide: the heads of one device would straddle two devices."""
    for node in module.graph.nodes:
        if node.op != "call_function" or kinds.get(node.name) != SHARDED:
            continue
        if str(node.target) not in _RESHAPES:
            continue
        src = node.args[0] if node.args else None
        val, before = node.meta.get("val"), getattr(src, "meta", {}).get("val") if isinstance(src, fx.Node) else None
        if not isinstance(val, torch.Tensor) or not isinstance(before, torch.Tensor) or val.dim() != before.dim() + 1:
            continue
        heads = int(val.shape[-2])
        if int(val.shape[-2]) * int(val.shape[-1]) == int(before.shape[-1]) and heads % tp:
            raise InvalidPlan(
                f"stages[{stage}].tp: op {node.name!r} splits the shard into {heads} heads, which "
                f"tp={tp} does not divide",
                field=f"stages[{stage}].tp",
                ref=node.name,
            )


def plan_mesh(ctx: LaunchContext) -> DeviceMesh:
    """The plan's ``pp x dp x tp`` :class:`DeviceMesh`: ``mesh[s, k, j]`` is the rank of device ``k*tp + j``
    of stage ``s`` (replica ``k``'s tensor-parallel group is ``devices[k*tp:(k+1)*tp]``, docs/formats.md)."""
    plan, rank_of = ctx.plan, ctx.world.rank_of
    tp = tensor_parallel_degree(plan)
    ranks = [
        [[rank_of[st.devices[k * tp + j]] for j in range(tp)] for k in range(len(st.devices) // tp)]
        for st in plan.stages
    ]
    return DeviceMesh(ctx.world.torch_device.type, torch.tensor(ranks), mesh_dim_names=("pp", "dp", "tp"))


def is_sharded(param: torch.Tensor) -> bool:
    """Whether ``param`` is a DTensor split over its mesh (each device holds a different part)."""
    return isinstance(param, DTensor) and any(isinstance(p, Shard) for p in param.placements)


def local_tensor(value: torch.Tensor) -> torch.Tensor:
    """This device's part of a DTensor (a view: writing into it writes the DTensor), else ``value``."""
    return value.to_local() if isinstance(value, DTensor) else value


def placed_gradient(param: torch.nn.Parameter) -> torch.Tensor | None:
    """``param``'s gradient with the parameter's own placement (a replicated weight's partial sum reduced)."""
    grad = param.grad
    if isinstance(grad, DTensor) and isinstance(param, DTensor) and tuple(grad.placements) != tuple(param.placements):
        return grad.redistribute(param.device_mesh, param.placements)
    return grad


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """The whole of a DTensor (gathered over its mesh: every device of the mesh calls it), else ``value``."""
    return value.full_tensor() if isinstance(value, DTensor) else value


def dtensor_scope(tp: int) -> AbstractContextManager[Any]:
    """Where a tensor-parallel stage runs forward and backward (``tp`` > 1): a plain tensor beside a DTensor
    (a mask, a position, a lifted constant) takes part replicated (``implicit_replication``)."""
    return implicit_replication() if tp > 1 else nullcontext()
