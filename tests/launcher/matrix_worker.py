"""Run many bundles, one training step each, in one torchrun world: ``python -m torch.distributed.run
--standalone --nproc-per-node N -m tests.launcher.matrix_worker DATA FOLDER...``
(DATA: a ``--data`` spec).

The processes and their process group are started once for all the bundles (a test matrix of
many small plans would otherwise spend its time starting torchrun); a model is rebuilt once per
source.  Each bundle's first step is saved into ``FOLDER/step`` as ``launch.py --save-step``
does; the learning rate is 0, so the shared weights do not change between bundles.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from launcher.runtime.loop import run_loop
from launcher.runtime.main import parse_args, prepare
from launcher.runtime.model import Rebuilt


def main(data: str, folders: list[str]) -> int:
    torch.set_num_threads(1)
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
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
