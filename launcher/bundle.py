"""The launcher bundle: a plan, its graph and the files that run it with torchrun.

``build_bundle`` returns the files as bytes; ``write_bundle`` writes them to a folder and
``bundle_zip`` packs them into a zip in memory (what the service hands out).  Everything here
works without torch: the runtime on the nodes does the model work.

Files: ``launch.py`` (verbatim from :mod:`launcher.templates`), ``README.md`` (the torchrun
command per host), ``plan.json``, ``graph.json``, ``manifest.json``.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from string import Template
from typing import Any

from launcher.placement import DeviceSlot, device_slots, hosts, torchrun_command
from launcher.structure import model_source, structure_digest
from solvers import __version__
from solvers.model.canonical import digest
from solvers.model.errors import InvalidPlan
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan
from solvers.model.topology import Topology

MANIFEST_FORMAT = "placer.launcher/v1"


@dataclass(frozen=True)
class Bundle:
    """The bundle's files (name -> bytes) and its manifest."""

    files: dict[str, bytes]
    manifest: dict[str, Any]


def plan_kind(plan: Plan) -> str:
    """``latency`` for an op-level plan with a per-device order, else ``throughput``."""
    if plan.objective == "latency" or (plan.objective is None and plan.order is not None):
        return "latency"
    return "throughput"


def build_manifest(plan: Plan, graph: OpGraph, slots: list[DeviceSlot]) -> dict[str, Any]:
    attrs = graph.attrs or {}
    return {
        "format": MANIFEST_FORMAT,
        "kind": plan_kind(plan),
        "graph_structure_digest": structure_digest(graph),
        "graph_digest": graph.digest,
        "plan_digest": digest(plan.to_document()),
        "source": model_source(graph),
        "inputs": attrs.get("inputs"),
        "granularity": attrs.get("granularity", "op"),
        "versions": {**dict(attrs.get("versions") or {}), "placer": __version__},
        "devices": [{"device": s.device, "host": s.host, "local_index": s.local_index, "local_rank": s.local_rank}
                    for s in slots],
    }


def build_bundle(plan: Plan, graph: OpGraph, topology: Topology | None = None) -> Bundle:
    """The bundle's files; refuses a plan that is infeasible or not made for ``graph``."""
    if plan.status == "infeasible" or not plan.stages:
        raise InvalidPlan("the plan is infeasible: there is nothing to launch", field="status")
    if plan.graph_digest is not None and plan.graph_digest != graph.digest:
        raise InvalidPlan(f"the plan was solved on graph {plan.graph_digest}, not on this graph ({graph.digest})",
                          field="graph_digest")
    slots = device_slots(plan, topology)
    manifest = build_manifest(plan, graph, slots)
    out = {
        "launch.py": files("launcher.templates").joinpath("launch.py").read_bytes(),
        "README.md": readme(plan, manifest, slots).encode(),
        "plan.json": _json(plan.to_document()),
        "graph.json": _json(graph.to_document()),
        "manifest.json": _json(manifest),
    }
    return Bundle(out, manifest)


def readme(plan: Plan, manifest: dict[str, Any], slots: list[DeviceSlot]) -> str:
    table = hosts(slots)
    commands = "\n".join(f"- host `{h}` ({n} process{'es' if n > 1 else ''}):\n\n      {torchrun_command(slots, h)}\n"
                         for h, n in table)
    devices = "\n".join(f"- `{s.device}`: host `{s.host}`, local index {s.local_index}, local rank {s.local_rank}"
                        for s in slots)
    source = manifest["source"]
    model = source.get("spec") or f"--example {source.get('example')}"
    text = files("launcher.templates").joinpath("README.md").read_text()
    return Template(text).substitute(
        plan_digest=manifest["plan_digest"], solver=plan.solver, kind=manifest["kind"], n_devices=len(slots),
        n_hosts=len(table), model=model, commands=commands, devices=devices)


def write_bundle(bundle: Bundle, folder: str | Path) -> list[Path]:
    """Write the files into ``folder`` (created if needed); returns their paths."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in bundle.files.items():
        path = root / name
        path.write_bytes(data)
        paths.append(path)
    return paths


def bundle_zip(plan: Plan, graph: OpGraph, topology: Topology | None = None, folder: str = "launcher") -> bytes:
    """The bundle as a zip archive in memory, its files under ``folder/``."""
    bundle = build_bundle(plan, graph, topology)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in bundle.files.items():
            info = zipfile.ZipInfo(f"{folder}/{name}", date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def _json(doc: Any) -> bytes:
    return (json.dumps(doc, indent=1) + "\n").encode()
