"""The throughput search with and without tensor parallelism: solve time and plan (docs/tensor-parallel.md).

``.venv/bin/python -m bench.bench_tp_search [--layers 24 48] [--solvers exact pipedream] [--time-limit S]``

A GPT op graph (``placer graph generate transformer --causal true``, hidden 2048, 16 heads,
sequence 1024, micro-batch 4, timed for an H100) whose modules carry Megatron-LM's names
(``attn.c_attn`` / ``attn.c_proj``, ``mlp.c_fc`` / ``mlp.c_proj``, ``transformer.wte``), so that
the split rules of :mod:`solvers.model.tp_rules` find every column/row pair, on 4 hosts of 8
H100 (NVLink 300 GB/s inside a host, 25 GB/s between hosts), 16 micro-batches an iteration.
Each solver runs with ``max_tp`` 1 (the search without tensor parallelism) and 8 (degrees 1, 2,
4, 8), within ``--time-limit``: the wall time of the solve, the simulated iteration, and the
plan's stages, replicas and degree.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

from solvers import generate_graph, generate_topology, solve
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem, ProblemSettings

# generated op id suffix -> Megatron-LM / GPT-2 module name the split rules match
RENAMES = {".attn.qkv": ".attn.c_attn", ".attn.dense": ".attn.c_proj", ".mlp.fc_up": ".mlp.c_fc",
           ".mlp.fc_down": ".mlp.c_proj"}


def megatron_gpt(layers: int) -> OpGraph:
    """The generated GPT with its linear layers and token embedding under Megatron's module names."""
    graph = generate_graph("transformer", layers=layers, causal=True, hidden=2048, heads=16, seq_len=1024,
                           micro_batch=4, vocab=50257, device="H100")
    return with_megatron_names(graph, f"gpt-{layers}")


def with_megatron_names(graph: OpGraph, name: str) -> OpGraph:
    """``graph`` (a generated transformer) with its linear layers and token embedding under Megatron's
    module names (:data:`RENAMES`), which the tensor-parallel split rules match."""
    nodes = []
    for node in graph.nodes:
        layer = node.layer
        for suffix, module in RENAMES.items():
            if node.id.endswith(suffix):
                layer = node.id.removesuffix(suffix) + module
        if node.id == "transformer.wte":
            layer = "transformer.wte"
        nodes.append(dataclasses.replace(node, layer=layer))
    return OpGraph.build(name, nodes, list(graph.edges), profiled_batch_size=graph.profiled_batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[24, 48])
    parser.add_argument("--solvers", nargs="+", default=["exact", "pipedream"])
    parser.add_argument("--time-limit", type=float, default=60.0)
    args = parser.parse_args()
    topo = generate_topology("hierarchical", nodes=4, gpus_per_node=8, device="H100", intra_bandwidth_GBps=300.0,
                             inter_bandwidth_GBps=25.0)
    print(f"load average {os.getloadavg()[0]:.2f}; 4 x 8 H100, 16 micro-batches, limit {args.time_limit:g} s")
    print(f"{'graph':10} {'solver':10} {'max_tp':>6} {'solve s':>8} {'iteration ms':>13}  stages (ops, devices, tp)")
    for layers in args.layers:
        graph = megatron_gpt(layers)
        for solver in args.solvers:
            for max_tp in (1, 8):
                problem = Problem(graph, topo, settings=ProblemSettings(micro_batches=(16,), max_tp=max_tp))
                started = time.perf_counter()
                plan = solve(problem, solver, time_limit_s=args.time_limit)
                took = time.perf_counter() - started
                shape = sorted({(len(s.devices) // s.tp, s.tp) for s in plan.stages})
                print(f"{graph.name:10} {solver:10} {max_tp:>6} {took:>8.1f} {1e3 * plan.metrics['objective_s']:>13.2f}  "
                      f"{len(plan.stages)} stages, (R, tp) {shape}, {plan.status}")


if __name__ == "__main__":
    main()
