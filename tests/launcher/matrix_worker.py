"""Run many bundles in one torchrun world.

``python -m torch.distributed.run --standalone --nproc-per-node N -m tests.launcher.matrix_worker DATA FOLDER...``
(DATA: a ``--data`` spec): one training step of each bundle, the learning rate 0, each step saved
into ``FOLDER/step`` as ``launch.py --save-step`` does; a model is rebuilt once per source (the
weights do not change between bundles).

``... -m tests.launcher.matrix_worker --runs RUNS.json``: RUNS.json lists ``{"folder", "args"}``;
each runs as ``launch.py ARGS`` run in FOLDER would (its own options, metrics and run record,
the model rebuilt for each), one after the other in the same processes.

The processes and their process group are started once for all the bundles (a test of many
small plans would otherwise spend its time starting torchrun).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from launcher.runtime.loop import resident_bytes, run_loop
from launcher.runtime.main import freeze_imports, parse_args, prepare
from launcher.runtime.model import Rebuilt


def matrix(data: str, folders: list[str]) -> None:
    rebuilt: dict[str, Rebuilt] = {}
    for name in folders:
        folder = Path(name)
        args = parse_args(["--steps", "1", "--warmup", "0", "--optimizer", "SGD", "--lr", "0", "--autocast", "none",
                           "--save-step", str(folder / "step"), "--metrics", str(folder / "metrics.json"),
                           "--data", data])
        key = json.dumps(json.loads((folder / "manifest.json").read_text())["source"], sort_keys=True)
        ctx = prepare(folder, args, rebuilt.get(key))
        rebuilt[key] = ctx.reference
        for p in ctx.reference.weights.parameters():
            p.grad = None
        run_loop(ctx, args)
        dist.barrier()
        if dist.get_rank() == 0:
            print(f"done {folder.name}", flush=True)


def runs(spec: Path) -> None:
    """Each run as ``launch.py`` would do it in its folder (relative paths in its options are the folder's)."""
    home = Path.cwd()
    for run in json.loads(spec.read_text()):
        folder = Path(run["folder"]).resolve()
        os.chdir(folder)
        args = parse_args(run["args"])
        start_memory_bytes = resident_bytes()
        ctx = prepare(folder, args)
        ctx.start_memory_bytes = start_memory_bytes
        metrics, record = run_loop(ctx, args)
        if dist.get_rank() == 0:
            Path(args.metrics).write_text(json.dumps(metrics, indent=1) + "\n")
            Path(args.run_record).write_text(json.dumps(record, indent=1) + "\n")
        dist.barrier()
        if dist.get_rank() == 0:
            print(f"done {folder.name} {' '.join(run['args'])}", flush=True)
        os.chdir(home)


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    freeze_imports()
    if argv[0] == "--runs":
        runs(Path(argv[1]))
    else:
        matrix(argv[0], argv[1:])
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
