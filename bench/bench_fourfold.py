"""A model 4x larger than one process may hold trains on 4 (issue "Every plan runs", item 4; docs/benchmarks.md).

``.venv/bin/python -m bench.bench_fourfold [--out DIR] [--configs wide,long]``

The measure is the one of GPipe's Table 1 (Huang et al., 2019): the largest model of a family that
trains with a given per-process memory, on one process and on four, at the same batch.  For each
GPT-2 family below (hidden, heads, sequence and vocabulary fixed; the layer count is the size):

1. ``placer topology measure --example gpt2 ...`` under ``torchrun --nproc-per-node 4`` gives each
   CPU device's ``base_memory_bytes`` (the process with torch, gloo and the model's modules);
2. **one process**: the ``n``-layer model, batch 8 rows in one pass (``even --stages 1
   --micro-batches 1``), trained for two AdamW steps under ``torchrun --nproc-per-node 1``; its
   measured peak resident set (the larger of the setup's and the steps', ``metrics.json``) is the
   per-process **limit**.  The ``n + 1``-layer model on one process, run the same way, must exceed
   it: so ``n`` layers are the most one process holds under the limit;
3. **four processes**: the ``m``-layer model, whose parameters are at least 4x the ``n``-layer
   model's, the same 8 rows as 4 micro-batches of 2 (1F1B), planned by ``rannc`` on the four
   measured devices with each device's ``memory_bytes`` set to the simulator's peak of the
   ``n``-layer model on one device (what the simulator says one process holds), then trained for
   two AdamW steps under ``torchrun --nproc-per-node 4``; every rank's measured peak must stay at or
   under the limit, and is compared with the simulator's peak for its device.

The limit is checked against each process's measured high-water mark, not enforced by the kernel
(a cgroup's limit would reclaim the resident set's file pages first and so admit more).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.bench_stage_memory import MIB, measured_topology, run
from cli import main as placer

# (hidden, heads, sequence, vocabulary), layers on one process, layers on four
CONFIGS: dict[str, tuple[list[str], int, int]] = {
    # activations dominate a rank's tensors (8 MiB of parameters at 2 layers)
    "long": (["hidden=256", "heads=4", "seq=256", "vocab=1000", "dropout=0"], 2, 10),
    # parameters and their AdamW state are about 40 % of one process's tensors at 3 layers
    "wide": (["hidden=512", "heads=8", "seq=128", "vocab=1000", "dropout=0"], 3, 13),
}
BATCH_ROWS = 8
MICRO_BATCHES = 4


def write_topology(path: Path, measured: dict[str, Any], n: int, memory_bytes: float | None = None) -> Path:
    """The first ``n`` measured devices (and their links), each with ``memory_bytes`` where given."""
    devices = [dict(d) for d in measured["devices"][:n]]
    if memory_bytes is not None:
        for device in devices:
            device["memory_bytes"] = memory_bytes
    ids = {d["id"] for d in devices}
    links = [link for link in measured.get("links", []) if link["src"] in ids and link["dst"] in ids]
    path.write_text(json.dumps({**measured, "devices": devices, "links": links}))
    return path


def extract(out: Path, params: list[str], layers: int, rows: int) -> Path:
    graph = out / f"gpt2-{layers}l-{rows}r.json"
    assert placer(["extract", "--example", "gpt2", "--param", f"layers={layers}", *params, "--batch", str(rows),
                   "--device-kind", "cpu", "-o", str(graph)]) == 0
    return graph


def plan_and_run(out: Path, name: str, graph: Path, topology: Path, solve_args: list[str],
                 processes: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Solve, build and train two AdamW steps under torchrun; the plan document and each rank's metrics."""
    plan, folder = out / f"{name}-plan.json", out / f"{name}-run"
    assert placer(["solve", "--graph", str(graph), "--topology", str(topology), *solve_args, "--quiet",
                   "-o", str(plan)]) == 0
    assert placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph), "-o", str(folder)]) == 0
    return json.loads(plan.read_text()), run(folder, processes=processes)


def peak_of(rank: dict[str, Any]) -> float:
    """A process's measured high-water mark: the larger of its setup's and its training steps'."""
    return max(float(rank["peak_memory_bytes"]), float(rank["setup_peak_memory_bytes"]))


def param_bytes(graph: Path) -> float:
    return float(json.loads(graph.read_text())["attrs"]["model_param_bytes"])


def one_config(out: Path, name: str) -> dict[str, Any]:
    params, n, m = CONFIGS[name]
    out.mkdir(parents=True, exist_ok=True)
    measured = measured_topology(out, [f"layers={m}", *params])
    bases = [float(d.get("base_memory_bytes", 0.0)) for d in measured["devices"]]
    one = write_topology(out / "topo1.json", measured, 1)
    single_args = ["--solver", "even", "--stages", "1", "--micro-batches", "1", "--schedule", "1f1b"]
    g_n, g_more, g_m = extract(out, params, n, BATCH_ROWS), extract(out, params, n + 1, BATCH_ROWS), \
        extract(out, params, m, BATCH_ROWS // MICRO_BATCHES)
    single_plan, single = plan_and_run(out, f"one-{n}l", g_n, one, single_args, 1)
    limit = peak_of(single[0])
    more_plan, more = plan_and_run(out, f"one-{n + 1}l", g_more, one, single_args, 1)
    held = max(single_plan["metrics"]["peak_memory_bytes"].values())
    four = write_topology(out / "topo4-limited.json", measured, 4, held)
    four_plan, ranks = plan_and_run(out, f"four-{m}l", g_m, four,
                                    ["--solver", "rannc", "--stages", "4", "--micro-batches", str(MICRO_BATCHES),
                                     "--schedule", "1f1b", "--no-recompute", "--time-limit", "60"], 4)
    ratio = param_bytes(g_m) / param_bytes(g_n)
    print(f"\n## {name}: GPT-2 {' '.join(params)}; bases (MiB) {', '.join(f'{b / MIB:.1f}' for b in bases)}")
    print(f"parameters: {n} layers {param_bytes(g_n) / MIB:.1f} MiB, {m} layers {param_bytes(g_m) / MIB:.1f} MiB "
          f"({ratio:.2f}x)")
    print(f"one process, {n} layers: simulated {held / MIB:.1f} MiB, measured {limit / MIB:.1f} MiB = the limit")
    more_sim = max(more_plan["metrics"]["peak_memory_bytes"].values())
    print(f"one process, {n + 1} layers: simulated {more_sim / MIB:.1f} MiB, measured {peak_of(more[0]) / MIB:.1f} "
          f"MiB ({'over' if peak_of(more[0]) > limit else 'NOT over'} the limit)")
    print("| rank | stage ops | simulated MiB | measured MiB | / simulated | under the limit |")
    print("|---|---|---|---|---|---|")
    simulated = four_plan["metrics"]["peak_memory_bytes"]
    ops = {i: len(stage["ops"]) for i, stage in enumerate(four_plan["stages"])}
    for rank in ranks:
        sim, peak = float(simulated[str(rank["device"])]), peak_of(rank)
        print(f"| {rank['rank']} | {ops.get(int(rank['stage']), '?')} | {sim / MIB:.1f} | {peak / MIB:.1f} "
              f"| {peak / sim:.2f} | {'yes' if peak <= limit else 'NO'} |")
    return {"config": name, "params": params, "layers_one": n, "layers_four": m, "param_ratio": ratio,
            "bases": bases, "limit_bytes": limit, "one_simulated_bytes": held, "one": single,
            "one_more_layer": more, "one_more_layer_simulated_bytes": more_sim,
            "four_simulated": simulated, "four": ranks,
            "fits": all(peak_of(r) <= limit for r in ranks) and peak_of(more[0]) > limit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/bench_fourfold")
    parser.add_argument("--configs", default="long,wide", help=f"comma-separated: {', '.join(CONFIGS)}")
    args = parser.parse_args()
    results = [one_config(Path(args.out) / name, name) for name in args.configs.split(",")]
    Path(args.out, "fourfold.json").write_text(json.dumps(results, indent=1))
    for r in results:
        print(f"{r['config']}: {r['param_ratio']:.2f}x the parameters of the largest one-process model "
              f"{'trains on 4 processes under its limit' if r['fits'] else 'does NOT fit'}")


if __name__ == "__main__":
    main()
