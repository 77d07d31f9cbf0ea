"""A stage's memory, not the model's: a model 4x larger than one process may hold trains on 4 (docs/benchmarks.md).

``.venv/bin/python -m bench.bench_stage_memory [--out DIR]``:

1. ``placer extract --example gpt2`` (8 layers, hidden 768, 12 heads, seq 32, vocab 1000,
   dropout 0; micro-batch 2 rows); the simulator's peak memory of the whole model on one device
   (a one-stage ``even`` plan) sets the per-process limit: a quarter of it, so the model needs
   4x what one process may hold;
2. ``even --stages 4 --micro-batches 4`` (1F1B) on four CPU devices, run under ``torchrun
   --standalone --nproc-per-node 4`` (gloo, one thread each) for two AdamW steps: every rank builds
   the model on meta and materialises its stage's seeded weights (the default), then once more
   with the stage's weights read from a safetensors file (``--weights``), and once more seeded with
   ``AdamW(foreach=False)`` (the default multi-tensor step allocates temporaries the size of all
   the stage's parameters at once; the per-parameter step, one parameter's at a time);
3. the runtime's own cost, measured the same way: the same architecture at hidden 32 (the same
   ops, the same exports and process groups, weights and activations under 2 % of the large
   model's), run on the same kind of plan; its per-rank peak less the resident set at start is
   what a rank costs beyond the tensors the simulator counts;
4. per rank: the simulator's peak memory of the rank's device; the measured peak resident set
   less the resident set at start (torch imported); that less the runtime's own cost; the ratios;
   and the rank's share of the whole model's need.  Also the resident set of the bare process at
   start, and how many times the largest rank the whole model is.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli import main as placer
from launcher.runtime.weights import write_weights

ROOT = Path(__file__).resolve().parents[1]
LARGE = ["layers=8", "hidden=768", "heads=12", "seq=32", "vocab=1000", "dropout=0"]
SMALL = ["layers=8", "hidden=32", "heads=4", "seq=32", "vocab=1000", "dropout=0"]
MIB = 2**20


def topology(out: Path, n: int) -> Path:
    devices = [{"id": f"cpu{i}", "kind": "cpu", "node": "h0", "memory_bytes": 64e9} for i in range(n)]
    links = [{"src": f"cpu{i}", "dst": f"cpu{j}", "bandwidth_Bps": 1e12, "latency_s": 1e-9}
             for i in range(n) for j in range(i + 1, n)]
    path = out / f"topo{n}.json"
    path.write_text(json.dumps({"format": "placer.topology/v1", "name": f"cpu{n}", "devices": devices,
                                "links": links}))
    return path


def prepare(out: Path, name: str, params: list[str]) -> tuple[Path, Path, Path]:
    """Graph, 4-stage plan and bundle of GPT-2 with ``params``."""
    graph, plan, folder = out / f"{name}.json", out / f"{name}-plan.json", out / f"{name}-run"
    assert placer(["extract", "--example", "gpt2", "--param", *params, "--batch", "2", "--device-kind", "cpu",
                   "-o", str(graph)]) == 0
    assert placer(["solve", "--solver", "even", "--graph", str(graph), "--topology", str(topology(out, 4)),
                   "--stages", "4", "--micro-batches", "4", "--schedule", "1f1b", "--quiet", "-o", str(plan)]) == 0
    assert placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph), "-o", str(folder)]) == 0
    return graph, plan, folder


def single_device_peak(out: Path, graph: Path) -> float:
    """The simulator's peak memory of the whole model trained on one device."""
    plan = out / "single-plan.json"
    assert placer(["solve", "--solver", "even", "--graph", str(graph), "--topology", str(topology(out, 1)),
                   "--stages", "1", "--micro-batches", "4", "--schedule", "1f1b", "--quiet", "-o", str(plan)]) == 0
    peaks: dict[str, float] = json.loads(plan.read_text())["metrics"]["peak_memory_bytes"]
    return max(peaks.values())


def run(folder: Path, *extra: str) -> list[dict[str, Any]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                           "launch.py", "--steps", "2", "--warmup", "0", "--autocast", "none", *extra],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    ranks: list[dict[str, Any]] = json.loads((folder / "metrics.json").read_text())["ranks"]
    return sorted(ranks, key=lambda r: int(r["rank"]))


def used(rank: dict[str, Any]) -> float:
    return float(rank["peak_memory_bytes"]) - float(rank["start_memory_bytes"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/bench_stage_memory")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    graph, plan, folder = prepare(out, "gpt2-large", LARGE)
    _, _, small_folder = prepare(out, "gpt2-small", SMALL)
    whole = single_device_peak(out, graph)
    simulated: dict[str, float] = json.loads(plan.read_text())["metrics"]["peak_memory_bytes"]
    model_bytes = json.loads(graph.read_text())["attrs"]["model_param_bytes"]
    weights = out / "gpt2.safetensors"
    write_weights(json.loads(graph.read_text())["attrs"]["source"], weights)
    print(f"model parameters {model_bytes / MIB:.1f} MiB; whole model on one device (simulated) {whole / MIB:.1f} MiB")
    results = {"seeded": run(folder), "--weights": run(folder, "--weights", str(weights)),
               "seeded, foreach=false": run(folder, "--optimizer-arg", "foreach=false"),
               "runtime (hidden 32)": run(small_folder)}
    fixed = {int(r["rank"]): used(r) for r in results["runtime (hidden 32)"]}
    print("bare process (torch imported) at start, MiB: "
          + ", ".join(f"{float(r['start_memory_bytes']) / MIB:.0f}" for r in results["seeded"]))
    print("| rank | stage | simulated MiB | runtime's own MiB | mode | measured MiB | / sim | measured − runtime MiB "
          "| / sim | of the whole model |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode in ("seeded", "--weights", "seeded, foreach=false"):
        for r in results[mode]:
            sim = float(simulated[str(r["device"])])
            rank = int(r["rank"])
            net = used(r) - fixed[rank]
            print(f"| {rank} | {r['stage']} | {sim / MIB:.1f} | {fixed[rank] / MIB:.1f} | {mode} | {used(r) / MIB:.1f} "
                  f"| {used(r) / sim:.2f} | {net / MIB:.1f} | {net / sim:.2f} | "
                  f"{net / whole:.2f} |")
        largest = max(used(r) - fixed[int(r["rank"])] for r in results[mode])
        print(f"{mode}: the whole model needs {whole / largest:.2f}x the largest rank's measured tensor memory")
    (out / "memory.json").write_text(json.dumps({"simulated": simulated, "whole_model_simulated": whole,
                                                 **results}, indent=1))


if __name__ == "__main__":
    main()
