"""A stage's memory, not the model's: peak memory per rank with and without ``--weights`` (docs/benchmarks.md).

``.venv/bin/python -m bench.bench_stage_memory [--out DIR]``:

1. ``placer extract --example gpt2`` (8 layers, hidden 512, 8 heads, seq 64, vocab 1000, dropout
   0; micro-batch 4 rows) and ``even --stages 4 --micro-batches 4`` on four CPU devices;
2. the model's weights written once (``launcher.runtime.weights.write_weights``);
3. the bundle under ``torchrun --standalone --nproc-per-node 4`` (gloo, one thread each) for two
   AdamW steps, once as before (every rank builds the whole model on the CPU) and once with
   ``--weights`` (every rank builds it on meta and loads its stage);
4. per rank: the peak resident set less the resident set before the model was built (torch
   imported), beside the simulator's peak memory of that rank's device.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from cli import main as placer
from launcher.runtime.weights import write_weights

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ["layers=8", "hidden=512", "heads=8", "seq=64", "vocab=1000", "dropout=0"]


def topology(out: Path, n: int) -> Path:
    devices = [{"id": f"cpu{i}", "kind": "cpu", "node": "h0", "memory_bytes": 8e9} for i in range(n)]
    links = [{"src": f"cpu{i}", "dst": f"cpu{j}", "bandwidth_Bps": 1e12, "latency_s": 1e-9}
             for i in range(n) for j in range(i + 1, n)]
    path = out / "topo.json"
    path.write_text(json.dumps({"format": "placer.topology/v1", "name": f"cpu{n}", "devices": devices,
                                "links": links}))
    return path


def run(folder: Path, *extra: str) -> list[dict[str, object]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                           "launch.py", "--steps", "2", "--warmup", "0", "--autocast", "none", *extra],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    ranks: list[dict[str, object]] = json.loads((folder / "metrics.json").read_text())["ranks"]
    return ranks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/bench_stage_memory")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    graph, plan, folder = out / "gpt2.json", out / "plan.json", out / "run"
    assert placer(["extract", "--example", "gpt2", "--param", *PARAMS, "--batch", "4", "--device-kind", "cpu",
                   "-o", str(graph)]) == 0
    assert placer(["solve", "--solver", "even", "--graph", str(graph), "--topology", str(topology(out, 4)),
                   "--stages", "4", "--micro-batches", "4", "--schedule", "1f1b", "--quiet", "-o", str(plan)]) == 0
    assert placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph), "-o", str(folder)]) == 0
    weights = out / "gpt2.safetensors"
    write_weights(json.loads(graph.read_text())["attrs"]["source"], weights)
    simulated = json.loads(plan.read_text())["metrics"]["peak_memory_bytes"]
    model_bytes = json.loads(graph.read_text())["attrs"]["model_param_bytes"]
    print(f"model parameters: {model_bytes / 2**20:.1f} MiB; weights file {weights.stat().st_size / 2**20:.1f} MiB")
    results = {}
    for mode, extra in (("whole model", ()), ("--weights", ("--weights", str(weights)))):
        results[mode] = run(folder, *extra)
    print("| rank | device | simulated MiB | whole model: MiB (/ sim) | --weights: MiB (/ sim) |")
    print("|---|---|---|---|---|")
    for whole, own in zip(results["whole model"], results["--weights"], strict=True):
        sim = float(simulated[str(whole["device"])])
        used = [(float(str(r["peak_memory_bytes"])) - float(str(r["start_memory_bytes"]))) for r in (whole, own)]
        print(f"| {whole['rank']} | {whole['device']} | {sim / 2**20:.1f} | {used[0] / 2**20:.1f} ({used[0] / sim:.2f}) "
              f"| {used[1] / 2**20:.1f} ({used[1] / sim:.2f}) |")
    (out / "memory.json").write_text(json.dumps({"simulated": simulated, **results}, indent=1))


if __name__ == "__main__":
    main()
