"""Parmesan solve time: BERT-48 on 4 x DGX-1, and mapping a 512-device (16 x 32) instance.

``.venv/bin/python -m bench.bench_parmesan_scale [--repeats 3] [--map-limit 120]``

1. The full ``parmesan`` flow (clustering for three alphas, DP, refinement, (S, R) search with
   the simulator, Alg. 1 mapping) on a BERT-48-like op-level graph (Table VIII: 48 layers,
   hidden 1024, 16 heads, sequence 512, micro-batch 8; per-head attention ops) onto 4 DGX-1
   boxes (32 V100), micro-batches 4, recomputation on.  Paper: about 8 minutes per flow on
   average; target here <= 30 s.
2. Alg. 1 alone (as the solver runs it, no guard) for S = 16, R = 32 (512 devices) on a
   random_blk_2 topology (32 nodes) and on an 8 x 8 x 8 3-D torus, the paper's instantiations
   and the combined objective (``--modes m,ar,combined``); the partition comes from
   ``parmesan`` with the CS mapper.  Target <= 120 s; time, status and gap (objective - proven
   lower bound) / objective are printed, and for ``combined`` the simulated iteration of the
   mapping beside CS's.
3. ``--part parallel``: Alg. 1 with one process and with two worker processes (two targets per
   round) under the same 10 s limit, on three instances.
4. ``--part share``: the whole ``parmesan`` call (S and R searched, safety net on) under a 20 s
   limit on SemanticFPN with two topologies whose mapping does not prove optimality early:
   wall-clock time, plan, mapping status and gap, where the plan came from and the safety net's
   time (``stats.guard_s``) — how the time is shared between search, safety net and mapping.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.bench_parmesan_mapping import semantic_fpn
from solvers.generate import generate_graph, generate_topology
from solvers.mapping.apply import MappingSettings, StagePartition, map_partition
from solvers.mapping.binary import BisectOptions, map_stages
from solvers.mapping.stage_graph import stage_graph
from solvers.model.problem import Problem, ProblemSettings
from solvers.solving import solve
from solvers.validity import resolve_plan


def bert48_flow(repeats: int) -> None:
    graph = generate_graph("transformer", layers=48, hidden=1024, heads=16, seq_len=512, micro_batch=8,
                           granularity="head")
    topo = generate_topology("dgx1", boxes=4)
    problem = Problem(graph, topo, "throughput", ProblemSettings(micro_batches=(4,), recompute=True))
    times = []
    for _ in range(repeats):
        started = time.monotonic()
        plan = solve(problem, "parmesan")
        times.append(time.monotonic() - started)
    st = plan.stats
    print(f"BERT-48 ({graph.n_ops} ops, {len(graph.edges)} edges) on 4 x DGX-1: median {statistics.median(times):.1f} s "
          f"over {repeats} runs ({', '.join(f'{t:.1f}' for t in times)}); chose S={st['stages']} R={st['replicas']} "
          f"alpha={st['alpha']} K={st['k']}; mapping {st.get('mapping_status')} gap {st.get('mapping_gap', 0):.4f}; "
          f"iteration {plan.claimed_objective_s:.3f} s")


def big_mapping(map_limit_s: float, modes: list[str]) -> None:
    graph = semantic_fpn()
    for name, topo in [("random_blk_2", generate_topology("random_blk_2", devices=512, nodes=32, seed=0)),
                       ("torus3d 8x8x8", generate_topology("torus3d", nx=8, ny=8, nz=8, device="V100"))]:
        problem = Problem(graph, topo, "throughput", ProblemSettings(stages=16, replicas=32, recompute=True, micro_batches=(4,)))
        plan = solve(problem, "parmesan", {"mapping": "consecutive"})
        stage_of = resolve_plan(problem, plan).stage_of
        sg = stage_graph(problem, stage_of, 16, 32)
        if "combined" in modes:
            started = time.monotonic()
            _, value, st = map_partition(problem, StagePartition(stage_of, 16, 32, plan.micro_batches), "parmesan",
                                         MappingSettings("combined", ensemble_heuristics=False), started + map_limit_s)
            print(f"512 devices {name}, (16,32), combined: {time.monotonic() - started:.1f} s, status "
                  f"{st['mapping_status']}, gap {st['mapping_gap']:.3f}, objective {st['mapping_objective_s']:.4g} s, "
                  f"bound {st['mapping_lower_bound_s']:.4g} s, start {st['mapping_initial_upper_bound_s']:.4g} s "
                  f"({st['mapping_upper_bound_from']}); simulated {value:.4g} s, CS {plan.claimed_objective_s:.4g} s",
                  flush=True)
        for mode in [m for m in ("m", "ar") if m in modes]:
            started = time.monotonic()
            res = map_stages(sg, topo, mode, BisectOptions(started + map_limit_s), guard=False)
            took = time.monotonic() - started
            print(f"512 devices {name}, (16,32), c^{mode}: {took:.1f} s, status {res.status}, gap {res.gap:.3f}, "
                  f"objective {res.objective_s:.4g} s, bound {res.lower_bound_s:.4g} s, "
                  f"start {res.stats['initial_upper_bound_s']:.4g} s ({res.stats['upper_bound_from']}), "
                  f"{res.stats['searches']} searches, {res.stats['search_nodes']} nodes, "
                  f"{res.stats['timeouts']} timed out", flush=True)


def parallel_targets(limit_s: float) -> None:
    """Alg. 1 with one process vs two worker processes (2 targets per round) under the same limit."""
    from bench.bench_parmesan_mapping import topology

    graph = semantic_fpn()
    for kind, s, r in [("uniform_dist", 8, 8), ("random_blk_2", 16, 4), ("mesh2d", 4, 64)]:
        topo = topology(kind, s * r)
        assert topo is not None
        problem = Problem(graph, topo, "throughput", ProblemSettings(stages=s, replicas=r, recompute=True, micro_batches=(4,)))
        plan = solve(problem, "parmesan", {"mapping": "consecutive"})
        sg = stage_graph(problem, resolve_plan(problem, plan).stage_of, s, r)
        for workers in (1, 2):
            started = time.monotonic()
            res = map_stages(sg, topo, "m", BisectOptions(started + limit_s, workers=workers, parallel_targets=2),
                             guard=False)
            print(f"{kind} ({s},{r}) c^m workers={workers}: {time.monotonic() - started:.1f} s, {res.status}, "
                  f"gap {res.gap:.4f}, objective {res.objective_s:.5g}, {res.stats['searches']} searches, "
                  f"{res.stats['search_nodes']} nodes", flush=True)


def time_shares(limit_s: float = 20.0) -> None:
    graph = semantic_fpn()
    for kind, topo in [("uniform_dist 64", generate_topology("uniform_dist", devices=64, seed=0)),
                       ("random_blk_2 64", generate_topology("random_blk_2", devices=64, nodes=4, seed=0))]:
        problem = Problem(graph, topo, "throughput", ProblemSettings(recompute=True, micro_batches=(4,)))
        started = time.monotonic()
        plan = solve(problem, "parmesan", time_limit_s=limit_s)
        st = plan.stats
        guard = st.get("guard_s")
        print(f"{kind}, limit {limit_s:g} s: {time.monotonic() - started:.1f} s, iteration "
              f"{plan.claimed_objective_s:.5f} s, S={st['stages']} R={st['replicas']}, mapping "
              f"{st.get('mapping_status')} gap {st.get('mapping_gap', float('nan')):.3f}, from "
              f"{st.get('partition_source')}, safety net {'n/a' if guard is None else f'{guard:.2f} s'}; simulated "
              + ", ".join(f"{k} {v:.5f}" for k, v in st.get("guard_keys_s", {}).items() if v is not None),
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--map-limit", type=float, default=120.0)
    parser.add_argument("--part", choices=["all", "bert48", "map512", "parallel", "share"], default="all")
    parser.add_argument("--modes", default="m,ar,combined", help="map512: mapping objectives to run")
    args = parser.parse_args()
    if args.part in ("all", "bert48"):
        bert48_flow(args.repeats)
    if args.part in ("all", "map512"):
        big_mapping(args.map_limit, args.modes.split(","))
    if args.part in ("all", "parallel"):
        parallel_targets(10.0)
    if args.part in ("all", "share"):
        time_shares()


if __name__ == "__main__":
    main()
