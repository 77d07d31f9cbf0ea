"""Defaults that find a plan: GPT-2 XL at batch 8, sequence 1024, on 4 x 8 GPUs (docs/benchmarks.md).

``.venv/bin/python -m bench.bench_defaults [--graph gpt2xl.json.gz] [--solver auto]``

The graph comes from ``placer extract --example gpt2 --param layers=48 hidden=1600 heads=25
seq=1024 --batch 8 -o gpt2xl.json.gz`` (run first into a temporary folder when ``--graph`` is
not given; about 25 s).  The topology is ``hierarchical --nodes 4
--gpus-per-node 8`` with its default device (H100, 80 GiB) and with ``device="TitanV"`` (12 GiB,
the default before).  Rows: the old defaults spelled out (4 micro-batches, no recomputation), the
searched defaults, 8 micro-batches with recomputation searched per stage, and 8 micro-batches
with recomputation in every stage.  Prints one markdown row per case: wall seconds of the solve,
status, the plan (solver, stages x replicas, micro-batches, recomputing stages), the simulated
iteration time and samples per second.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from solvers.generate import generate_topology
from solvers.model.documents import load_graph
from solvers.model.plan import Plan
from solvers.model.problem import Problem, ProblemSettings
from solvers.solving import solve

CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("TitanV", "before: 4 micro-batches, no recomputation", {"micro_batches": (4,), "recompute": False}),
    ("TitanV", "defaults (searched)", {}),
    ("H100", "defaults (searched)", {}),
    ("TitanV", "8 micro-batches, recomputation searched", {"micro_batches": (8,)}),
    ("TitanV", "8 micro-batches, recomputation everywhere", {"micro_batches": (8,), "recompute": True}),
]


def describe(plan: Plan) -> str:
    """``parmesan, 4 x 8, 8 micro-batches, recompute [0, 1]`` (the chosen member for auto)."""
    if not plan.stages:
        return "-"
    who = str(plan.stats.get("chosen", plan.solver))
    widths = sorted({len(s.devices) for s in plan.stages})
    shape = f"{len(plan.stages)} x {widths[0]}" if len(widths) == 1 else f"{len(plan.stages)} stages"
    if isinstance(plan.recompute, bool):
        again = "every stage" if plan.recompute else "none"
    else:
        again = "stages " + ", ".join(map(str, plan.recompute))
    return f"{who}, {shape}, {plan.micro_batches} micro-batches, recompute: {again}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--graph", type=Path, help="the extracted GPT-2 XL graph (default: extract it now)")
    parser.add_argument("--solver", default="auto")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds (default: the solver's)")
    args = parser.parse_args()
    if args.graph is None:
        from cli import main as placer

        args.graph = Path(tempfile.mkdtemp()) / "gpt2xl.json.gz"
        assert placer(["extract", "--example", "gpt2", "--param", "layers=48", "hidden=1600", "heads=25",
                       "seq=1024", "--batch", "8", "-o", str(args.graph)]) == 0
    graph = load_graph(args.graph)
    print("| devices | settings | wall s | status | plan | iteration s | samples/s |")
    print("|---|---|---|---|---|---|---|")
    notes: list[str] = []
    for device, label, settings in CASES:
        topo = generate_topology("hierarchical", nodes=4, gpus_per_node=8, device=device)
        problem = Problem(graph, topo, "throughput", ProblemSettings.model_validate(settings))
        started = time.perf_counter()
        plan = solve(problem, args.solver, time_limit_s=args.time_limit)
        wall_s = time.perf_counter() - started
        metrics = plan.metrics or {}
        iteration = f"{metrics['iteration_s']:.3f}" if metrics.get("iteration_s") else "-"
        samples = f"{metrics['throughput_samples_per_s']:.2f}" if metrics.get("throughput_samples_per_s") else "-"
        print(f"| {device} {topo.devices[0].memory_bytes / 2**30:.0f} GiB | {label} | {wall_s:.1f} | {plan.status} | "
              f"{describe(plan)} | {iteration} | {samples} |", flush=True)
        notes += [f"- {device}, {label}: {n}" for n in plan.notes if n.startswith(("memory:", "recomputation"))]
    print()
    print("\n".join(notes))


if __name__ == "__main__":
    main()
