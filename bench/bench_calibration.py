"""Calibration on CPU: run many plans, fit on a third, predict the rest (docs/cost-model.md "Calibration").

``.venv/bin/python -m bench.bench_calibration [--out DIR] [--models gpt2,bert,vit] [--solvers ...]
[--micro-batches 1,2,4] [--procs 2,3,4] [--steps 8] [--limit N]``:

1. ``placer profile --example MODEL`` (small sizes, see ``MODELS``; micro-batch of ``--batch`` rows,
   one thread) for every model;
2. a CPU topology per process count (``cpu0 .. cpuN-1`` on one host, the links' figures nominal: the
   calibration learns what a transfer costs);
3. ``placer solve`` with every solver, micro-batch count and process count (throughput, 1F1B; a
   latency-only solver, ``celeritas``, once per model and process count: an op-level plan of one
   training pass); distinct plans only (the same stages, devices and micro-batches once);
4. every plan's bundle under ``torchrun --standalone`` (gloo, ``OMP_NUM_THREADS=1``, one process per
   device) for ``--steps`` iterations, 2 warm-up, 1 profiled (``--profile-steps 1``): its ``run.json``;
5. fit a calibration on every third run (``fit_calibration``; it prints what the runs do not determine
   and each run's profiler ratio), predict the others with and without it, and print per held-out plan the measured and predicted iteration and the largest per-rank
   memory error; then the median relative error of the iteration time, the Spearman rank correlation
   and the memory errors, calibrated beside uncalibrated, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from scipy.stats import spearmanr

from cli import main as placer
from solvers.calibration import apply_calibration, fit_calibration
from solvers.calibration.fit import run_problem
from solvers.model.canonical import digest
from solvers.model.documents import load_graph, load_plan, load_topology
from solvers.model.run import RunRecord, run_from_document
from solvers.simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "gpt2": ["layers=4", "hidden=128", "heads=4", "seq=64", "vocab=2000", "dropout=0"],
    "bert": ["layers=4", "hidden=128", "heads=4", "seq=64", "vocab=2000", "dropout=0"],
    "vit": ["layers=4", "hidden=128", "heads=4", "image=64", "patch=8", "dropout=0"],
}
SOLVERS = ("even", "parmesan", "rannc", "pipedream", "celeritas", "exact")
LATENCY_SOLVERS = frozenset({"celeritas"})  # solvers of the latency objective only


def topology(out: Path, n: int) -> Path:
    devices = [{"id": f"cpu{i}", "kind": "cpu", "node": "h0", "memory_bytes": 8e9} for i in range(n)]
    links = [{"src": f"cpu{i}", "dst": f"cpu{j}", "bandwidth_Bps": 1e10, "latency_s": 1e-5}
             for i in range(n) for j in range(i + 1, n)]
    path = out / f"topo{n}.json"
    path.write_text(json.dumps({"format": "placer.topology/v1", "name": f"cpu{n}", "devices": devices,
                                "links": links}))
    return path


def profile(out: Path, model: str, batch: int) -> Path:
    graph = out / f"{model}.json"
    if not graph.exists():
        assert placer(["profile", "--example", model, "--param", *MODELS[model], "--batch", str(batch),
                       "--device", "cpu", "--threads", "1", "--repeats", "5", "-o", str(graph)]) == 0
    return graph


def solve_all(out: Path, graphs: dict[str, Path], solvers: list[str], mbs: list[int], procs: list[int]) -> list[Path]:
    made: dict[str, Path] = {}
    for model, graph in graphs.items():
        for n in procs:
            topo = topology(out, n)
            for solver in solvers:
                latency = solver in LATENCY_SOLVERS  # an op-level plan of one training pass: no micro-batches
                for mb in mbs[:1] if latency else mbs:
                    path = out / f"{model}-{solver}-p{n}-mb{mb}.json"
                    shape = (["--objective", "latency", "--pass", "training"] if latency else
                             ["--micro-batches", str(mb), "--schedule", "1f1b"])
                    if not path.exists():
                        code = placer(["solve", "--solver", solver, "--graph", str(graph), "--topology", str(topo),
                                       *shape, "--time-limit", "20", "--quiet", "-o", str(path)])
                        if code != 0:
                            path.unlink(missing_ok=True)
                            continue
                    doc = json.loads(path.read_text())
                    key = digest({"model": model, "stages": [[s["ops"], s["devices"]] for s in doc["stages"] if s["ops"]],
                                  "mb": doc["micro_batches"]})
                    made.setdefault(key, path)
    return sorted(made.values())


def run_plan(out: Path, plan: Path, graph: Path, topo: Path, steps: int) -> Path | None:
    """The plan's ``run.json``; None when the launcher refuses the plan (the reason printed)."""
    folder = out / "runs" / plan.stem
    record = folder / "run.json"
    if record.exists():
        return record
    print(f"running {plan.stem} at load average {os.getloadavg()}", flush=True)
    assert placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph), "--topology", str(topo),
                   "-o", str(folder)]) == 0
    devices = len(json.loads((folder / "manifest.json").read_text())["devices"])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(devices), "launch.py", "--steps", str(steps), "--warmup", "2", "--profile-steps", "1",
                           "--autocast", "none"], cwd=folder, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    refused = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("launch.py: refused")]
    if done.returncode and refused:
        print(f"skipped {plan.stem}: {refused[0]}", flush=True)
        return None
    if done.returncode:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    return record


def rel(pred: float, measured: float) -> float:
    return abs(pred / measured - 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/bench_calibration")
    parser.add_argument("--models", default="gpt2,bert,vit")
    parser.add_argument("--solvers", default=",".join(SOLVERS))
    parser.add_argument("--micro-batches", default="1,2,4")
    parser.add_argument("--procs", default="2,3,4")
    parser.add_argument("--batch", type=int, default=12,
                        help="rows per micro-batch of the profile (12: splits over 2, 3 and 4 replicas)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--limit", type=int, default=0, help="run at most this many plans (0: all)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()}", flush=True)
    graphs = {m: profile(out, m, args.batch) for m in args.models.split(",")}
    plans = solve_all(out, graphs, args.solvers.split(","), [int(x) for x in args.micro_batches.split(",")],
                      [int(x) for x in args.procs.split(",")])
    if args.limit:
        plans = plans[:args.limit]
    print(f"{len(plans)} distinct plans", flush=True)
    cases: list[tuple[str, RunRecord, Any, Any, Any]] = []
    for plan in plans:
        found = re.fullmatch(r"(\w+)-.+-p(\d+)-mb\d+", plan.stem)
        assert found, plan.stem
        model, n = found.group(1), int(found.group(2))
        topo = topology(out, n)
        record = run_plan(out, plan, graphs[model], topo, args.steps)
        if record is None:
            continue
        cases.append((plan.stem, run_from_document(json.loads(record.read_text())), load_graph(graphs[model]),
                      load_topology(topo), load_plan(plan)))
    fit_on = [c for i, c in enumerate(cases) if i % 3 == 0]
    held = [c for i, c in enumerate(cases) if i % 3 != 0]
    if not held:
        print("one plan only: predicting the run it was fitted on (no held-out plan)")
        held = fit_on
    cal = fit_calibration([c[1] for c in fit_on], [c[2] for c in fit_on], [c[3] for c in fit_on],
                          [c[4] for c in fit_on])
    (out / "calibration.json").write_text(json.dumps(cal.to_document(), indent=1))
    print(f"fitted on {len(fit_on)} runs: {', '.join(cal.fit['parameters'])}")
    print(f"not determined by these runs: {', '.join(cal.fit['unidentified']) or 'none'}; at a bound: "
          f"{', '.join(cal.fit['at_bounds']) or 'none'}; profiler ratios (plain / profiled iteration): "
          f"{', '.join(f'{r:.2f}' for r in cal.fit['observations']['profiler_ratios'])}")
    print(json.dumps({k: v.to_dict() for k, v in cal.devices.items()}), json.dumps(
        {k: v.to_dict() for k, v in cal.channels.items()}), f"efficiency {cal.collective_efficiency:.3g}",
        f"memory {cal.memory.to_dict()}", f"step {cal.step.to_dict()}")
    print("| plan | measured ms | uncalibrated ms | calibrated ms | memory error uncal. | memory error cal. |")
    print("|---|---|---|---|---|---|")
    measured, before, after, mem_before, mem_after = [], [], [], [], []
    for name, run, graph, topo, plan in held:
        m = run.summary["iteration_s"]
        g, t = apply_calibration(graph, topo, cal)
        sim0 = simulate(run_problem(run, graph, topo, plan), plan).metrics
        sim1 = simulate(run_problem(run, g, t, plan), plan).metrics
        peaks = {k: v for k, v in run.summary["peak_memory_bytes"].items() if v}
        e0 = max(rel(sim0["peak_memory_bytes"][d], v) for d, v in peaks.items())
        e1 = max(rel(sim1["peak_memory_bytes"][d], v) for d, v in peaks.items())
        measured.append(m)
        before.append(sim0["objective_s"])
        after.append(sim1["objective_s"])
        mem_before.append(e0)
        mem_after.append(e1)
        print(f"| {name} | {m * 1e3:.1f} | {sim0['objective_s'] * 1e3:.1f} | {sim1['objective_s'] * 1e3:.1f} | "
              f"{e0:.1%} | {e1:.1%} |", flush=True)
    for label, pred, mem in (("uncalibrated", before, mem_before), ("calibrated", after, mem_after)):
        errors = [rel(p, m) for p, m in zip(pred, measured, strict=True)]
        rho = spearmanr(pred, measured).statistic if len(pred) > 2 else float("nan")
        print(f"{label}: {len(pred)} held-out plans, iteration median relative error {statistics.median(errors):.1%}, "
              f"Spearman {rho:.3f}; per-rank peak memory: largest error {max(mem):.1%}, "
              f"plans within 10 % {sum(e <= 0.1 for e in mem)}/{len(mem)}")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
