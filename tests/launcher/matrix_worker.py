"""Run many bundles in one torchrun world.

``python -m torch.distributed.run --standalone --nproc-per-node N -m tests.launcher.matrix_worker DATA FOLDER...``
(DATA: a ``--data`` spec): one training step of each bundle, the learning rate 0, each step saved
into ``FOLDER/step`` as ``launch.py --save-step`` does; a model is rebuilt once per source (the
weights do not change between bundles).

``... -m tests.launcher.matrix_worker --serve FOLDER PID``: a world kept for the test session of process PID
(tests/launcher/worlds.py), which ends when that process is gone: waits for ``FOLDER/job-K.json`` (K = 0, 1, ...) and runs it, then writes
``FOLDER/done-K``.  A job is ``{"matrix": {"data", "folders"}}`` (as above) or ``{"runs": [{"folder",
"args"}, ...]}``: each run as ``launch.py ARGS`` run in FOLDER would (its own options, metrics and run
record, the model rebuilt for each), one after the other; ``{"stop": true}`` ends the world.  A job that
raises ends the world, as it would end a world of its own.

The processes and their process group are started once for all the bundles (a test of many
small plans would otherwise spend its time starting torchrun).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from launcher.runtime.loop import resident_bytes, run_loop
from launcher.runtime.main import freeze_imports, parse_args, prepare
from launcher.runtime.model import Rebuilt
from launcher.runtime.world import start_process_group
from solvers.model.plan import Plan
from tests.launcher.worlds import publish


def matrix(data: str, folders: list[str]) -> bool:
    """One step of each bundle; False where a run's process groups had to stay (:func:`end_groups`)."""
    rebuilt: dict[str, Rebuilt] = {}
    ended = True
    for name in folders:
        before = set(c10d._world.pg_map)
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
        plan = ctx.plan
        del ctx
        ended &= end_groups(before, plan)
        if dist.get_rank() == 0:
            print(f"done {folder.name}", flush=True)
    return ended


def end_groups(before: set[Any], plan: Plan) -> bool:
    """After a barrier, end the process groups made since ``before`` (the run's pipeline, replica and tied
    groups): one process runs many bundles, and each gloo group left alive keeps a thread that wakes.
    A tensor-parallel run's groups are left alone (False): DTensor's caches key on equal device meshes and
    keep the first mesh's groups, so a later run of the same layout would reach ended groups."""
    dist.barrier()
    if any(stage.tp > 1 for stage in plan.stages):
        return False
    for group in [g for g in c10d._world.pg_map if g not in before]:
        dist.destroy_process_group(group)
    return True


def runs(spec: list[dict[str, Any]]) -> bool:
    """Each run as ``launch.py`` would do it in its folder (relative paths in its options are the folder's);
    False where a run's process groups had to stay (:func:`end_groups`)."""
    home = Path.cwd()
    ended = True
    for run in spec:
        before = set(c10d._world.pg_map)
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
        plan = ctx.plan
        del ctx
        ended &= end_groups(before, plan)
        if dist.get_rank() == 0:
            print(f"done {folder.name} {' '.join(run['args'])}", flush=True)
        os.chdir(home)
    return ended


def serve(folder: Path, owner_pid: int, longest_poll_s: float = 0.5) -> None:
    """Run the jobs that appear in ``folder``, in order, until a stop job or until the process
    ``owner_pid`` (the test session's) is gone, or after a job whose process groups stay (their threads
    would keep waking while the world waits: the next job starts a new world).  An idle rank looks for
    the next job ever less often, from every 10 ms to every ``longest_poll_s``."""
    start_process_group()
    for k in itertools.count():
        path, poll_s = folder / f"job-{k}.json", 0.01
        while not path.exists():
            if not alive(owner_pid):
                return
            time.sleep(poll_s)
            poll_s = min(2 * poll_s, longest_poll_s)
        job = json.loads(path.read_text())
        if job.get("stop"):
            return
        ended = runs(job["runs"]) if "runs" in job else matrix(job["matrix"]["data"], job["matrix"]["folders"])
        sys.stdout.flush()
        sys.stderr.flush()
        dist.barrier()
        if dist.get_rank() == 0:  # a world holding groups it could not end ends with this job
            publish(folder / f"done-{k}", "" if ended else "ending")
        if not ended:
            return


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    freeze_imports()
    if argv[0] == "--serve":
        serve(Path(argv[1]), int(argv[2]))
    else:
        matrix(argv[0], argv[1:])
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
