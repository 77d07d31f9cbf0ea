"""``placer extract``: source record -> exported program -> ``placer.opgraph/v1`` with estimated times.

The graph's ``attrs`` hold everything needed to rebuild and re-export the same model:
``source`` (the :mod:`extract.build` record), ``inputs`` (name, shape, dtype),
``versions`` (torch, transformers), ``export`` (non-strict, training mode, op ids = FX node
names), plus how the times were made (``estimate``) and the model's parameter bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.export.graph_signature import InputKind

from extract.build import build
from extract.deps import versions
from extract.estimate import DeviceSpec, OpCost, SavedTensors, device_spec, op_cost
from extract.export import ExportedOps, collect_ops, export_model
from extract.source import BuiltModel
from solvers.model.graph import Edge, KindTimes, Node, OpGraph


def extract(source: Mapping[str, Any], device_kind: str = "H100", name: str | None = None) -> OpGraph:
    """Build the model on ``meta`` (shapes only), export it, count every op and time it on ``device_kind``."""
    spec = device_spec(device_kind)
    built = build(source, device="meta")
    exported = collect_ops(built, export_model(built))
    costs = count_ops(exported)
    return assemble(built, exported, costs, spec, name or default_name(source))


def count_ops(exported: ExportedOps) -> dict[str, OpCost]:
    """:func:`extract.estimate.op_cost` of every ``call_function`` op, in graph order."""
    program = exported.program
    weights, frozen = set(), set()
    for s in program.graph_signature.input_specs:
        name = getattr(s.arg, "name", None)
        if name is None:
            continue
        if s.kind != InputKind.USER_INPUT:
            weights.add(name)
        if s.kind != InputKind.PARAMETER:
            frozen.add(name)
    module = program.graph_module
    saved = SavedTensors()
    ids = {r.id for r in exported.ops}
    return {n.name: op_cost(n, lambda t: getattr(module, t), weights, frozen, saved)
            for n in program.graph.nodes if n.op == "call_function" and n.name in ids}


def assemble(built: BuiltModel, exported: ExportedOps, costs: Mapping[str, OpCost], spec: DeviceSpec,
             name: str) -> OpGraph:
    nodes, edges = [], []
    for rec in exported.ops:
        cost = costs.get(rec.id, OpCost())
        fwd_s, bwd_s = cost.times(spec)
        attrs: dict[str, Any] = {"flops_fwd": cost.flops_fwd, "flops_bwd": cost.flops_bwd,
                                 "bytes_fwd": cost.bytes_fwd, "bytes_bwd": cost.bytes_bwd,
                                 "flops_bwd_weight": cost.flops_wgt, "bytes_bwd_weight": cost.bytes_wgt}
        if rec.module_type:
            attrs["module"] = rec.module_type
        if rec.buffer_bytes:
            attrs["buffer_bytes"] = rec.buffer_bytes
        if not cost.counted:
            attrs["not_counted"] = True
        nodes.append(Node(rec.id, rec.op, fwd_s, bwd_s, float(rec.param_bytes), cost.act_bytes,
                          cost.mem_fwd_bytes, cost.mem_bwd_bytes, rec.constant, rec.layer,
                          {spec.name: KindTimes(fwd_s, bwd_s)}, attrs, *_split(cost, spec, bwd_s)))
        edges += [Edge(src, rec.id, float(size)) for src, size in dict(rec.inputs).items()]
    batch = int(next(iter(built.inputs.values())).shape[0]) if built.inputs else 1
    return OpGraph.build(name, nodes, edges, batch, graph_attrs(built, exported, spec))


def _split(cost: OpCost, spec: DeviceSpec, bwd_s: float) -> tuple[float | None, float | None]:
    """The op's counted (bwd_input_s, bwd_weight_s); none where it has no counted backward."""
    inp, wgt = cost.backward_split_s(spec)
    return (inp, wgt) if cost.counted and (inp + wgt > 0 or bwd_s == 0) else (None, None)


def graph_attrs(built: BuiltModel, exported: ExportedOps, spec: DeviceSpec) -> dict[str, Any]:
    return {
        "source": dict(built.source),
        "inputs": [s.to_dict() for s in built.input_specs],
        "versions": versions(),
        "export": {"strict": False, "mode": "train", "ids": "fx-node-name", "ir": "aten-training"},
        "estimate": {"device_kind": spec.name, "fp32_flops": spec.fp32_flops, "half_flops": spec.half_flops,
                     "bandwidth_Bps": spec.bandwidth_Bps, "rule": "roofline"},
        "model_param_bytes": exported.model_param_bytes,
        "unread_params": exported.unread_params,
        "module_types": exported.module_types,
        "granularity": "op",
        **({"adjusted": list(built.adjusted)} if built.adjusted else {}),
        **({"shared_params": exported.shared_params} if exported.shared_params else {}),
    }


def default_name(source: Mapping[str, Any]) -> str:
    return str(source.get("example") or str(source.get("spec", "model")).rpartition(":")[2] or "model")
