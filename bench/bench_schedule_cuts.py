"""Random cuts under every multi-stage schedule, verified against one process (docs/benchmarks.md).

For each tiny example model (GPT-2 and Llama with their embeddings, BERT, T5, ViT) and each
schedule (default: the multi-stage ones, interleaved 1F1B, looped BFS, interleaved zero-bubble, ZBV,
DualPipeV, each with 2 virtual stages per rank; ``--schedules gpipe,1f1b``: one stage per rank), one
plan on ``--ranks`` ranks with cut points drawn at random (seeded), the first stage often one to
three ops (a stage that passes the inputs on).  Every plan is checked (``placer launcher
check``), bundled, and all run one training step in one torchrun world (CPU, gloo); each
is compared with the single-process step as ``placer launcher verify`` compares it.  Prints one line
per plan and how many stages ran their backward whole (``launcher.runtime.split_backward``).

Usage: ``python -m bench.bench_schedule_cuts [--seeds 0,1,2] [--schedules ...] [--ranks R] [--width W] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = ""  # the default data and loss, what a user gets: synthetic batches, the causal LM's own loss or cos(k) regression
MODELS = {
    "gpt2": "layers=2 hidden=32 heads=2 intermediate=64 seq=8 vocab=64 dropout=0",
    "llama": "layers=2 hidden=32 heads=2 intermediate=64 seq=8 vocab=64",
    "bert": "layers=2 hidden=32 heads=2 seq=8 vocab=64 dropout=0",
    "t5": "layers=1 hidden=32 heads=2 intermediate=64 seq=8 vocab=64 dropout=0",
    "vit": "layers=2 hidden=32 heads=2 image=16 patch=8 dropout=0",
}
SCHEDULES = ("interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv", "dualpipev")
MICRO_BATCHES = 4  # at least; DualPipeV needs 2 per rank


def random_plan(ops: list[str], schedule: str, ranks: int, rng: random.Random, width: int = 1) -> dict[str, Any]:
    """``ranks * v`` stages (v = 2 for the multi-stage schedules, 1 for GPipe and 1F1B) cut at random; 40 % of
    the time the first cut after op 1 to 3."""
    from solvers.model.schedules import stage_ranks

    v = 1 if schedule in ("gpipe", "1f1b") else 2
    n = ranks * v
    cuts = sorted(rng.sample(range(1, len(ops)), n - 1))
    if rng.random() < 0.4:
        first = rng.randint(1, 3)
        cuts = sorted({first, *rng.sample(range(first + 1, len(ops)), n - 2)})
    bounds = [0, *cuts, len(ops)]
    group = stage_ranks(schedule, ranks, v)
    stages = [{"ops": ops[bounds[j]:bounds[j + 1]], "devices": [f"cpu{group[j] * width + k}" for k in range(width)]}
              for j in range(n)]
    return {"format": "placer.plan/v1", "solver": "user", "status": "feasible", "stages": stages,
            "micro_batches": max(MICRO_BATCHES, 2 * ranks), "schedule": schedule, "virtual_stages": v, "objective": "throughput"}


def run_seed(root: Path, graphs: dict[str, Path], seed: int, schedules: list[str], ranks: int,
             width: int = 1) -> tuple[int, int, int]:
    """Plans of one seed: (verified, failed, stages run whole)."""
    import torch

    from launcher.bundle import build_bundle, write_bundle
    from launcher.check import check_plan
    from launcher.verify import compare, reference_step
    from solvers.model.documents import load_graph, load_plan
    from solvers.model.plan import plan_from_document

    rng = random.Random(seed)
    folders = []
    for model, path in graphs.items():
        ops = [n["id"] for n in json.loads(path.read_text())["nodes"]]
        for schedule in schedules:
            doc = random_plan(ops, schedule, ranks, rng, width)
            cuts = "-".join(str(sum(len(s["ops"]) for s in doc["stages"][:j + 1])) for j in range(len(doc["stages"]) - 1))
            name = f"s{seed}-{model}-{schedule}-{cuts}"
            plan = plan_from_document(doc)
            report = check_plan(plan, load_graph(path))
            if not report.ok:
                print(f"refused {name}: {report.reason}")
                continue
            folder = root / name
            write_bundle(build_bundle(plan, load_graph(path)), folder)
            folders.append(folder)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks * width),
                           "-m", "tests.launcher.matrix_worker", DATA, *map(str, folders)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    log = done.stdout + done.stderr
    (root / f"seed{seed}.log").write_text(log)
    print(f"seed {seed}: torchrun exit {done.returncode} in {time.perf_counter() - started:.0f} s")
    verified = failed = 0
    for folder in folders:
        steps = [torch.load(p) for p in sorted((folder / "step").glob("rank*.pt"))]
        if len(steps) != ranks * width:
            print(f"no step {folder.name}")
            failed += 1
            continue
        manifest = json.loads((folder / "manifest.json").read_text())
        loss, grads = reference_step(manifest, load_plan(folder / "plan.json"), DATA)
        report = compare(steps, loss, grads)
        verified += report.ok
        failed += not report.ok
        print(f"{'ok' if report.ok else 'DIFFERS'} {folder.name}" + ("" if report.ok else f": {report.first_failure}"))
    return verified, failed, log.count("runs its backward whole")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, one world each")
    parser.add_argument("--out", type=Path, default=None, help="keep the bundles and logs here")
    parser.add_argument("--schedules", default=",".join(SCHEDULES),
                        help="comma-separated schedules (gpipe and 1f1b: one stage per rank)")
    parser.add_argument("--ranks", type=int, default=2, help="rank groups")
    parser.add_argument("--width", type=int, default=1, help="devices (replicas) per rank group; processes: ranks x width")
    args = parser.parse_args(argv)
    from cli import main as placer

    root = args.out or Path(tempfile.mkdtemp(prefix="schedule-cuts-"))
    root.mkdir(parents=True, exist_ok=True)
    graphs = {}
    for model, params in MODELS.items():
        path = root / f"{model}.json"
        if placer(["extract", "--example", model, "--param", *params.split(), "--batch", "4", "--device-kind", "cpu",
                   "-o", str(path)]) != 0:
            return 1
        graphs[model] = path
    totals = [0, 0, 0]
    for seed in (int(s) for s in args.seeds.split(",")):
        for i, n in enumerate(run_seed(root, graphs, seed, args.schedules.split(","), args.ranks, args.width)):
            totals[i] += n
    print(f"{totals[0]} verified, {totals[1]} failed, {totals[2]} stage(s) ran their backward whole; bundles in {root}")
    return 1 if totals[1] else 0


if __name__ == "__main__":
    sys.exit(main())
