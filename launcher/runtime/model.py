"""Rebuild the model from the graph's ``attrs.source``, re-export it and check it is the same graph.

The export runs where the graph's was made: on ``meta`` as ``placer extract`` does, on the CPU or a
GPU as ``placer profile --device`` does (:func:`export_device`).  Kernels on different devices
return different strides, and the exported graph (which ``contiguous`` calls it holds) follows
the strides.  On the CPU or a GPU the model is exported from fake tensors of that device
(:func:`extract.build.build_fake`), so no rank holds the whole model to export it.  The weights
stay on ``meta``: the model is built under the log of :mod:`launcher.runtime.seeded`, and each rank materialises the tensors its own stage reads
(:mod:`launcher.runtime.weights`); the stage modules read them by qualified name
(:mod:`launcher.runtime.partition`), and the device the exported ops name is replaced by the
rank's device.

The check compares structure digests (:mod:`launcher.structure`): op ids (FX node names), op
names, merged op lists and edge bytes of the re-export against the graph the plan was solved on.
A model whose code, configuration, inputs or torch version changed since extraction is refused
before any process group work starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram

from extract.build import build, build_fake
from extract.export import collect_ops, export_model
from extract.granularity import merge_modules
from extract.source import BuiltModel
from launcher.runtime.seeded import Seeded, record_build
from launcher.structure import structure_digest
from solvers.model.errors import InvalidPlan
from solvers.model.graph import Edge, Node, OpGraph


@dataclass
class Rebuilt:
    """The model with its inputs, the exported program, its unlifted FX module, the weights (on ``meta``).

    ``seeded``: the log of the model's construction (seeded values by name); ``None`` when the
    weights were given (a re-export at another row count) or not needed (``placer launcher check``).
    """

    built: BuiltModel
    program: ExportedProgram
    module: torch.fx.GraphModule
    weights: torch.nn.Module
    constants: dict[str, torch.Tensor] = field(default_factory=dict)  # lifted constants by attribute name
    seeded: Seeded | None = None

    def attr(self, target: str) -> Any:
        """A ``get_attr`` target's value: a parameter or buffer of the weights, else a lifted constant."""
        if _has(self.weights, target):
            return _get(self.weights, target)
        if target in self.constants:
            return self.constants[target]
        raise InvalidPlan(f"the exported model reads {target!r}, which is neither a parameter or buffer of the "
                          "model nor a constant the export recorded", field="source", ref=target)

    @property
    def batch(self) -> int:
        return int(next(iter(self.built.inputs.values())).shape[0]) if self.built.inputs else 1


def export_device(graph_attrs: Mapping[str, Any]) -> str:
    """``meta`` for an extracted graph, ``cpu`` or ``cuda`` for one profiled there."""
    profiled = str(dict(graph_attrs.get("profile") or {}).get("device") or "meta")
    return "cuda" if profiled.startswith("cuda") else profiled if profiled == "cpu" else "meta"


def rebuild(source: Mapping[str, Any], batch: int | None = None, weights: torch.nn.Module | None = None,
            device: str = "meta") -> Rebuilt:
    """Export on ``device``; the weights on ``meta``, their seeded values in :attr:`Rebuilt.seeded`.

    ``batch`` overrides the source's; ``weights`` reuses the weights of a model already rebuilt
    (an export at another row count).  A graph profiled on the CPU or a GPU is exported from fake
    tensors on that device (:func:`extract.build.build_fake`: its strides, not its weights).
    """
    record = dict(source)
    if batch is not None:
        record["batch"] = batch
    seeded = None
    if weights is None:
        seeded = record_build(record)
        weights = seeded.built.module
    if device == "meta":
        built = seeded.built if seeded is not None else build(record, device="meta")
        program = export_model(built)
    else:  # the strides of `device`, from fake tensors (extract.build.build_fake): no copy of the weights
        built, mode = build_fake(record, device)
        with mode:
            program = export_model(built)
    module = program.module()
    return Rebuilt(built, program, module, weights, lifted_constants(module, record, weights), seeded)


def rebuild_meta(source: Mapping[str, Any], batch: int | None = None) -> Rebuilt:
    """The model built and exported on ``meta`` only: shapes, dtypes and names, no memory, no values."""
    record = dict(source)
    if batch is not None:
        record["batch"] = batch
    built = build(record, device="meta")
    program = export_model(built)
    module = program.module()
    lifted = [str(n.target) for n in module.graph.nodes if n.op == "get_attr" and not _has(built.module, str(n.target))]
    return Rebuilt(built, program, module, built.module, {t: _get(module, t) for t in lifted if _has(module, t)})


def lifted_constants(module: torch.fx.GraphModule, source: Mapping[str, Any],
                     real: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Tensors made inside ``forward`` that the export lifted, by their attribute name in ``module``.

    An export on ``meta`` or of fake tensors holds no values: the model (the real weights) is
    exported once more on the CPU for them, only when there are any.
    """
    targets = [str(n.target) for n in module.graph.nodes if n.op == "get_attr" and not _has(real, str(n.target))]
    if not targets:
        return {}
    values = export_model(build(dict(source), "cpu")).module()
    return {t: _get(values, t) for t in targets if _has(values, t)}


def _has(module: Any, target: str) -> bool:
    for part in target.split("."):
        if not hasattr(module, part):
            return False
        module = getattr(module, part)
    return True


def _get(module: Any, target: str) -> Any:
    for part in target.split("."):
        module = getattr(module, part)
    return module


def reexported_graph(rebuilt: Rebuilt, depth: int | None) -> OpGraph:
    """The op graph's structure (no times) of the re-export, merged to ``depth`` like the original."""
    exported = collect_ops(rebuilt.built, rebuilt.program)
    nodes = [Node(r.id, r.op, 0.0, layer=r.layer) for r in exported.ops]
    edges = [Edge(src, r.id, float(size)) for r in exported.ops for src, size in dict(r.inputs).items()]
    graph = OpGraph.build("reexport", nodes, edges, rebuilt.batch, {"module_types": exported.module_types})
    return graph if depth is None else merge_modules(graph, depth)


def check_structure(rebuilt: Rebuilt, expected_digest: str, depth: int | None, original: OpGraph) -> None:
    """Refuse when the re-export's structure digest is not ``expected_digest``, naming the first difference."""
    again = reexported_graph(rebuilt, depth)
    got = structure_digest(again)
    if got == expected_digest:
        return
    raise InvalidPlan(f"the re-exported model does not match the graph: structure digest {got} != "
                      f"{expected_digest} ({_first_difference(original, again)}); rebuild the graph with "
                      "`placer extract` from this model and solve again", field="graph_digest", ref=got)


def _first_difference(original: OpGraph, again: OpGraph) -> str:
    old, new = original.ids, again.ids
    if len(old) != len(new):
        return f"{len(new)} ops instead of {len(old)}"
    for a, b in zip(original.nodes, again.nodes, strict=True):
        if a.id != b.id or a.op != b.op:
            return f"op {a.id!r} ({a.op}) is now {b.id!r} ({b.op})"
    old_edges = {(e.src, e.dst): e.bytes for e in original.edges}
    for e in again.edges:
        if old_edges.get((e.src, e.dst)) != e.bytes:
            return f"edge {e.src} -> {e.dst} carries {e.bytes:.0f} bytes, not {old_edges.get((e.src, e.dst))}"
    return "the batch size or the edges differ"
