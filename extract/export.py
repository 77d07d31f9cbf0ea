"""``torch.export`` (non-strict) and the op records of ``placer.opgraph/v1``.

An op is a ``call_function`` node of the exported program's graph (the ATen training IR) or a
user input placeholder (``op: "input"``).  **Its id is the FX node name**, which
``torch.export`` derives from the model's code alone: the same model and input shapes give the
same names, so a launcher that re-exports the model finds every op again by name
(:func:`fx_nodes_by_id`); the unlifted ``program.module()`` keeps the same node names.

- ``op``: the ATen target (``aten.linear.default``), ``getitem`` for a tuple element, the
  higher-order operator's name otherwise.
- ``layer``: the innermost module path of the node (``nn_module_stack``); ``None`` at the root.
- ``param_bytes``: each parameter (tied parameters once) belongs to the first op, in graph order,
  that reads it; a parameter no op reads belongs to the first op (listed in the graph's
  ``attrs.unread_params``).  The sum is the model's parameter bytes exactly.  Buffers and
  constant tensors go the same way into the node's ``attrs.buffer_bytes``.
- edge ``bytes``: the size of the tensor(s) the consumer reads, from the tensor metadata
  (``numel * element_size``; for ``getitem`` the selected element).
- ``constant``: the op's output does not depend on any user input (RaNNC).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from extract.source import BuiltModel
from solvers.model.errors import InvalidInput


@dataclass
class OpRecord:
    """One op of the exported graph before timing."""

    id: str
    op: str
    layer: str | None
    module_type: str | None
    param_bytes: int = 0
    buffer_bytes: int = 0
    constant: bool = False
    inputs: list[tuple[str, int]] = field(default_factory=list)  # (producer id, bytes read)


@dataclass
class ExportedOps:
    program: ExportedProgram
    ops: list[OpRecord]
    model_param_bytes: int
    unread_params: list[str]
    module_types: dict[str, str]
    shared_params: list[dict[str, Any]] = field(default_factory=list)


def export_model(built: BuiltModel) -> ExportedProgram:
    """``torch.export.export(strict=False)``; a failure is :class:`InvalidInput` naming the cause."""
    try:
        return torch.export.export(built.module, (), dict(built.inputs), strict=False)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}".strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        if _data_dependent(exc, text):
            raise InvalidInput(
                f"torch.export failed on data-dependent control flow ({first}); the model branches on a "
                "tensor's value. Try: rewrite the branch with torch.cond or tensor ops (torch.where), move it "
                "out of forward, or fix the value with a constant input", field="spec") from None
        raise InvalidInput(f"torch.export failed: {first}. Try: check that the model runs on the given inputs "
                           "(shapes, dtypes) and that forward only uses torch operations", field="spec") from None


def _data_dependent(exc: BaseException, text: str) -> bool:
    names = {type(e).__name__ for e in _chain(exc)}
    return (any("DataDependent" in n for n in names) or "data-dependent" in text.lower()
            or "data dependent" in text.lower())


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in a (nested) value from node metadata."""
    if isinstance(value, torch.Tensor):
        return int(value.numel()) * value.element_size()
    if isinstance(value, list | tuple):
        return sum(tensor_bytes(v) for v in value)
    return 0


def op_name(node: torch.fx.Node) -> str:
    if node.op == "placeholder":
        return "input"
    if node.target is operator.getitem:
        return "getitem"
    target = node.target
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"  # type: ignore[no-untyped-call]
    if isinstance(target, torch._ops.OperatorBase):
        return str(target)
    return str(getattr(target, "__qualname__", target))


def innermost_module(node: torch.fx.Node) -> tuple[str | None, str | None]:
    """(path, class name) of the innermost module on the node's ``nn_module_stack``."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None, None
    path, kind = list(stack.values())[-1]
    type_name = kind if isinstance(kind, str) else getattr(kind, "__qualname__", str(kind))
    return (path or None), type_name.rsplit(".", 1)[-1]


def op_nodes(program: ExportedProgram) -> list[torch.fx.Node]:
    """The nodes that become ops, in graph order: user inputs, then every ``call_function``."""
    user = {s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT}
    return [n for n in program.graph.nodes
            if (n.op == "placeholder" and n.name in user) or n.op == "call_function"]


def fx_nodes_by_id(program: ExportedProgram) -> dict[str, torch.fx.Node]:
    """Op id -> node of ``program.graph``: the mapping a launcher splits the graph with."""
    return {n.name: n for n in op_nodes(program)}


def collect_ops(built: BuiltModel, program: ExportedProgram) -> ExportedOps:
    """The op records of ``program`` with parameters attributed (see the module docstring)."""
    kinds = {s.arg.name: (s.kind, s.target) for s in program.graph_signature.input_specs
             if hasattr(s.arg, "name")}
    params = dict(built.module.named_parameters(remove_duplicate=False))
    owner: dict[int, str] = {}  # id(parameter) -> op id that holds it
    buffers: set[str] = set()
    nodes = op_nodes(program)
    records = []
    for node in nodes:
        path, kind = innermost_module(node)
        records.append(OpRecord(node.name, op_name(node), path, kind))
    by_id = {r.id: r for r in records}
    ops_set = set(by_id)
    for node, rec in zip(nodes, records, strict=True):
        for arg in node.all_input_nodes:
            if arg.name in ops_set:
                rec.inputs.append((arg.name, _read_bytes(arg, node)))
            elif arg.name in kinds:
                _attribute(rec, arg, kinds[arg.name], params, owner, buffers)
    unread = _attribute_unread(records, params, owner)
    _mark_constant(nodes, records, kinds)
    model_bytes = sum(p.numel() * p.element_size() for p in built.module.parameters())
    return ExportedOps(program, records, model_bytes, unread, module_types(nodes), shared_params(nodes, kinds, params))


def shared_params(nodes: list[torch.fx.Node], kinds: dict[str, tuple[InputKind, str | None]],
                  params: dict[str, torch.nn.Parameter]) -> list[dict[str, Any]]:
    """Parameters that more than one op reads (tied weights, under any of their names).

    ``{"param": first name, "bytes": size, "ops": readers in graph order}``; the first reader holds
    its ``param_bytes``; a pipeline stage with another reader holds a copy (the memory model counts
    it, the launcher keeps the copies equal).
    """
    first: dict[int, str] = {}
    for name, param in params.items():
        first.setdefault(id(param), name)
    readers: dict[int, list[str]] = {}
    for node in nodes:
        for arg in node.all_input_nodes:
            kind = kinds.get(arg.name)
            if kind is not None and kind[0] == InputKind.PARAMETER and kind[1] in params:
                ops = readers.setdefault(id(params[str(kind[1])]), [])
                if node.name not in ops:
                    ops.append(node.name)
    by_id = {id(p): p for p in params.values()}
    return [{"param": first[pid], "bytes": by_id[pid].numel() * by_id[pid].element_size(), "ops": ops}
            for pid, ops in readers.items() if len(ops) > 1]


def module_types(nodes: Iterable[torch.fx.Node]) -> dict[str, str]:
    """Module path -> class name, for every module on some node's stack."""
    out: dict[str, str] = {}
    for node in nodes:
        for path, kind in (node.meta.get("nn_module_stack") or {}).values():
            if path and path not in out:
                name = kind if isinstance(kind, str) else getattr(kind, "__qualname__", str(kind))
                out[path] = name.rsplit(".", 1)[-1]
    return out


def _read_bytes(src: torch.fx.Node, dst: torch.fx.Node) -> int:
    if dst.target is operator.getitem:
        return tensor_bytes(dst.meta.get("val"))
    return tensor_bytes(src.meta.get("val"))


def _attribute(rec: OpRecord, arg: torch.fx.Node, kind: tuple[InputKind, str | None],
               params: dict[str, torch.nn.Parameter], owner: dict[int, str], buffers: set[str]) -> None:
    input_kind, target = kind
    if input_kind == InputKind.PARAMETER and target in params:
        param = params[target]
        if id(param) not in owner:
            owner[id(param)] = rec.id
            rec.param_bytes += param.numel() * param.element_size()
    elif input_kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR) and str(target) not in buffers:
        buffers.add(str(target))
        rec.buffer_bytes += tensor_bytes(arg.meta.get("val"))


def _attribute_unread(records: list[OpRecord], params: dict[str, torch.nn.Parameter],
                      owner: dict[int, str]) -> list[str]:
    unread: list[str] = []
    seen: set[int] = set()
    for name, param in params.items():
        if id(param) in owner or id(param) in seen:
            continue
        seen.add(id(param))
        unread.append(name)
        records[0].param_bytes += param.numel() * param.element_size()
    return unread


def _mark_constant(nodes: Iterable[torch.fx.Node], records: list[OpRecord],
                   kinds: dict[str, tuple[InputKind, str | None]]) -> None:
    varying: set[str] = set()
    for node, rec in zip(nodes, records, strict=True):
        if node.op == "placeholder" or any(a.name in varying for a in node.all_input_nodes):
            varying.add(node.name)
        rec.constant = node.name not in varying
