"""Commands that read a PyTorch model or cluster: ``placer extract``, ``placer profile`` and
``placer topology measure``.

They need the ``torch`` extra; without it they exit 2 with a message naming it.  Nothing is
written unless the whole command succeeds.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from cli._output import EXIT_OK, format_seconds, print_json
from cli._parsers import Commands, command
from extract import require_torch
from extract.granularity import merge_modules, parse_granularity
from solvers.model.documents import write_json
from solvers.model.errors import InvalidInput

LAUNCHER_RUNTIME = "launcher.runtime.main"  # what a launched rank imports: its base_memory_bytes counts it
TORCHRUN = "python -m torch.distributed.run"
TORCH_NOTE = ("Needs the torch extra (pip install 'placer[torch]'); without it the command exits 2 naming it. "
              "Nothing is written unless the whole command succeeds.")


def register(sub: Commands[argparse.ArgumentParser]) -> None:
    """``placer extract`` and ``placer profile``."""
    p = command(sub, "extract", "export a PyTorch model to an op graph with estimated times",
                ["placer extract --example bert --param layers=24 hidden=1024 heads=16 seq=512 --batch 8 -o bert.json",
                 "placer extract mypkg.models:make_model --input input_ids=8x512:int64 -o model.json"],
                description="Export the model with torch.export into an op graph whose times are a roofline "
                            "estimate. " + TORCH_NOTE)
    _add_model_args(p)
    p.add_argument("--batch", type=int, help="batch size (the leading dimension of every input)")
    p.add_argument("--device-kind", default="H100", help="device of the roofline estimate: H100, A100, V100, cpu")
    p.add_argument("--granularity", default="op", help="op (default), module or module:DEPTH")
    p.set_defaults(func=cmd_extract)
    p = command(sub, "profile", "extract a PyTorch model and measure each op's time with the profiler",
                ["placer profile mypkg.models:make_model --batch 4 8 --device cuda -o profile.json"],
                description="Measure the op times with PyTorch's profiler; several batch sizes write OUT.b<N>.json "
                            "each, ready for `placer graph scale`. " + TORCH_NOTE)
    _add_model_args(p)
    p.add_argument("--batch", type=int, nargs="+", help="batch sizes; several write one graph each")
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    p.add_argument("--repeats", type=int, default=5, help="profiled steps (median)")
    p.add_argument("--warmup", type=int, default=2, help="steps run first and dropped")
    p.add_argument("--threads", type=int, help="torch CPU threads (torch.set_num_threads)")
    p.add_argument("--granularity", default="op", help="op (default), module or module:DEPTH")
    p.set_defaults(func=cmd_profile)


def add_measure_verb(group: Commands[argparse.ArgumentParser]) -> None:
    """``placer topology measure``, run under torchrun."""
    p = command(group, "measure", "measure devices and links of a torchrun job (run under torchrun)",
                [f"{TORCHRUN} --standalone --nproc-per-node 8 -m cli topology measure -o topo.json"],
                description="Started by torchrun on every node, write a measured placer.topology/v1: each "
                            "device's speed and every link's bandwidth and latency (docs/extract.md). "
                            + TORCH_NOTE)
    p.add_argument("-o", "--output", required=True, help="the topology file to write")
    p.add_argument("--name", default="measured", help="the topology's name (default: measured)")
    p.add_argument("--min-bytes", type=int, default=4096, help="the smallest message measured (default 4096)")
    p.add_argument("--max-bytes", type=int, default=256 * 2**20, help="the largest message measured (default 256 MiB)")
    p.add_argument("--repeats", type=int, default=5, help="timed transfers per size (median)")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="a module the training processes load (e.g. transformers), imported before each device's "
                        "base_memory_bytes is read, so that it counts there (repeatable)")
    model = p.add_argument_group("the model the processes will run (optional: its modules and export count in "
                                 "each device's base, as in a launched rank)")
    model.add_argument("--model", dest="spec", metavar="SPEC", help="package.module:callable, as for placer extract")
    _add_source_args(model)
    model.add_argument("--batch", type=int, help="the graph's batch size (default: the model's own)")
    p.add_argument("--json", action="store_true", help="print the output file, sizes and digest as JSON")
    p.set_defaults(func=cmd_measure)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", metavar="SPEC", help="package.module:callable returning a module "
                                                           "(and inputs)")
    _add_source_args(p)
    p.add_argument("--name", help="graph name (default: the example or callable name)")
    p.add_argument("-o", "--output", required=True, help="the graph file to write (placer.opgraph/v1)")
    p.add_argument("--json", action="store_true", help="print the output file, sizes, digest and times as JSON")


def _add_source_args(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The model flags besides SPEC that :func:`_source` reads: ``--example``, ``--param``, ``--input``, ``--seed``."""
    p.add_argument("--example", help="built-in model: bert, gpt2, llama, t5, vit, resnet, swin")
    p.add_argument("--param", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="example sizes, e.g. layers=24 hidden=1024 heads=16 seq=512")
    p.add_argument("--input", action="append", default=[], metavar="NAME=SHAPE[:DTYPE]",
                   help="an input of a SPEC that returns only a module, e.g. input_ids=8x512:int64")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs")


def _source(args: argparse.Namespace, batch: int | None) -> dict[str, Any]:
    require_torch(f"placer {args.command}", transformers=bool(args.example))
    from extract.build import example_source, spec_source
    from extract.source import parse_input

    if bool(args.spec) == bool(args.example):
        raise InvalidInput("give either SPEC (package.module:callable) or --example NAME", field="spec")
    if args.example:
        if args.input:
            raise InvalidInput("--input is for a SPEC; examples make their own inputs", field="input")
        params = {}
        for pair in args.param:
            key, eq, value = pair.partition("=")
            if not eq or not key:
                raise InvalidInput(f"--param {pair!r}: expected KEY=VALUE", field="param")
            params[key] = value
        return example_source(args.example, params, batch, args.seed)
    if args.param:
        raise InvalidInput("--param is for --example; a SPEC builds its own model", field="param")
    return spec_source(args.spec, [parse_input(t) for t in args.input], batch, args.seed)


def cmd_extract(args: argparse.Namespace) -> int:
    source = _source(args, args.batch)
    from extract.extract import extract

    depth = parse_granularity(args.granularity)
    graph = extract(source, args.device_kind, args.name)
    if depth is not None:
        graph = merge_modules(graph, depth)
    write_json(graph.to_document(), args.output)
    _report(args, graph, args.output)
    return EXIT_OK


def cmd_profile(args: argparse.Namespace) -> int:
    batches = args.batch or [None]
    sources = [_source(args, b) for b in batches]
    import torch

    from extract.profile import profile

    depth = parse_granularity(args.granularity)
    if args.threads:
        torch.set_num_threads(args.threads)
    outputs = [_batch_path(args.output, b) if len(batches) > 1 else args.output for b in batches]
    graphs = []
    for source in sources:
        graph = profile(source, args.device, args.repeats, args.warmup, args.name)
        graphs.append(merge_modules(graph, depth) if depth is not None else graph)
    for graph, path in zip(graphs, outputs, strict=True):
        write_json(graph.to_document(), path)
        _report(args, graph, path)
    return EXIT_OK


def _batch_path(path: str, batch: int | None) -> str:
    root, ext = os.path.splitext(path)
    if ext == ".gz":
        root, inner = os.path.splitext(root)
        ext = inner + ext
    return f"{root}.b{batch}{ext}"


def _report(args: argparse.Namespace, graph: Any, path: str) -> None:
    info = {"output": path, "name": graph.name, "nodes": graph.n_ops, "edges": len(graph.edges),
            "digest": graph.digest, "profiled_batch_size": graph.profiled_batch_size,
            "param_bytes": float(graph.param_bytes.sum()), "fwd_s": float(graph.fwd_s.sum()),
            "bwd_s": float(graph.bwd_s.sum())}
    if args.json:
        print_json(info)
    else:
        print(f"wrote {path}: {graph.n_ops} ops, {len(graph.edges)} edges, batch {graph.profiled_batch_size}, "
              f"forward {format_seconds(info['fwd_s'])}, backward {format_seconds(info['bwd_s'])}")
    for line in (graph.attrs or {}).get("adjusted") or []:
        print(f"  changed: {line}")


def cmd_measure(args: argparse.Namespace) -> int:
    require_torch("placer topology measure")
    source = _source(args, args.batch) if args.spec or args.example else None
    from extract.measure import measure
    from launcher.runtime.model import rebuild

    # the launcher's own modules count in every rank's base, as they do in a launched rank; with a
    # model, so do its modules and its export, which a launched rank keeps while it trains (docs/extract.md)
    topo = measure(args.min_bytes, args.max_bytes, args.repeats, args.name,
                   imports=[LAUNCHER_RUNTIME, *args.imports],
                   model=None if source is None else (lambda: rebuild(source)))
    if topo is None:
        return EXIT_OK
    write_json(topo.to_document(), args.output)
    if args.json:
        print_json({"output": args.output, "devices": topo.n_devices, "links": len(topo.links or ()),
                    "hosts": len(topo.hosts), "digest": topo.digest})
    else:
        print(f"wrote {args.output}: {topo.n_devices} devices on {len(topo.hosts)} hosts, "
              f"{len(topo.links or ())} measured links")
    return EXIT_OK
