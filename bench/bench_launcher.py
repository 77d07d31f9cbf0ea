"""Closing the loop on CPU: profile, measure the topology, solve, run every plan, compare (docs/benchmarks.md).

``.venv/bin/python -m bench.bench_launcher [--out DIR]``:

1. ``placer profile bench.launcher_model:bert --device cpu --threads 1`` (micro-batch of 8 rows);
2. ``placer measure-topology`` under torchrun with 2 gloo processes (the two "devices");
3. solve with even, parmesan, rannc (throughput; 1, 2 and 4 micro-batches, GPipe and 1F1B) and
   heft, m-etf, m-topo, single (latency, training pass);
4. run every plan's bundle with torchrun on 2 processes, one thread each (6 iterations, 2 warm-up);
5. print measured against simulated iteration time per plan, the Spearman rank correlation and
   the median relative error.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from client.cli import main as placer

ROOT = Path(__file__).resolve().parents[1]
THROUGHPUT = [("even", ["--stages", "2"]), ("parmesan", ["--stages", "2"]), ("rannc", [])]
LATENCY = ["heft", "m-etf", "m-topo", "single"]


def torchrun(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    return done.stdout


def prepare(out: Path) -> tuple[Path, Path]:
    graph, topo = out / "graph.json", out / "topo.json"
    if not graph.exists():
        assert placer(["profile", "bench.launcher_model:bert", "--batch", "8", "--device", "cpu", "--threads", "1",
                       "--repeats", "5", "-o", str(graph)]) == 0
    if not topo.exists():
        torchrun([str(ROOT / "client" / "cli" / "__main__.py"), "measure-topology", "-o", str(topo)], out)
    return graph, topo


def plans(out: Path, graph: Path, topo: Path) -> list[Path]:
    made = []
    for solver, extra in THROUGHPUT:
        for mb in (1, 2, 4):
            for schedule in ("gpipe", "1f1b"):
                if mb == 1 and schedule == "1f1b":
                    continue  # the same order as GPipe with one micro-batch
                path = out / f"{solver}-mb{mb}-{schedule}.json"
                if placer(["solve", "--solver", solver, "--graph", str(graph), "--topology", str(topo), "--quiet",
                           "--micro-batches", str(mb), "--schedule", schedule, *extra, "-o", str(path)]) == 0:
                    made.append(path)
    for solver in LATENCY:
        path = out / f"{solver}-latency.json"
        if placer(["solve", "--solver", solver, "--graph", str(graph), "--topology", str(topo), "--quiet",
                   "--objective", "latency", "--pass", "training", "-o", str(path)]) == 0:
            made.append(path)
    return made


def run_plan(out: Path, plan: Path, graph: Path, topo: Path) -> tuple[float, float]:
    folder = out / plan.stem
    assert placer(["launcher", "--plan", str(plan), "--graph", str(graph), "--topology", str(topo),
                   "-o", str(folder)]) == 0
    torchrun(["launch.py", "--steps", "6", "--warmup", "2"], folder)
    measured = json.loads((folder / "metrics.json").read_text())["iteration_s"]
    simulated = json.loads(plan.read_text())["metrics"]["objective_s"]
    return float(measured), float(simulated)


def ranks(values: list[float]) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    out = np.empty(len(values))
    out[order] = np.arange(len(values))
    for v in set(values):  # ties share their mean rank
        idx = [i for i, x in enumerate(values) if x == v]
        out[idx] = out[idx].mean()
    return out


def spearman(a: list[float], b: list[float]) -> float:
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp/bench_launcher")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    graph, topo = prepare(out)
    rows = []
    for plan in plans(out, graph, topo):
        doc = json.loads(plan.read_text())
        measured, simulated = run_plan(out, plan, graph, topo)
        shape = "x".join(str(len(s["devices"])) for s in doc["stages"] if s["ops"])
        rows.append((plan.stem, shape, doc["micro_batches"], measured, simulated))
        print(f"| {plan.stem} | {shape} | {doc['micro_batches']} | {measured * 1e3:.1f} | {simulated * 1e3:.1f} | "
              f"{measured / simulated:.2f} |", flush=True)
    measured_s = [r[3] for r in rows]
    simulated_s = [r[4] for r in rows]
    errors = [abs(m - s) / m for m, s in zip(measured_s, simulated_s, strict=True)]
    print(f"plans {len(rows)}, Spearman {spearman(measured_s, simulated_s):.3f}, "
          f"median relative error {statistics.median(errors):.1%}")


if __name__ == "__main__":
    main()
