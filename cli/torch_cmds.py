"""Commands that read a PyTorch model or cluster: extract, profile, measure-topology.

They need the ``torch`` extra; without it they exit 2 with a message naming it.  Nothing is
written unless the whole command succeeds.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from cli._output import EXIT_OK, format_seconds, print_json
from solvers.model.errors import InvalidInput


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("extract", help="export a PyTorch model to an op graph with estimated times")
    _add_model_args(p)
    p.add_argument("--batch", type=int, help="batch size (the leading dimension of every input)")
    p.add_argument("--device-kind", default="H100", help="device of the roofline estimate: H100, A100, V100, cpu")
    p.add_argument("--granularity", default="op", help="op (default), module or module:DEPTH")
    p.set_defaults(func=cmd_extract)
    p = sub.add_parser("profile", help="extract a PyTorch model and measure each op's time with the profiler")
    _add_model_args(p)
    p.add_argument("--batch", type=int, nargs="+", help="batch sizes; several write one graph each")
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    p.add_argument("--repeats", type=int, default=5, help="profiled steps (median)")
    p.add_argument("--warmup", type=int, default=2, help="steps run first and dropped")
    p.add_argument("--threads", type=int, help="torch CPU threads (torch.set_num_threads)")
    p.add_argument("--granularity", default="op", help="op (default), module or module:DEPTH")
    p.set_defaults(func=cmd_profile)
    p = sub.add_parser("measure-topology", help="measure devices and links of a torchrun job (run under torchrun)")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--name", default="measured")
    p.add_argument("--min-bytes", type=int, default=4096)
    p.add_argument("--max-bytes", type=int, default=256 * 2**20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_measure)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", metavar="SPEC", help="package.module:callable returning a module "
                                                           "(and inputs)")
    p.add_argument("--example", help="built-in model: bert, gpt2, llama, t5, vit, resnet, swin")
    p.add_argument("--param", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="example sizes, e.g. layers=24 hidden=1024 heads=16 seq=512")
    p.add_argument("--input", action="append", default=[], metavar="NAME=SHAPE[:DTYPE]",
                   help="an input of a SPEC that returns only a module, e.g. input_ids=8x512:int64")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs")
    p.add_argument("--name", help="graph name (default: the example or callable name)")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--json", action="store_true")


def _source(args: argparse.Namespace, batch: int | None) -> dict[str, Any]:
    from extract import require_torch

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
    from extract.granularity import merge_modules, parse_granularity
    from solvers.model.documents import write_json

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

    from extract.granularity import merge_modules, parse_granularity
    from extract.profile import profile
    from solvers.model.documents import write_json

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


def cmd_measure(args: argparse.Namespace) -> int:
    from extract import require_torch

    require_torch("placer measure-topology")
    from extract.measure import measure
    from solvers.model.documents import write_json

    topo = measure(args.min_bytes, args.max_bytes, args.repeats, args.name)
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
