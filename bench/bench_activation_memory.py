"""A stage's activation memory, predicted from ``placer profile`` against measured (docs/benchmarks.md).

``.venv/bin/python -m bench.bench_activation_memory``:

1. per example model (tiny configurations, :data:`MODELS`; micro-batch :data:`BATCH`), ``placer
   profile --device cpu`` (one thread): every op's ``act_bytes`` measured (what autograd saves,
   :mod:`extract.op_memory`), the meta-tensor estimate of ``placer extract`` kept beside it;
2. the exported model on the CPU, cut into :data:`STAGES` stages at equal op counts, into the
   launcher's stage modules (:func:`launcher.runtime.partition.build_stages`);
3. per stage, **measured**: the stage's forward of one micro-batch under ``torch.profiler``
   (``profile_memory``) in one range that first copies the stage's inputs (a received tensor that
   needs a gradient, as a pipeline stage holds it) and ends after the stage's outputs are dropped,
   keeping only their autograd graph: the bytes the range allocated and did not free, i.e. what
   the stage holds from its forward to its backward.  Every floating received tensor needs a
   gradient, as the launcher's stages receive them; once more with a gradient only where the whole
   model's tensor needs one (the difference: what ops save because an input needs a gradient in the
   stage and not in the model).  **Predicted**: what the memory model keeps per micro-batch
   (:func:`solvers.cost.memory.kept_bytes`: the stage's ``act_bytes`` ``A_s`` and the tensors it
   receives ``B_s``, docs/cost-model.md), from the profile; ``A_s`` alone, and the meta estimate's
   ``A_s + B_s``, beside it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.profiler import ProfilerActivity, record_function
from torch.utils._pytree import tree_leaves

from extract.build import build, example_source
from extract.export import export_model
from extract.profile import profile
from launcher.runtime.partition import StageGraph, assign_stages, build_stages
from solvers.cost.memory import kept_bytes
from solvers.cost.traffic import group_input_bytes
from solvers.model.graph import OpGraph

MODELS: dict[str, dict[str, Any]] = {
    "gpt2": {"layers": 4, "hidden": 256, "heads": 4, "seq": 128, "vocab": 1000, "dropout": 0},
    "bert": {"layers": 4, "hidden": 256, "heads": 4, "seq": 128, "vocab": 1000, "dropout": 0},
    "llama": {"layers": 4, "hidden": 256, "heads": 4, "intermediate": 688, "seq": 128, "vocab": 1000, "dropout": 0},
    "t5": {"layers": 4, "hidden": 256, "heads": 4, "seq": 128, "vocab": 1000, "dropout": 0},
    "vit": {"layers": 4, "hidden": 256, "heads": 4, "image": 128, "patch": 16},
}
BATCH = 4
STAGES = 2
RANGE = "placer.bench::stage"
MIB = 2**20


def stage_split(graph: OpGraph, n_stages: int) -> dict[str, int]:
    """Op id -> stage: equal op counts in graph order (a topological order)."""
    ids = [n.id for n in graph.nodes]
    return {op: min(n_stages - 1, i * n_stages // len(ids)) for i, op in enumerate(ids)}


def _lookup(module: torch.nn.Module) -> Any:
    def get(target: str) -> Any:
        value: Any = module
        for part in target.split("."):
            value = getattr(value, part)
        return value
    return get


def measured_stage_bytes(stage: StageGraph, values: Mapping[str, Any],
                         needs_grad: Mapping[str, bool] | None = None) -> tuple[float, dict[str, Any]]:
    """(bytes the stage holds from forward to backward, its outputs by name); see the module docstring.

    ``needs_grad``: per received name, whether it needs a gradient (None: every floating one does)."""
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof, \
            record_function(RANGE):
        args = [_received(values[name], None if needs_grad is None else needs_grad.get(name, False))
                for name in stage.inputs]
        outs = stage.module(*args)
        held = [t.grad_fn for t in tree_leaves(outs) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        passed = {name: _detached(v) for name, v in zip(stage.outputs, outs, strict=True)}
        passed_grad = {name: isinstance(v, torch.Tensor) and v.requires_grad
                       for name, v in zip(stage.outputs, outs, strict=True)}
        del args, outs
    event = next(e for e in prof.events() if e.name == RANGE)
    outputs = sum(v.untyped_storage().nbytes() for v in passed.values() if isinstance(v, torch.Tensor))
    del held
    return float(event.cpu_memory_usage) - float(outputs), {**passed, GRAD: passed_grad}


GRAD = "__needs_grad__"  # the key of the outputs' own gradient flags in ``measured_stage_bytes``'s answer


def _received(value: Any, needs_grad: bool | None) -> Any:
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        grad = copy.is_floating_point() and (needs_grad is None or needs_grad)
        return copy.requires_grad_(True) if grad else copy
    return value


def _detached(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def measure_model(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Per stage of ``name``: predicted (profile, estimate) and measured bytes."""
    source = example_source(name, params, BATCH)
    graph = profile(source, repeats=1, warmup=1)
    built = build(source, device="cpu")
    gm = export_model(built).module()
    split = stage_split(graph, STAGES)
    stages = build_stages(gm, _lookup(gm), assign_stages(gm, split), STAGES)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = list(built.inputs.values())
    values: dict[str, Any] = {p: built.inputs.get(p, inputs[i]) for i, p in enumerate(placeholders)}
    stage_of = np.array([split[n.id] for n in graph.nodes])
    inputs_bytes = group_input_bytes(graph, stage_of, STAGES)
    rows = []
    needs_grad: dict[str, bool] = {}
    for stage in stages:
        only_needed, _ = measured_stage_bytes(stage, values, needs_grad)
        measured, passed = measured_stage_bytes(stage, values)
        needs_grad.update(passed.pop(GRAD))
        values.update(passed)
        ops = [n for n in graph.nodes if split[n.id] == stage.index]
        received = float(inputs_bytes[stage.index])
        profiled = sum(n.act_bytes for n in ops)
        estimated = sum(float((n.attrs or {}).get("estimate_bytes", [0.0])[0]) for n in ops)
        rows.append({"model": name, "stage": stage.index, "ops": len(ops), "measured_bytes": measured,
                     "measured_grad_where_needed_bytes": only_needed, "profiled_bytes": profiled,
                     "input_bytes": received, "predicted_bytes": kept_bytes(profiled, received, False),
                     "estimated_bytes": kept_bytes(estimated, received, False)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/bench_activation_memory.json")
    out = Path(parser.parse_args().out)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = [row for name, params in MODELS.items() for row in measure_model(name, params)]
    print("| model | stage | ops | measured MiB | predicted MiB | / measured | A_s alone / measured "
          "| meta estimate / measured | measured, gradient where the model needs one, MiB | predicted / that |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        m, p, g = r["measured_bytes"], r["predicted_bytes"], r["measured_grad_where_needed_bytes"]
        print(f"| {r['model']} | {r['stage']} | {r['ops']} | {m / MIB:.2f} | {p / MIB:.2f} | {p / m:.3f} "
              f"| {r['profiled_bytes'] / m:.3f} | {r['estimated_bytes'] / m:.3f} | {g / MIB:.2f} | {p / g:.3f} |")
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
