"""``launch.py``'s command line and the training loop every rank runs.

Order of work: read the bundle; refuse a world of the wrong size; rebuild and re-export the model
and refuse a structure that differs from the graph; map every rank to its plan device and refuse
a device that no process holds; split and run.  Each iteration is timed between two barriers;
the first ``--warmup`` iterations are left out of the summary.  Every rank logs its iteration
time and peak memory; rank 0 writes ``metrics.json`` and the run record ``run.json``
(``placer.run/v1``, :mod:`launcher.runtime.record`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from extract.source import InputSpec
from launcher.bundle import plan_kind
from launcher.runtime.compat import encoded_crossings, encoding_note
from launcher.runtime.context import LaunchContext
from launcher.runtime.data import load_data
from launcher.runtime.gradsync import BUCKET_BYTES
from launcher.runtime.loop import resident_bytes, run_loop
from launcher.runtime.model import Rebuilt, check_structure, export_device, rebuild
from launcher.runtime.partition import assign_stages, crossing_values
from launcher.runtime.training import optimizer_class, optimizer_kwargs
from launcher.runtime.weights import FileWeights, SeededWeights, WeightSource
from launcher.runtime.world import check_world_size, locate, select_gpu, start_process_group
from launcher.structure import granularity_depth, op_stage
from launcher.tensor_plan import tensor_parallel_degree
from solvers.model.documents import load_graph, load_plan
from solvers.model.errors import InvalidInput, PlacerError


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="launch.py", description="Run a Placer plan under torchrun.")
    p.add_argument("--host", default=None, help="this node's host id in the plan (README.md); default: the only host")
    p.add_argument("--steps", type=int, default=3, help="training iterations (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="iterations left out of the timing (default 1)")
    p.add_argument("--optimizer", default="AdamW", help="a torch.optim class (default AdamW)")
    p.add_argument("--optimizer-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="a keyword argument of the optimizer, VALUE read as JSON when it parses (repeatable)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    p.add_argument("--lr-warmup", type=int, default=0, help="steps of linear warm-up from 0 to --lr (default 0)")
    p.add_argument("--lr-decay", default="constant", choices=("constant", "linear", "cosine"),
                   help="after the warm-up, down to 0 at the last step (default constant)")
    p.add_argument("--clip-norm", type=float, default=None,
                   help="clip the model's gradient to this global L2 norm (across all stages)")
    p.add_argument("--autocast", default="auto", choices=("auto", "bf16", "none"),
                   help="run pipeline stages under bf16 autocast: auto = where the GPU supports bf16 (default)")
    p.add_argument("--accumulate", type=int, default=1,
                   help="batches whose gradients are averaged before each optimizer step (default 1)")
    p.add_argument("--save", default=None, metavar="DIR", help="checkpoint every stage here "
                   "(torch.distributed.checkpoint) after the last step")
    p.add_argument("--save-every", type=int, default=0, help="also checkpoint every N steps (default: at the end only)")
    p.add_argument("--resume", default=None, metavar="DIR", help="continue from a checkpoint --save wrote")
    p.add_argument("--weights", default=None, metavar="FILE",
                   help="safetensors file of the model's weights: each rank loads only what its stage reads "
                        "(default: every rank computes its stage's seeded initial values by name)")
    p.add_argument("--data", default=None,
                   help="text:PATH (byte-level text, causal LMs) or package.module:callable giving batches and loss")
    p.add_argument("--inference", action="store_true", help="forward passes only")
    p.add_argument("--metrics", default="metrics.json", help="where rank 0 writes the measurements")
    p.add_argument("--run-record", default="run.json", metavar="PATH",
                   help="where rank 0 writes the run record, placer.run/v1 (default run.json; not --run, which "
                        "torchrun reads as its own --run-path even after the script)")
    p.add_argument("--profile-steps", type=int, default=0, metavar="N",
                   help="profile the N steps after the warm-up (torch.profiler): stage forward/backward and "
                        "transfer times in the run record (default 0: iteration times and memory only)")
    p.add_argument("--bucket-mib", type=float, default=BUCKET_BYTES / 2**20, metavar="MIB",
                   help="largest bucket of gradients one data-parallel all-reduce carries (default 25)")
    p.add_argument("--save-step", default=None, metavar="DIR",
                   help="write the first step's loss, outputs and gradients of every rank into DIR")
    p.add_argument("--encode-non-float", action="store_true",
                   help="send integer and bool stage-boundary values encoded in a floating dtype (bit for bit) on "
                        "any torch; automatic where torch's PipelineStage needs it (docs/launcher.md)")
    return p.parse_args(list(argv))


def main(bundle: Path, argv: Sequence[str]) -> int:
    """Run the bundle in ``bundle``; 0 on success, 2 when refused (the message names why)."""
    args = parse_args(argv)
    freeze_imports()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    start_memory_bytes = resident_bytes()
    try:
        ctx = prepare(bundle, args)
        # the baseline of peak_memory_bytes: the resident set on CPU; on CUDA the allocator held nothing yet
        ctx.start_memory_bytes = 0 if ctx.world.torch_device.type == "cuda" else start_memory_bytes
    except PlacerError as exc:
        sys.stderr.write(f"launch.py: refused: {exc}\n")
        return 2
    try:
        metrics, run = run_loop(ctx, args)
    except PlacerError as exc:  # every rank meets it (a checkpoint that does not fit the plan)
        sys.stderr.write(f"launch.py: refused: {exc}\n")
        return 2
    if ctx.world.rank == 0:
        Path(args.metrics).write_text(json.dumps(metrics, indent=1) + "\n")
        Path(args.run_record).write_text(json.dumps(run, indent=1) + "\n")
    # what the run leaves in reference cycles (the runner, DTensor's collective handles) goes while the
    # process groups and the interpreter are alive: a gloo work object freed at interpreter finalization
    # can abort the process after a finished run ("terminate called without an active exception")
    del metrics, run
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return 0


def freeze_imports() -> None:
    """Take what the interpreter and the imports made out of the collector's generations (``gc.freeze``).

    The setup's and the steps' full collections (:func:`~launcher.runtime.loop.settle_memory`'s
    included) then scan only what the run makes: a full collection of a rank's imports (about 380,000
    objects) takes 0.17 s on a 2-core host, about nothing once they are frozen.  What is frozen is
    never collected; it is the modules and what they hold, which live as long as the process.
    """
    gc.collect()
    gc.freeze()


def prepare(bundle: Path, args: argparse.Namespace, reference: Rebuilt | None = None) -> LaunchContext:
    """Everything checked before any work: world size, model structure, ops, devices.

    ``reference``: the model already rebuilt from the same source (a process that runs several
    bundles of one model rebuilds it once); it is checked against this bundle's graph all the same.
    """
    check_args(args)
    manifest: dict[str, Any] = json.loads((bundle / "manifest.json").read_text())
    plan = load_plan(bundle / "plan.json")
    graph = load_graph(bundle / "graph.json")
    devices = manifest["devices"]
    if tensor_parallel_degree(plan) > 1 and (args.save or args.resume):
        raise InvalidInput("--save / --resume: checkpoints of tensor-parallel stages are not written or read (the "
                           "stage's shards would share one folder)", field="save")
    check_world_size(len(devices))
    stage_of = op_stage(graph, plan)
    host = args.host or _only_host(devices)
    device = export_device(graph.attrs)
    if device == "cuda":
        select_gpu(devices, host)
    if reference is None:
        reference = rebuild(manifest["source"], device=device)
    check_structure(reference, manifest["graph_structure_digest"], granularity_depth(graph), graph)
    encoded: list[tuple[str, torch.dtype, int, int]] = []
    if plan_kind(plan) == "throughput":
        crossings = crossing_values(reference.module, assign_stages(reference.module, stage_of), len(plan.stages))
        encoded = encoded_crossings(plan, crossings, backward=not args.inference, forced=args.encode_non_float)
    seeded = reference.seeded
    if seeded is None:
        raise AssertionError("the reference model was rebuilt without its construction log")
    weights: WeightSource = FileWeights(args.weights, seeded) if args.weights else SeededWeights(seeded)
    start_process_group()
    world = locate(devices, host)
    if encoded and world.rank == 0:
        sys.stderr.write(f"launch.py: {encoding_note(encoded, forced=args.encode_non_float)}\n")
    specs = [InputSpec.from_dict(s) for s in manifest.get("inputs") or []]
    data = load_data(args.data, specs, reference.weights)
    autocast = args.autocast == "bf16" or (args.autocast == "auto" and world.torch_device.type == "cuda"
                                           and torch.cuda.is_bf16_supported())
    return LaunchContext(plan, graph, manifest, world, reference, stage_of, data, weights, device, autocast,
                         bucket_bytes=int(args.bucket_mib * 2**20), encode_non_float=bool(encoded))


def check_args(args: argparse.Namespace) -> None:
    """Refuse options that cannot work, before any model work (the message names the option)."""
    optimizer_class(args.optimizer)
    optimizer_kwargs(args.optimizer_arg)
    if args.accumulate < 1 or args.steps < 0:
        raise InvalidInput(f"--accumulate {args.accumulate} / --steps {args.steps}: expected >= 1 / >= 0",
                           field="accumulate")
    if not args.bucket_mib > 0:
        raise InvalidInput(f"--bucket-mib {args.bucket_mib}: expected > 0", field="bucket_mib")
    if args.profile_steps < 0 or args.warmup + args.profile_steps > max(args.steps, args.warmup):
        raise InvalidInput(f"--profile-steps {args.profile_steps}: expected between 0 and --steps - --warmup "
                           f"({args.steps} - {args.warmup})", field="profile_steps")


def _only_host(devices: Sequence[dict[str, Any]]) -> str:
    names = sorted({str(d["host"]) for d in devices})
    if len(names) > 1:
        raise InvalidInput(f"the plan spans hosts {names}: give --host (see README.md)", field="host")
    return names[0]
