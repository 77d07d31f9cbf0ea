"""Latency plans: every rank runs its ops in the plan's per-device ``order`` and exchanges tensors.

Op-level placement (MOIRAI, Celeritas, HEFT): op ``v`` runs on its stage's device; a tensor read
on another device is sent with ``isend`` as soon as it is made and received (blocking) right
before its first reader runs.  The per-device orders come from one feasible schedule, so every
receive is matched by a send that is already posted or will be: no deadlock.

Training pass (docs/formats.md): each op's backward runs on its forward's device, in the reverse of
the device's order, on the reversed edges.  Every op reads its inputs through fresh leaves, so
backward runs op by op: an op's output gradient is the sum of its local readers' leaf gradients
and the gradients received from remote readers; its input gradients go back to local producers
or are sent to remote ones.  The loss is taken on the device of the model's first output; the
other outputs are sent there.  A parameter read on several devices has its gradient summed
over them (all-reduce among those ranks).

A ``getitem`` of a tuple-valued op runs with it (the tuple never crosses devices).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import fx

from launcher.runtime.context import LaunchContext
from launcher.runtime.gradsync import all_reduce_gradients
from launcher.runtime.partition import (
    compute_nodes,
    model_outputs,
    parameter_aliases,
    runnable_graph,
    stage_parameters,
    to_device,
)
from launcher.runtime.weights import materialize
from launcher.runtime.world import new_groups
from launcher.structure import fx_ops
from solvers.model.errors import InvalidPlan
from solvers.model.plan import check_one_device_per_op

LOSS = "<loss>"


def device_of_ops(ctx: LaunchContext, gm: fx.GraphModule) -> dict[str, str]:
    """FX node name -> plan device (placeholders included; getitems of tuples follow their producer)."""
    out: dict[str, str] = {}
    check_one_device_per_op(ctx.plan)  # the rule plan validation applies (docs/formats.md)
    for s, stage in enumerate(ctx.plan.stages):
        for name, st in ctx.stage_of.items():
            if st == s:
                out[name] = stage.devices[0]
    for node in gm.graph.nodes:
        if _follows_producer(node):
            out[node.name] = out[node.args[0].name]
    missing = [n.name for n in compute_nodes(gm) if n.name not in out]
    if missing:
        raise InvalidPlan(f"the plan leaves op(s) of the exported model out: {', '.join(missing[:5])}",
                          field="stages", ref=missing[0])
    return out


def _follows_producer(node: fx.Node) -> bool:
    return (node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], fx.Node)
            and isinstance(node.args[0].meta.get("val"), list | tuple))


class DataflowRunner:
    """This rank's ops, their order, and the transfers to and from the other ranks."""

    def __init__(self, ctx: LaunchContext) -> None:
        self.ctx = ctx
        self.stage_index = next(s for s, st in enumerate(ctx.plan.stages) if ctx.world.device in st.devices)
        self.replica = 0
        self.fwd_s = 0.0
        whole = runnable_graph(ctx.reference.module)
        attrs = {str(n.target): ctx.reference.attr(str(n.target)) for n in whole.nodes if n.op == "get_attr"}
        gm = fx.GraphModule(attrs, whole)
        self.aliases = parameter_aliases(ctx.reference.weights)
        self.device = device_of_ops(ctx, gm)
        mine = [str(n.target) for n in gm.graph.nodes if n.op == "get_attr"
                and any(self.device.get(u.name) == ctx.world.device for u in n.users)]
        self.materialized_bytes = materialize(gm, mine, self.aliases, ctx.weights, ctx.world.torch_device)
        gm = to_device(gm, ctx.world.torch_device)
        self.gm = gm
        self.nodes = {n.name: n for n in gm.graph.nodes}
        self.outputs = model_outputs(gm)
        self.loss_device = self.device.get(self.outputs[0], ctx.plan.stages[-1].devices[0])
        self.tag = {n.name: i for i, n in enumerate(gm.graph.nodes)}
        self.readers = self._readers()
        self.units = self._my_units()
        self.all_parameters = stage_parameters(gm, self.aliases)
        self.groups = self._parameter_groups()

    # ---- structure ---------------------------------------------------------------------------
    def _readers(self) -> dict[str, set[str]]:
        """Value name -> devices that read it (the loss device reads the model outputs)."""
        out: dict[str, set[str]] = {}
        for node in self.gm.graph.nodes:
            if node.name in self.device and not _follows_producer(node):
                for arg in node.all_input_nodes:
                    if arg.name in self.device:
                        out.setdefault(arg.name, set()).add(self.device[node.name])
        for name in self.outputs:
            out.setdefault(name, set()).add(self.loss_device)
        return out

    def _my_units(self) -> list[str]:
        """This device's ops in the plan's order (getitems of tuples left out: they run with their producer).

        Ops the order does not list (a model input, say) come in graph order, each before the
        first op that reads it: a device never waits for a value it makes itself.
        """
        mine = self.ctx.world.device
        names = {n for n, d in self.device.items() if d == mine and not _follows_producer(self.nodes[n])}
        expand = fx_ops(self.ctx.graph)
        listed = [name for op in (self.ctx.plan.order or {}).get(mine, ()) for name in expand.get(op, [op])
                  if name in names]
        rest = [n.name for n in self.gm.graph.nodes if n.name in names and n.name not in set(listed)]
        ordered: list[str] = []
        done: set[str] = set()

        def visit(name: str) -> None:
            if name in done:
                return
            done.add(name)
            for arg in self.nodes[name].all_input_nodes:
                producer = arg.args[0].name if _follows_producer(arg) else arg.name
                if producer in names:
                    visit(producer)
            ordered.append(name)

        for name in listed + rest:
            visit(name)
        return ordered

    def _getitems(self, name: str) -> list[str]:
        return [u.name for u in self.nodes[name].users if _follows_producer(u)]

    def _parameter_groups(self) -> dict[str, tuple[Any, list[str]]]:
        """Parameter -> (group, devices) for parameters read on more than one device."""
        users: dict[str, set[str]] = {}
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                name = self.aliases.get(str(node.target), str(node.target))  # tied: one name for every alias
                for u in node.users:
                    if u.name in self.device:
                        users.setdefault(name, set()).add(self.device[u.name])
        params = self.all_parameters
        sets = sorted({tuple(sorted(d)) for t, d in users.items() if t in params and len(d) > 1})
        groups = new_groups([[self.ctx.world.rank_of[d] for d in s] for s in sets])
        by_set = dict(zip(sets, groups, strict=True))
        return {t: (by_set[tuple(sorted(d))], sorted(d)) for t, d in users.items() if t in params and len(d) > 1}

    def named_parameters(self) -> dict[str, torch.nn.Parameter]:
        """The parameters this rank's ops read, under their first names in the model."""
        mine = self.ctx.world.device
        params = self.all_parameters
        read = {self.aliases.get(str(n.target), str(n.target)) for n in self.gm.graph.nodes if n.op == "get_attr"
                and any(self.device.get(u.name) == mine for u in n.users)}
        return {k: v for k, v in params.items() if k in read}

    def counted_parameters(self) -> set[str]:
        """The parameters this rank adds to the global gradient norm: a shared one on its first device only."""
        mine = self.ctx.world.device
        return {n for n in self.named_parameters() if n not in self.groups or self.groups[n][1][0] == mine}

    # ---- forward -----------------------------------------------------------------------------
    def _forward(self, inputs: dict[str, torch.Tensor], training: bool) -> tuple[torch.Tensor, ...] | None:
        dev = self.ctx.world.torch_device
        self.values: dict[str, Any] = {}
        self.leaves: dict[str, list[tuple[str, torch.Tensor]]] = {}
        self.reads: dict[str, int] = {}  # value -> leaves made of it here (its local reads)
        self.sends: list[Any] = []
        for name in self.units:
            node = self.nodes[name]
            started = time.perf_counter()
            if node.op == "placeholder":
                self.values[name] = inputs[name].to(dev)
            else:
                self.values[name] = self._run(node, training)
                for item in self._getitems(name):
                    self.values[item] = self._run(self.nodes[item], training, detach=False)
            self.fwd_s += time.perf_counter() - started
            for produced in [name, *self._getitems(name)]:
                self._send_forward(produced)
        outputs = None
        if self.ctx.world.device == self.loss_device:
            outputs = tuple(self._read(name, LOSS, training) for name in self.outputs)
        for work in self.sends:
            work.wait()
        return outputs

    def _run(self, node: fx.Node, training: bool, detach: bool = True) -> Any:
        def value(arg: fx.Node) -> Any:
            if arg.op == "get_attr":
                return _attr(self.gm, str(arg.target))
            if not detach:
                return self.values[arg.name]
            return self._read(arg.name, node.name, training)

        args = fx.node.map_arg(node.args, value)
        kwargs = fx.node.map_arg(node.kwargs, value)
        target: Callable[..., Any] = node.target  # type: ignore[assignment]
        return target(*args, **kwargs)

    def _read(self, name: str, reader: str, training: bool) -> Any:
        """The value as ``reader`` sees it: received if remote, through a fresh leaf when training."""
        if name not in self.values:
            if self.device[name] == self.ctx.world.device:
                raise AssertionError(f"{reader} reads {name} before it is made on {self.ctx.world.device}")
            self.values[name] = self._receive(name, self.device[name], forward=True)
        value = self.values[name]
        if training and isinstance(value, torch.Tensor) and value.is_floating_point():
            leaf = value.detach().requires_grad_(True)
            self.leaves.setdefault(reader, []).append((name, leaf))
            self.reads[name] = self.reads.get(name, 0) + 1
            schema = getattr(self.nodes[reader].target, "_schema", None) if reader in self.nodes else None
            return leaf.clone() if schema is not None and schema.is_mutable else leaf  # a leaf cannot change in place
        return value

    def _send_forward(self, name: str) -> None:
        for dst in sorted(self.readers.get(name, set()) - {self.ctx.world.device}):
            value = self.values[name].contiguous()
            self.values[name] = value
            self.sends.append(dist.isend(value, self.ctx.world.rank_of[dst], tag=2 * self.tag[name]))

    def _receive(self, name: str, src: str, forward: bool) -> torch.Tensor:
        meta = self.nodes[name].meta["val"]
        buffer = torch.empty(tuple(meta.shape), dtype=meta.dtype, device=self.ctx.world.torch_device)
        dist.recv(buffer, self.ctx.world.rank_of[src], tag=2 * self.tag[name] + (0 if forward else 1))
        return buffer

    # ---- backward ----------------------------------------------------------------------------
    def _backward(self, loss: torch.Tensor | None) -> None:
        self.grads: dict[str, torch.Tensor] = {}
        self.sends = []
        if loss is not None:
            torch.autograd.backward([loss])
            self._route_input_grads(LOSS)
        for name in reversed(self.units):
            produced = [name, *self._getitems(name)] if self._getitems(name) else [name]
            outs, grads = [], []
            for value_name in produced:
                value = self.values.get(value_name)
                if not (isinstance(value, torch.Tensor) and value.is_floating_point()):
                    continue
                grad = self._gather_grad(value_name, value)
                if value.requires_grad:
                    outs.append(value)
                    grads.append(grad)
            if outs:
                torch.autograd.backward(outs, grads)
            self._route_input_grads(name)
            for item in self._getitems(name):
                self._route_input_grads(item)
        for work in self.sends:
            work.wait()

    def _gather_grad(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """Local readers' gradients plus those received from every remote reader."""
        grad = self.grads.pop(name, None)
        total = torch.zeros_like(value) if grad is None else grad
        for src in sorted(self.readers.get(name, set()) - {self.ctx.world.device}):
            total = total + self._receive(name, src, forward=False)
        return total

    def _route_input_grads(self, reader: str) -> None:
        """Input gradients to local producers; a remote value's, summed over its local reads, sent once."""
        for name, leaf in self.leaves.get(reader, []):
            grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
            self.grads[name] = grad if name not in self.grads else self.grads[name] + grad
            owner = self.device[name]
            self.reads[name] -= 1
            if owner != self.ctx.world.device and self.reads[name] == 0:
                self.sends.append(dist.isend(self.grads.pop(name).contiguous(), self.ctx.world.rank_of[owner],
                                             tag=2 * self.tag[name] + 1))

    def _sum_shared_parameters(self) -> None:
        mine = self.ctx.world.device
        all_reduce_gradients([(target, self.all_parameters[target], group)
                              for target, (group, devices) in sorted(self.groups.items()) if mine in devices],
                             bucket_bytes=self.ctx.bucket_bytes)

    # ---- the runner interface ----------------------------------------------------------------
    def train_step(self, inputs: dict[str, torch.Tensor], target: torch.Tensor) -> float | None:
        outputs = self._forward(inputs, training=True)
        loss = None
        if outputs is not None:
            loss = self.ctx.data.loss(outputs, target.to(self.ctx.world.torch_device))
        self._backward(loss)
        self._sum_shared_parameters()
        return None if loss is None else float(loss.detach())

    def infer(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        with torch.no_grad():
            return self._forward(inputs, training=False)


def _attr(module: torch.nn.Module, target: str) -> Any:
    obj: Any = module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
