"""A stage's memory, not the model's: a model several times larger than one process may hold trains on 4 (docs/benchmarks.md).

``.venv/bin/python -m bench.bench_stage_memory [--out DIR]``:

1. ``placer topology measure --import transformers --example gpt2 ...`` (the model below) under
   ``torchrun --nproc-per-node 4`` gives each CPU device's ``base_memory_bytes`` (the resident set
   of a process with torch, gloo, the model's modules and its export on ``meta``); the bench's
   topology carries them, so the simulator's ``peak_memory_bytes`` of a device is that base plus
   the stage's tensors;
2. ``placer extract --example gpt2`` (8 layers, hidden 768, 12 heads, seq 32, vocab 1000,
   dropout 0; micro-batch 2 rows); the simulator's peak memory of the whole model on one device
   (a one-stage ``even`` plan);
3. ``even --stages 4 --micro-batches 4`` (1F1B) on the four CPU devices, run under ``torchrun
   --standalone --nproc-per-node 4`` (gloo, one thread each) for two AdamW steps: every rank builds
   the model on meta and materialises its stage's seeded weights (the default), then once more
   with the stage's weights read from a safetensors file (``--weights``); and the memory-balanced
   plan: ``exact`` under the smallest per-stage memory cap it can meet
   (:func:`solvers.memory_balance.least_memory_plan`, 4 stages, ``--balanced-micro-batches``,
   1F1B), seeded; ``--runs`` picks which of ``even``, ``weights`` and ``balanced`` run;
4. the same architecture at hidden 32 (the same ops, exports and process groups; weights and
   activations under 2 % of the large model's) on the same kind of plan: what a rank holds beyond
   its measured base and the tensors the simulator counts;
5. per rank: the simulator's peak (base + tensors), the measured peak resident set of the training
   steps (``peak_memory_bytes``) and of the setup before them (``setup_peak_memory_bytes``), the
   ratios; the per-process limit a quarter of the whole model's need (its base plus a quarter of its
   tensors) and whether each rank stayed under it.
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
from solvers import Problem, ProblemSettings, load_graph, load_topology
from solvers.memory_balance import least_memory_plan

ROOT = Path(__file__).resolve().parents[1]
LARGE = ["layers=8", "hidden=768", "heads=12", "seq=32", "vocab=1000", "dropout=0"]
SMALL = ["layers=8", "hidden=32", "heads=4", "seq=32", "vocab=1000", "dropout=0"]
MIB = 2**20


def measured_topology(out: Path, params: list[str]) -> dict[str, Any]:
    """``placer topology measure`` on 4 CPU processes with GPT-2 of ``params`` loaded (its base memory), devices in
    rank order."""
    path = out / "measured-topology.json"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                           "-m", "cli", "topology", "measure", "-o", str(path), "--max-bytes", "65536",
                           "--repeats", "2", "--import", "transformers", "--example", "gpt2", "--param", *params],
                          cwd=ROOT, env=one_thread_env(), capture_output=True, text=True, timeout=900,
                          check=False)
    if done.returncode:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    document: dict[str, Any] = json.loads(path.read_text())
    document["devices"].sort(key=lambda d: int(d["attrs"]["rank"]))
    return document


def measured_bases(out: Path) -> list[float]:
    """Each rank's ``base_memory_bytes`` from ``placer topology measure`` on 4 CPU processes, in rank order."""
    return [float(d.get("base_memory_bytes", 0.0)) for d in measured_topology(out, LARGE)["devices"]]


def one_thread_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def topology(out: Path, n: int, bases: list[float]) -> Path:
    devices = [{"id": f"cpu{i}", "kind": "cpu", "node": "h0", "memory_bytes": 64e9,
                "base_memory_bytes": bases[i]} for i in range(n)]
    links = [{"src": f"cpu{i}", "dst": f"cpu{j}", "bandwidth_Bps": 1e12, "latency_s": 1e-9}
             for i in range(n) for j in range(i + 1, n)]
    path = out / f"topo{n}.json"
    path.write_text(json.dumps({"format": "placer.topology/v1", "name": f"cpu{n}", "devices": devices,
                                "links": links}))
    return path


def prepare(out: Path, name: str, params: list[str], bases: list[float]) -> tuple[Path, Path, Path]:
    """Graph, 4-stage plan and bundle of GPT-2 with ``params``."""
    graph, plan, folder = out / f"{name}.json", out / f"{name}-plan.json", out / f"{name}-run"
    assert placer(["extract", "--example", "gpt2", "--param", *params, "--batch", "2", "--device-kind", "cpu",
                   "-o", str(graph)]) == 0
    assert placer(["solve", "--solver", "even", "--graph", str(graph), "--topology", str(topology(out, 4, bases)),
                   "--stages", "4", "--micro-batches", "4", "--schedule", "1f1b", "--quiet", "-o", str(plan)]) == 0
    assert placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph), "-o", str(folder)]) == 0
    return graph, plan, folder


def balanced(out: Path, graph: Path, bases: list[float], micro_batches: int) -> tuple[Path, Path]:
    """The memory-balanced 4-stage plan of the large model (module doc, step 3) and its bundle."""
    plan_path, folder = out / f"balanced-mb{micro_batches}-plan.json", out / f"balanced-mb{micro_batches}-run"
    settings = ProblemSettings(micro_batches=(micro_batches,), schedule="1f1b", stages=4, replicas=1, recompute=False)
    problem = Problem(load_graph(graph), load_topology(topology(out, 4, bases)), "throughput", settings)
    plan = least_memory_plan(problem, "exact", time_limit_s=120)
    plan_path.write_text(json.dumps(plan.to_document()))
    assert placer(["launcher", "build", "--plan", str(plan_path), "--graph", str(graph), "-o", str(folder)]) == 0
    return plan_path, folder


def single_device_peak(out: Path, graph: Path, bases: list[float]) -> float:
    """The simulator's peak memory of the whole model trained on one device (rank 0's base included)."""
    plan = out / "single-plan.json"
    assert placer(["solve", "--solver", "even", "--graph", str(graph), "--topology", str(topology(out, 1, bases)),
                   "--stages", "1", "--micro-batches", "4", "--schedule", "1f1b", "--quiet", "-o", str(plan)]) == 0
    peaks: dict[str, float] = json.loads(plan.read_text())["metrics"]["peak_memory_bytes"]
    return max(peaks.values())


def run(folder: Path, *extra: str, processes: int = 4) -> list[dict[str, Any]]:
    """Two AdamW steps of the bundle in ``folder`` under torchrun; each rank's metrics, in rank order."""
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(processes), "launch.py", "--steps", "2", "--warmup", "0", "--autocast", "none", *extra],
                          cwd=folder, env=one_thread_env(), capture_output=True, text=True, timeout=1800,
                          check=False)
    if done.returncode:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    ranks: list[dict[str, Any]] = json.loads((folder / "metrics.json").read_text())["ranks"]
    return sorted(ranks, key=lambda r: int(r["rank"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/bench_stage_memory")
    parser.add_argument("--runs", default="even,weights,balanced", help="comma-separated: even, weights, balanced")
    parser.add_argument("--balanced-micro-batches", type=int, default=1)
    args = parser.parse_args()
    out, runs = Path(args.out), set(args.runs.split(","))
    out.mkdir(parents=True, exist_ok=True)
    bases = measured_bases(out)
    graph, plan, folder = prepare(out, "gpt2-large", LARGE, bases)
    _, _, small_folder = prepare(out, "gpt2-small", SMALL, bases)
    whole = single_device_peak(out, graph, bases)
    plans = {"seeded": plan, "--weights": plan}
    model_bytes = json.loads(graph.read_text())["attrs"]["model_param_bytes"]
    tensors = whole - bases[0]
    print(f"base_memory_bytes per rank (placer topology measure), MiB: {', '.join(f'{b / MIB:.1f}' for b in bases)}")
    print(f"model parameters {model_bytes / MIB:.1f} MiB; whole model on one device (simulated) {whole / MIB:.1f} MiB "
          f"({tensors / MIB:.1f} MiB of tensors)")
    results = {"runtime (hidden 32)": run(small_folder)}
    if "even" in runs:
        results["seeded"] = run(folder)
    if "weights" in runs:
        weights = out / "gpt2.safetensors"
        write_weights(json.loads(graph.read_text())["attrs"]["source"], weights)
        results["--weights"] = run(folder, "--weights", str(weights))
    if "balanced" in runs:
        mode = f"balanced, {args.balanced_micro_batches} micro-batch(es)"
        plans[mode], balanced_folder = balanced(out, graph, bases, args.balanced_micro_batches)
        stages = [len(s["ops"]) for s in json.loads(plans[mode].read_text())["stages"]]
        print(f"{mode}: ops per stage {stages}")
        results[mode] = run(balanced_folder)
    # the launcher's own base: what a rank of the same architecture holds once set up, its weights left out
    own = {int(r["rank"]): float(r["settled_memory_bytes"]) - float(r["materialized_bytes"])
           for r in results["runtime (hidden 32)"]}
    print("launcher's base per rank (hidden 32, settled), MiB: "
          + ", ".join(f"{own[k] / MIB:.1f}" for k in sorted(own)))
    print("| rank | stage | mode | simulated MiB | measured MiB | / sim | simulated, launcher's base MiB | / sim "
          "| setup peak MiB | under the limit |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    peaks = {m: json.loads(p.read_text())["metrics"]["peak_memory_bytes"] for m, p in plans.items() if m in results}
    for mode, simulated in peaks.items():
        for r in results[mode]:
            rank = int(r["rank"])
            sim = float(simulated[str(r["device"])])
            sim_own = sim - bases[rank] + own[rank]
            limit = own[rank] + tensors / 4  # the launcher's base and a quarter of the whole model's tensors
            peak, setup = float(r["peak_memory_bytes"]), float(r["setup_peak_memory_bytes"])
            print(f"| {rank} | {r['stage']} | {mode} | {sim / MIB:.1f} | {peak / MIB:.1f} | {peak / sim:.2f} "
                  f"| {sim_own / MIB:.1f} | {peak / sim_own:.2f} | {setup / MIB:.1f} "
                  f"| {'yes' if max(peak, setup) <= limit else 'no'} ({limit / MIB:.1f}) |")
        largest = max(float(r["peak_memory_bytes"]) - own[int(r["rank"])] for r in results[mode])
        predicted = max(float(simulated[str(r["device"])]) - bases[int(r["rank"])] for r in results[mode])
        print(f"{mode}: the whole model's tensors are {tensors / largest:.2f}x the largest rank's measured peak "
              f"less the launcher's base ({tensors / predicted:.2f}x the largest rank's simulated tensors)")
    (out / "memory.json").write_text(json.dumps({"bases": bases, "launcher_bases": own, "simulated": peaks,
                                                 "whole_model_simulated": whole, **results}, indent=1))


if __name__ == "__main__":
    main()
