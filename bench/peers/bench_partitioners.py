"""Placer's throughput solvers beside outside partitioners, all scored by Placer's simulator.

``.venv/bin/python -m bench.peers.bench_partitioners --pipedream-repo DIR [--profiles a,b] [--time-limit S]``

Peers: PipeDream's own optimizer (msr-fiddle/pipedream, from the checkout ``--pipedream-repo``),
DeepSpeed's ``partition_balanced`` (PyPI ``deepspeed``, runtime utilities only; weights = op
parameter bytes, its ``PipelineModule`` default, and op compute time) and torchgpipe's
balance-by-time (PyPI ``torchgpipe``, ``balance_cost`` on the ops' compute times).  They run
as subprocesses of a separate virtual environment (``bench/peers/.venv-partitioners``, made on first use,
torch pinned by ``constraints.txt``) and exchange JSON with ``partitioner_worker.py``; they are never
Placer dependencies.  Sequence peers get every ``S`` dividing the device count (``R = N / S``,
consecutive devices) and the setting's micro-batch counts; the simulator picks the best.
Prints one markdown table per setting: iteration time, ratio to ``lower_bound_s``, solve time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers.convert import balance_to_bounds, pipedream_plan, sequence_plan
from solvers.cost.bounds import lower_bound_s
from solvers.generate import generate_topology
from solvers.mapping.apply import simulated_s
from solvers.model.importers import import_pipedream
from solvers.model.plan import Plan
from solvers.model.problem import Problem, ProblemSettings
from solvers.portfolio import portfolio_names
from solvers.solving import solve

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_DATA = Path("/work/shared/data/pipedream")
DEFAULT_PROFILES = "alexnet,vgg16,resnet50,resnext101,gnmt"


@dataclass(frozen=True)
class Setting:
    name: str
    nodes: int
    gpus: int
    intra_GBps: float
    inter_GBps: float
    memory_gib: float
    micro_batches: tuple[int, ...]

    def problem(self, graph_path: Path) -> Problem:
        topo = generate_topology("hierarchical", nodes=self.nodes, gpus_per_node=self.gpus, memory_gib=self.memory_gib,
                                 intra_bandwidth_GBps=self.intra_GBps, inter_bandwidth_GBps=self.inter_GBps)
        graph = import_pipedream(graph_path.read_text(), graph_path.parent.name)
        return Problem(graph, topo, "throughput", ProblemSettings(micro_batches=self.micro_batches))


SETTINGS = (
    Setting("4 x 4 GPUs, 25 / 1.25 GB/s, 16 GiB, 8 micro-batches", 4, 4, 25.0, 1.25, 16.0, (8,)),
    Setting("2 x 4 GPUs, 11 / 1.1 GB/s, 12 GiB, 4 micro-batches", 2, 4, 11.0, 1.1, 12.0, (4,)),
)


def peer_python(venv: Path) -> Path:
    """The peers' interpreter, the environment made on first use."""
    python = venv / "bin" / "python"
    if python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt")]
    subprocess.run([*pip, "torch", "numpy", "graphviz"], check=True)
    env = {**os.environ, "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1"}
    subprocess.run([*pip, "deepspeed", "torchgpipe"], check=True, env=env)
    return python


def call_peer(python: Path, request: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """The peer's answer and its own time (the partition call, not the interpreter's start)."""
    done = subprocess.run([str(python), str(HERE / "partitioner_worker.py")], input=json.dumps(request),
                          capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{request['peer']} failed: {done.stderr.strip()[-400:]}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer, float(answer["solve_s"])


Row = tuple[str, float, float]  # (name, iteration s, solve s)


def _best(problem: Problem, plans: list[Plan]) -> float:
    return min((simulated_s(problem, p) for p in plans), default=float("inf"))


def _sequence_peer(problem: Problem, python: Path, peer: str, weights: list[float]) -> tuple[float, float]:
    """Best simulated plan over S | N and the micro-batch counts, and the peer's own time."""
    n_dev = problem.topology.n_devices
    parts = [k for k in range(1, n_dev + 1) if n_dev % k == 0 and k <= problem.graph.n_ops]
    answer, took = call_peer(python, {"peer": peer, "weights": weights, "parts": parts})
    plans = []
    for k in parts:
        bounds = answer["bounds"][str(k)] if "bounds" in answer else balance_to_bounds(answer["balance"][str(k)])
        plans += [sequence_plan(problem, bounds, n_dev // k, mb) for mb in problem.micro_batch_candidates]
    return _best(problem, plans), took


def peer_rows(problem: Problem, setting: Setting, graph_path: Path, python: Path, repo: Path | None) -> list[Row]:
    g = problem.graph
    work = (g.fwd_s + g.bwd_s).tolist()
    rows: list[Row] = []
    if repo is not None:
        answer, took = call_peer(python, {
            "peer": "pipedream", "repo": str(repo), "profile": str(graph_path), "machines": [setting.gpus, setting.nodes],
            "bandwidths_Bps": [setting.intra_GBps * 1e9, setting.inter_GBps * 1e9],
            "memory_bytes": setting.memory_gib * 2**30})
        plans = [pipedream_plan(problem, answer, mb) for mb in problem.micro_batch_candidates]
        rows.append(("PipeDream optimizer (original)", _best(problem, plans), took))
    peers: list[tuple[str, str, list[float]]] = [
        ("DeepSpeed partition_balanced (parameters)", "deepspeed", g.param_bytes.tolist()),
        ("DeepSpeed partition_balanced (time)", "deepspeed", work),
        ("torchgpipe balance by time", "torchgpipe", work)]
    for name, peer, weights in peers:
        value, took = _sequence_peer(problem, python, peer, weights)
        rows.append((name, value, took))
    return rows


def placer_rows(problem: Problem, time_limit_s: float) -> list[Row]:
    rows: list[Row] = []
    for name in [*portfolio_names(problem), "auto"]:
        started = time.monotonic()
        plan = solve(problem, name, time_limit_s=time_limit_s)
        took = time.monotonic() - started
        rows.append((name, plan.claimed_objective_s if plan.claimed_objective_s is not None else float("inf"), took))
    return rows


def table(setting: Setting, results: dict[str, tuple[float, list[Row]]], fmt: Callable[[float], str]) -> str:
    names = list(dict.fromkeys(name for _, rows in results.values() for name, _, _ in rows))
    lines = [f"**{setting.name}** — iteration s (x lower bound) / solve s", "",
             "| solver | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for name in names:
        cells = []
        for bound, rows in results.values():
            hit = next(((v, t) for n, v, t in rows if n == name), None)
            if hit is None:
                cells.append("—")
            elif not math.isfinite(hit[0]):  # no plan, or a plan over a device's memory
                cells.append(f"no fit / {hit[1]:.1f}")
            else:
                cells.append(f"{fmt(hit[0])} ({hit[0] / bound:.2f}x) / {hit[1]:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipedream-repo", type=Path, default=None, help="a checkout of msr-fiddle/pipedream")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--profiles", default=DEFAULT_PROFILES)
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per Placer solver")
    parser.add_argument("--venv", type=Path, default=HERE / ".venv-partitioners")
    args = parser.parse_args()
    python = peer_python(args.venv)
    for setting in SETTINGS:
        results: dict[str, tuple[float, list[Row]]] = {}
        for name in args.profiles.split(","):
            path = args.data / "profiles" / name / "graph.txt"
            problem = setting.problem(path)
            bound = min(lower_bound_s(problem, mb) for mb in problem.micro_batch_candidates)
            rows = placer_rows(problem, args.time_limit) + peer_rows(problem, setting, path, python, args.pipedream_repo)
            results[name] = (bound, rows)
            print(f"{setting.name} {name}: " + ", ".join(f"{n} {v:.4f}" for n, v, _ in rows), file=sys.stderr, flush=True)
        print(table(setting, results, lambda v: f"{v:.4f}") + "\n", flush=True)


if __name__ == "__main__":
    main()
