"""The exported graph cut into one FX module per stage, at any op boundaries the plan gives.

``program.module()`` (the unlifted module: parameters are ``get_attr`` nodes) is partitioned by
stage id.  Stage ``s`` is a :class:`torch.fx.GraphModule` whose inputs are the values live
across the boundary before it (produced by a stage ``< s``, read by a stage ``>= s``) and whose
outputs are those live across the boundary after it; a value produced in stage 0 and read in
stage 3 passes through stages 1 and 2, because a pipeline stage only talks to its neighbours.
Stage 0 takes the model inputs; the last stage returns the model's outputs (flattened).

Two adjustments to the plan's op sets, both free of compute: the model inputs enter at stage 0
whatever stage the plan gives them, and a ``getitem`` of a tuple-valued op runs with its
producer (a stage boundary carries tensors, not tuples).  The stage modules share the original
module's parameters (same objects, same qualified names).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from solvers.model.errors import InvalidPlan


@dataclass
class StageGraph:
    """One stage: its module, the value names it takes and returns, the FX nodes it runs."""

    index: int
    module: fx.GraphModule
    inputs: list[str]
    outputs: list[str]
    ops: list[str]


def compute_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The nodes that run: every ``call_function`` (the export's guard module is left out)."""
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def assign_stages(gm: fx.GraphModule, stage_of: Mapping[str, int]) -> dict[str, int]:
    """FX node name -> stage for placeholders and compute nodes (see the module docstring)."""
    out: dict[str, int] = {}
    missing = [n.name for n in compute_nodes(gm) if n.name not in stage_of]
    if missing:
        raise InvalidPlan(f"the plan leaves op(s) of the exported model out: {', '.join(missing[:5])}",
                          field="stages", ref=missing[0])
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            out[node.name] = 0
        elif node.op == "call_function":
            out[node.name] = stage_of[node.name]
            if node.target is operator.getitem and isinstance(node.args[0], fx.Node) and _is_tuple(node.args[0]):
                out[node.name] = out[node.args[0].name]
    for node in compute_nodes(gm):
        for arg in node.all_input_nodes:
            if arg.name in out and out[arg.name] > out[node.name]:
                raise InvalidPlan(f"op {node.name!r} in stage {out[node.name]} reads {arg.name!r} from the later "
                                  f"stage {out[arg.name]}: a pipeline stage only reads earlier stages",
                                  field="stages", ref=node.name)
    return out


def _is_tensor(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


def _is_float_tensor(node: fx.Node) -> bool:
    return _is_tensor(node) and bool(node.meta["val"].dtype.is_floating_point)


def contiguous_grad(value: torch.Tensor) -> torch.Tensor:
    """``value`` itself; the gradient it passes back is made contiguous (a point-to-point send needs it).

    A tensor hook, not a custom autograd function: the stage may modify the value in place.
    """
    if value.requires_grad:
        value.register_hook(torch.Tensor.contiguous)  # type: ignore[no-untyped-call]
    return value


def _modified_in_place(node: fx.Node, stage: Mapping[str, int], s: int) -> bool:
    """Whether an op of stage ``s`` writes into ``node``'s value (an in-place ATen op on it)."""
    for user in node.users:
        schema = getattr(user.target, "_schema", None)
        if stage.get(user.name) == s and schema is not None and schema.is_mutable:
            return True
    return False


def _is_tuple(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), list | tuple)


def output_node(gm: fx.GraphModule) -> fx.Node:
    found: fx.Node = next(n for n in gm.graph.nodes if n.op == "output")
    return found


def model_outputs(gm: fx.GraphModule) -> list[str]:
    """Names of the values the model returns, flattened, in order."""
    names: list[str] = []

    def visit(node: fx.Node) -> fx.Node:
        names.append(node.name)
        return node

    fx.node.map_arg(output_node(gm).args[0], visit)
    return names


def live_values(gm: fx.GraphModule, stage: Mapping[str, int], n_stages: int) -> list[list[str]]:
    """``live[b]``: values crossing boundary ``b`` (between stages b-1 and b), in graph order; b = 1..S-1."""
    last_reader: dict[str, int] = {}
    for node in gm.graph.nodes:
        reader = n_stages - 1 if node.op == "output" else stage.get(node.name)
        if reader is None:
            continue
        for arg in node.all_input_nodes:
            if arg.name in stage:
                last_reader[arg.name] = max(last_reader.get(arg.name, -1), reader)
    order = [n.name for n in gm.graph.nodes if n.name in stage]
    return [[] if b == 0 else [v for v in order if stage[v] < b <= last_reader.get(v, -1)] for b in range(n_stages)]


def crossing_values(gm: fx.GraphModule, stage: Mapping[str, int], n_stages: int) -> list[tuple[str, Any, int, int]]:
    """Every value live across a boundary: (name, its example value in the export, the stage that makes it,
    the last stage that reads it), in graph order."""
    crossed: dict[str, list[int]] = {}
    for b, names in enumerate(live_values(gm, stage, n_stages)):
        for name in names:
            crossed.setdefault(name, []).append(b)
    vals = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    return [(name, vals.get(name), min(bounds) - 1, max(bounds)) for name, bounds in crossed.items()]


def build_stages(gm: fx.GraphModule, lookup: Callable[[str], Any], stage: Mapping[str, int],
                 n_stages: int) -> list[StageGraph]:
    """One :class:`StageGraph` per stage; ``lookup`` gives a ``get_attr`` target's value (parameters,
    buffers, lifted constants: the same objects in every stage that reads them)."""
    live = live_values(gm, stage, n_stages)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    finals = model_outputs(gm)
    stages = []
    for s in range(n_stages):
        inputs = placeholders if s == 0 else live[s]
        outputs = finals if s == n_stages - 1 else live[s + 1]
        stages.append(_stage_graph(gm, lookup, stage, s, inputs, outputs))
    return stages


def _stage_graph(gm: fx.GraphModule, lookup: Callable[[str], Any], stage: Mapping[str, int], s: int,
                 inputs: list[str], outputs: list[str]) -> StageGraph:
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    for name in inputs:
        env[name] = graph.placeholder(name)
        if _is_float_tensor(_node(gm, name)):  # its gradient goes back over a boundary: contiguous
            env[name] = graph.call_function(contiguous_grad, (env[name],))
            if _modified_in_place(_node(gm, name), stage, s):  # a received leaf cannot be: work on a copy
                env[name] = graph.call_function(torch.ops.aten.clone.default, (env[name],))
    ops = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and stage.get(node.name) == s:
            for arg in node.all_input_nodes:
                if arg.op == "get_attr" and arg.name not in env:
                    env[arg.name] = graph.node_copy(arg, lambda n: env[n.name])
            env[node.name] = graph.node_copy(node, lambda n: env[n.name])
            ops.append(node.name)
    for name in outputs:
        if name not in env:  # a constant the model returns as it is
            env[name] = graph.node_copy(_node(gm, name), lambda n: env[n.name])
    # a boundary carries contiguous tensors (point-to-point sends need them)
    values = [graph.call_method("contiguous", (env[name],)) if _is_tensor(_node(gm, name)) else env[name]
              for name in outputs]
    graph.output(tuple(values))
    graph.lint()
    attrs = {str(n.target): lookup(str(n.target)) for n in graph.nodes if n.op == "get_attr"}
    return StageGraph(s, fx.GraphModule(attrs, graph, class_name=f"Stage{s}"), list(inputs), list(outputs), ops)


def runnable_graph(gm: fx.GraphModule) -> fx.Graph:
    """A copy of the whole graph without the export's input guard (the launcher checks inputs itself)."""
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op != "call_module":
            env[node.name] = graph.node_copy(node, lambda n: env[n.name])
    return graph


def _has_attr(module: torch.nn.Module, target: str) -> bool:
    obj: object = module
    for part in target.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def to_device(module: fx.GraphModule, device: torch.device) -> fx.GraphModule:
    """Ops that name the export's device create their tensors on ``device`` instead; weights moved there
    (those on ``meta`` stay: another rank's under ``--weights``)."""
    for node in module.graph.nodes:
        if isinstance(node.kwargs.get("device"), torch.device):
            node.kwargs = {**node.kwargs, "device": device}
        node.args = tuple(device if isinstance(a, torch.device) else a for a in node.args)
    module.recompile()
    # tensors left on meta (other ranks' weights under --weights) stay there: they hold no memory
    moved: fx.GraphModule = module._apply(lambda t: t if t.is_meta else t.to(device))  # type: ignore[no-untyped-call]
    return moved


def _node(gm: fx.GraphModule, name: str) -> fx.Node:
    found: fx.Node = next(n for n in gm.graph.nodes if n.name == name)
    return found


def parameter_aliases(weights: torch.nn.Module) -> dict[str, str]:
    """Every name a parameter has in the model -> its first name (tied parameters have several)."""
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for name, param in weights.named_parameters(remove_duplicate=False):
        out[name] = first.setdefault(id(param), name)
    return out


def stage_parameters(module: torch.nn.Module, aliases: Mapping[str, str]) -> dict[str, torch.nn.Parameter]:
    """A stage module's parameters under their first names in the model (each tied parameter once)."""
    out: dict[str, torch.nn.Parameter] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        while name.startswith("inner."):  # wrappers: Checkpointed, Autocast
            name = name.removeprefix("inner.")
        out.setdefault(aliases.get(name, name), param)
    return out


def shared_parameters(weights: torch.nn.Module, stages: list[StageGraph]) -> dict[str, list[int]]:
    """Parameters read by more than one stage, under any of their names (tied weights): first name -> stages."""
    aliases = parameter_aliases(weights)
    owners: dict[str, list[int]] = {}
    for st in stages:
        for name in stage_parameters(st.module, aliases):
            owners.setdefault(name, []).append(st.index)
    return {k: v for k, v in owners.items() if len(v) > 1}


class Checkpointed(torch.nn.Module):
    """A stage whose activations are recomputed in backward (``recompute``): only its inputs are kept."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from torch.utils.checkpoint import checkpoint

        out: tuple[torch.Tensor, ...] = checkpoint(self.inner, *args, use_reentrant=False)
        return out


class Autocast(torch.nn.Module):
    """A stage run under ``torch.autocast`` (bf16); its floating outputs are cast back to the export's dtypes,
    so the boundaries keep the shapes and dtypes the pipeline was given."""

    def __init__(self, inner: torch.nn.Module, device_type: str, dtypes: list[torch.dtype]) -> None:
        super().__init__()
        self.inner = inner
        self.device_type = device_type
        self.dtypes = dtypes

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            out = self.inner(*args)
        return tuple(o.to(d) if isinstance(o, torch.Tensor) and o.is_floating_point() else o
                     for o, d in zip(out, self.dtypes, strict=True))


def wrap_stage(inner: torch.nn.Module, graph: StageGraph, gm: fx.GraphModule, recompute: bool, autocast: bool,
               device: torch.device) -> torch.nn.Module:
    """The stage module as it runs: recomputed in backward (``recompute``), under bf16 autocast (``autocast``)."""
    module = Checkpointed(inner) if recompute else inner
    if autocast:
        vals = {n.name: n.meta.get("val") for n in gm.graph.nodes}
        dtypes = [getattr(vals.get(name), "dtype", torch.float32) for name in graph.outputs]
        module = Autocast(module, device.type, dtypes)
    return module
