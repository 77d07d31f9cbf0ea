"""Outside schedulers side by side: ``anrg-saga`` (HEFT, CPoP, ETF, MCT, ...) against Placer's latency solvers.

Every peer runs in its own virtual environment (``bench/peers/.venv``, made here on first use
with ``pip install anrg-saga==2.0.2``; the newest saga needs Python 3.12) as a subprocess with a
JSON exchange (``saga_runner.py``), so Placer's environment never imports saga.  Each peer
placement becomes a Placer latency plan — one stage per device, ``order`` = the device's tasks
by their start in saga's schedule — and is scored by Placer's simulator, like every Placer plan.

Settings:
* ``pcie``: PipeDream profiles ``nasnetamobile`` and ``inception_v3``, forward pass, on 4 identical
  V100 (32 GiB), every pair 12 GB/s and 10 us per message;
* ``classic``: ``random_dag`` graphs without communication (``communication=False``) of 50 to 336
  tasks on 2 / 4 / 8 identical devices.

    .venv/bin/python -m bench.peers.bench_peers [--settings pcie,classic] [--time-limit 10]
        [--sizes 50,150,336] [--devices 2,4,8]

Prints one Markdown table per setting: solver, geometric mean and worst ratio of the simulated
latency to the lower bound (``solvers.cost.bounds.lower_bound_s``), and the median solve time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from solvers import registry
from solvers.cost.bounds import lower_bound_s
from solvers.generate import generate_graph, generate_topology
from solvers.model.errors import PlacerError
from solvers.model.importers.pipedream import import_pipedream
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from solvers.solving import solve

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv"
SAGA = "anrg-saga==2.0.2"
PEERS = ("HeftScheduler", "CpopScheduler", "ETFScheduler", "MCTScheduler", "MinMinScheduler",
         "MaxMinScheduler", "DuplexScheduler", "FCPScheduler")
DATA = Path("/work/shared/data/pipedream/profiles")
GiB = float(2**30)


def peer_python() -> Path:
    """The peer venv's interpreter; the venv is created and saga installed on first use."""
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", SAGA], check=True)
    return python


def pcie_v100(n: int = 4) -> Topology:
    devices = [Device(f"gpu{i}", "V100", "server", 32 * GiB, 1.0) for i in range(n)]
    links = [Link(a.id, b.id, 12e9, 1e-5) for i, a in enumerate(devices) for b in devices[i + 1:]]
    return Topology.from_links(f"pcie-{n}xV100", devices, links)


def problems(settings: list[str], sizes: list[int], device_counts: list[int]) -> dict[str, list[tuple[str, Problem]]]:
    out: dict[str, list[tuple[str, Problem]]] = {}
    if "pcie" in settings:
        topo = pcie_v100()
        out["pcie"] = [(name, Problem(import_pipedream((DATA / name / "graph.txt").read_text(), name), topo,
                                      "latency", ProblemSettings(pass_="forward")))
                       for name in ("nasnetamobile", "inception_v3")]
    if "classic" in settings:
        rows = []
        for n in sizes:
            for p in device_counts:
                g = generate_graph("random_dag", n_ops=n, width=8, communication=False, seed=n + p)
                topo = generate_topology("hierarchical", nodes=1, gpus_per_node=p, memory_gib=32.0)
                rows.append((f"dag{n}/{p}", Problem(g, topo, "latency", ProblemSettings(pass_="forward"))))
        out["classic"] = rows
    return out


def saga_request(problem: Problem) -> dict[str, Any]:
    """The problem in saga's terms: task cost = reference forward time, node speed, link speed = bandwidth."""
    g, topo = problem.graph, problem.topology
    nodes = [[d.id, d.speed] for d in topo.devices]
    links = []
    for i, a in enumerate(topo.devices):
        for j in range(i + 1, topo.n_devices):
            bw = float(min(topo.bandwidth_Bps[i, j], topo.bandwidth_Bps[j, i]))
            links.append([a.id, topo.devices[j].id, bw if bw > 0 else 1e-9])
    deps = [[e.src, e.dst, e.bytes] for e in g.edges]
    return {"tasks": [[n.id, n.fwd_s] for n in g.nodes], "dependencies": deps, "nodes": nodes, "links": links,
            "schedulers": list(PEERS)}


def run_peers(problem: Problem) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # saga iterates over sets of names: fix the hash order
    proc = subprocess.run([str(peer_python()), str(HERE / "saga_runner.py")], input=json.dumps(saga_request(problem)),
                          capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"saga runner failed: {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def peer_plan(problem: Problem, mapping: dict[str, list[list[Any]]]) -> Plan:
    """A saga placement as a latency plan: one stage per device, order by saga's start times
    (ties, e.g. zero-time tasks: topological position; saga's added super source / sink tasks
    are dropped)."""
    g = problem.graph
    seen: set[str] = set()
    stages, order = [], {}
    for dev in sorted(mapping):
        tasks = [t for t in mapping[dev] if t[0] in g.index]
        tasks.sort(key=lambda t: (t[1], int(g.topo_position[g.index[t[0]]])))
        ops = tuple(t[0] for t in tasks)
        if seen & set(ops) or len(set(ops)) != len(ops):
            raise ValueError("the schedule duplicates tasks")
        seen |= set(ops)
        if ops:
            stages.append(Stage(ops, (dev,)))
            order[dev] = ops
    return Plan(stages=tuple(stages), micro_batches=1, order=order)


def placer_rows(problem: Problem, limit_s: float) -> dict[str, tuple[float | None, float]]:
    names = [n for n in registry.names() if "latency" in registry.get_solver_class(n).objectives]
    out: dict[str, tuple[float | None, float]] = {}
    for name in names:
        started = time.perf_counter()
        try:
            plan = solve(problem, name, time_limit_s=limit_s)
            latency = None if plan.status == "infeasible" else simulate(problem, plan).metrics["latency_s"]
        except PlacerError:
            latency = None
        out[name] = (latency, time.perf_counter() - started)
    return out


def peer_rows(problem: Problem) -> dict[str, tuple[float | None, float]]:
    out: dict[str, tuple[float | None, float]] = {}
    for name, res in run_peers(problem).items():
        label = "saga " + name.removesuffix("Scheduler")
        if "error" in res:
            out[label] = (None, 0.0)
            continue
        try:
            latency = simulate(problem, peer_plan(problem, res["mapping"])).metrics["latency_s"]
        except (PlacerError, ValueError):
            latency = None
        out[label] = (latency, float(res["solve_time_s"]))
    return out


def table(rows: dict[str, list[tuple[float | None, float, float]]]) -> None:
    print("| solver | latency per instance (ms) | geo. mean latency / bound | worst | median solve time (s) | failed |")
    print("|---|---|---|---|---|---|")
    for name, runs in rows.items():
        ratios = [lat / lb for lat, lb, _ in runs if lat is not None]
        failed = sum(1 for lat, _, _ in runs if lat is None)
        geo = math.exp(statistics.fmean(math.log(r) for r in ratios)) if ratios else float("nan")
        worst = max(ratios, default=float("nan"))
        per = " / ".join("—" if lat is None else f"{lat * 1e3:.2f}" for lat, _, _ in runs)
        print(f"| {name} | {per} | {geo:.3f} | {worst:.3f} | {statistics.median(t for _, _, t in runs):.3f} | "
              f"{failed} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--settings", default="pcie,classic")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--sizes", default="50,150,336")
    ap.add_argument("--devices", default="2,4,8")
    args = ap.parse_args()
    cases = problems(args.settings.split(","), [int(s) for s in args.sizes.split(",")],
                     [int(d) for d in args.devices.split(",")])
    for setting, instances in cases.items():
        rows: dict[str, list[tuple[float | None, float, float]]] = {}
        print(f"\n### {setting}\n")
        print("| instance | ops | devices | lower bound (ms) | best Placer (ms) | best peer (ms) |")
        print("|---|---|---|---|---|---|")
        for label, problem in instances:
            lb = lower_bound_s(problem)
            results = {**placer_rows(problem, args.time_limit), **peer_rows(problem)}
            for name, (lat, t) in results.items():
                rows.setdefault(name, []).append((lat, lb, t))
            placer = min((v[0] for k, v in results.items() if not k.startswith("saga") and v[0] is not None))
            peer = min((v[0] for k, v in results.items() if k.startswith("saga") and v[0] is not None),
                       default=float("nan"))
            print(f"| {label} | {problem.graph.n_ops} | {problem.topology.n_devices} | {lb * 1e3:.2f} | "
                  f"{placer * 1e3:.2f} | {peer * 1e3:.2f} |", flush=True)
        print()
        table(rows)


if __name__ == "__main__":
    main()
