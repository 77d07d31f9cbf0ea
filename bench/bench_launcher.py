"""Closing the loop on CPU: profile, measure the topology, solve, run every plan, compare (docs/benchmarks.md).

``.venv/bin/python -m bench.bench_launcher [--out DIR]``:

1. ``placer profile bench.launcher_model:bert --device cpu --threads 1`` (micro-batch of 8 rows);
2. ``placer topology measure`` under torchrun with 2 gloo processes (the two "devices");
3. solve with even, parmesan, rannc (throughput; 1, 2 and 4 micro-batches, GPipe and 1F1B) and
   heft, m-etf, m-topo, single (latency, training pass);
4. run every plan's bundle with torchrun on 2 processes, one thread each (8 iterations, 2 warm-up);
5. print measured (median and fastest iteration after the warm-up) against simulated iteration
   time per plan, the Spearman rank correlation and the median relative error of both, and how
   much slower two one-thread processes run side by side than one alone (the machine's load).
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

from cli import main as placer

ROOT = Path(__file__).resolve().parents[1]
THROUGHPUT = [("even", ["--stages", "2"]), ("parmesan", ["--stages", "2"]), ("rannc", [])]
LATENCY = ["heft", "m-etf", "m-topo", "single"]


def torchrun(args: list[str], cwd: Path, nproc: int = 2) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
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
        torchrun([str(ROOT / "cli" / "__main__.py"), "topology", "measure", "-o", str(topo)], out)
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


def run_plan(out: Path, plan: Path, graph: Path, topo: Path) -> tuple[float, float, float]:
    folder = out / plan.stem
    assert placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph), "--topology", str(topo),
                   "-o", str(folder)]) == 0
    devices = len(json.loads((folder / "manifest.json").read_text())["devices"])
    torchrun(["launch.py", "--steps", "8", "--warmup", "2"], folder, devices)
    metrics = json.loads((folder / "metrics.json").read_text())
    simulated = json.loads(plan.read_text())["metrics"]["objective_s"]
    return float(metrics["iteration_s"]), float(min(metrics["iterations_s"][2:])), float(simulated)


def _work(_: int) -> float:
    import time

    import torch

    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    started = time.perf_counter()
    for _ in range(400):
        a = torch.tanh(a @ a)
    return time.perf_counter() - started


def concurrency() -> float:
    """How much slower two one-thread processes run side by side than one alone (1.0: two free cores)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        alone = statistics.median(pool.map(_work, range(3)))
    with ctx.Pool(2) as pool:
        both = statistics.median(pool.map(_work, range(2)))
    return both / alone


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
    print(f"load average {os.getloadavg()}, two processes side by side run {concurrency():.2f}x slower than one",
          flush=True)
    rows = []
    for plan in plans(out, graph, topo):
        doc = json.loads(plan.read_text())
        median_s, fastest_s, simulated = run_plan(out, plan, graph, topo)
        shape = "x".join(str(len(s["devices"])) for s in doc["stages"] if s["ops"])
        rows.append((median_s, fastest_s, simulated))
        print(f"| {plan.stem} | {shape} | {doc['micro_batches']} | {median_s * 1e3:.1f} | {fastest_s * 1e3:.1f} | "
              f"{simulated * 1e3:.1f} | {median_s / simulated:.2f} | {fastest_s / simulated:.2f} |", flush=True)
    simulated_s = [r[2] for r in rows]
    for label, k in (("median", 0), ("fastest", 1)):
        measured_s = [r[k] for r in rows]
        errors = [abs(m - s) / m for m, s in zip(measured_s, simulated_s, strict=True)]
        print(f"{label}: plans {len(rows)}, Spearman {spearman(measured_s, simulated_s):.3f}, "
              f"median relative error {statistics.median(errors):.1%}")
    print(f"load average {os.getloadavg()}, two processes side by side run {concurrency():.2f}x slower than one")


if __name__ == "__main__":
    main()
