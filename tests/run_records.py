"""Run records (``placer.run/v1``) made for a plan without running it, for the tests of what reads them
(the service, the dashboard, ``placer simulate --compare``); tests/launcher/test_run_record.py runs one for real."""

from __future__ import annotations

from typing import Any

import numpy as np

from solvers.calibration import Calibration, apply_calibration
from solvers.cost.backward_split import weight_grad_fraction
from solvers.cost.calibrated import split_backward_factor
from solvers.cost.comm import transfer_pairs, transfer_s
from solvers.cost.compute import ComputeModel
from solvers.cost.traffic import group_traffic_bytes
from solvers.model.canonical import digest
from solvers.model.graph import OpGraph
from solvers.model.plan import plan_from_document
from solvers.model.problem import Problem
from solvers.model.run import RankRecord, RunRecord, Transfer, run_summary
from solvers.model.topology import Topology
from solvers.partition.schedule_estimates import SPLIT_BACKWARD
from solvers.simulator import simulate
from solvers.validity import resolve_plan


def synthetic_run(plan_doc: dict[str, Any], iteration_s: float = 0.02) -> dict[str, Any]:
    """A run record of ``plan_doc`` as launch.py writes it: one rank per device, two profiled micro-batches."""
    plan = plan_from_document(plan_doc)
    ranks = [RankRecord(rank=r, device=d, stage=s, replica=k, hostname="h0", iterations_s=(iteration_s,) * 2,
                        memory={"peak_allocated_bytes": None, "peak_reserved_bytes": None,
                                "peak_resident_bytes": 2**28 + r},
                        profiled_steps=(1,), forward_s=(0.001 * (s + 1),) * 2, backward_s=(0.002,) * 2)
             for r, (s, k, d) in enumerate((s, k, d) for s, st in enumerate(plan.stages)
                                           for k, d in enumerate(st.devices))]
    run = RunRecord(plan_digest=digest(plan.to_document()), graph_digest=str(plan.graph_digest),
                    topology_digest=plan.topology_digest, solver=plan.solver, kind="throughput", mode="training",
                    micro_batches=plan.micro_batches, schedule=plan.schedule, steps=2, warmup=0, profile_steps=1,
                    rows_per_iteration=8, environment={"device_kind": "cpu", "world_size": len(ranks)},
                    iterations_s=(iteration_s,) * 2, ranks=tuple(ranks),
                    summary=run_summary(ranks, len(plan.stages), 0))
    return run.to_document()


def calibrated_run(plan_doc: dict[str, Any], graph: OpGraph, topology: Topology, truth: Calibration,
                   jitter: float = 0.0, seed: int = 0) -> dict[str, Any]:
    """A run record of ``plan_doc`` as a machine whose true cost model is ``truth`` would measure it.

    Every figure comes from the simulator on the graph and topology calibrated by ``truth``: the
    iteration (``iteration_s``), each stage's forward and backward per micro-batch, each send's duration
    (latency + bytes / bandwidth of its channel) and each rank's peak memory; ``jitter`` multiplies each
    figure by ``1 + jitter * N(0, 1)`` (seeded), each transfer by ``1 + jitter * |N(0, 1)|`` (a recorded
    transfer includes waiting for its peer).  A rank per device; one that holds several (virtual) stages
    tags its entries with their stages, and a zero-bubble schedule records each backward as its input and
    weight gradient parts, each ``truth.split_backward`` times its share of the backward run whole.
    """
    rng = np.random.default_rng(seed)

    def noisy(x: float) -> float:
        return float(x * (1.0 + jitter * rng.standard_normal())) if jitter else float(x)

    def waited(x: float) -> float:  # a recorded transfer also waits for its peer: never shorter than the transfer
        return float(x * (1.0 + jitter * abs(rng.standard_normal()))) if jitter else float(x)

    plan = plan_from_document(plan_doc)
    g, t = apply_calibration(graph, topology, truth)
    problem = Problem(g, t)
    rp = resolve_plan(problem, plan)
    metrics = simulate(problem, plan).metrics
    compute = ComputeModel(g, t)
    sends: dict[int, list[Transfer]] = {}
    for (a, b), size in group_traffic_bytes(g, rp.stage_of).items():
        for phase, (src, dst) in (("forward", (a, b)), ("backward", (b, a))):
            for x, y, share in transfer_pairs(rp.stage_devices[src], rp.stage_devices[dst], size):
                sends.setdefault(x, []).append(Transfer("send", 1, 0.0, waited(transfer_s(t, x, y, share)),
                                                        int(share), phase))
    share = weight_grad_fraction(g)
    split = plan.schedule in SPLIT_BACKWARD
    held: dict[int, list[tuple[int, int, float, float, float]]] = {}  # device -> (stage, replica, f, i, w)
    for s, (ops, devs) in enumerate(zip(rp.stage_ops, rp.stage_devices, strict=True)):
        f = float(compute.group_fwd_s(devs)[ops].sum())
        whole = compute.group_bwd_s(devs)[ops]
        b = float(whole.sum()) + (f if plan.recompute else 0.0)
        w = float((whole * share[ops]).sum())
        for k, d in enumerate(devs):
            held.setdefault(d, []).append((s, k, f, b - w, w))
    ranks = []
    for d, stages in held.items():  # a rank per device; one holding several stages tags each entry
        dev = t.devices[d].id
        fwd, bwd, fwd_of, bwd_of = [], [], [], []
        for s, _, f, i, w in stages:
            k = split_backward_factor(t, t.devices[d].kind) if split else 1.0
            for _ in range(2):  # two profiled micro-batches
                fwd.append(noisy(f))
                fwd_of.append(s)
                parts = (i * k, w * k) if split else (i + w,)
                bwd.extend(noisy(x) for x in parts)
                bwd_of.extend([s] * len(parts))
        several = len(stages) > 1 or split
        ranks.append(RankRecord(
            rank=len(ranks), device=dev, stage=stages[0][0], replica=stages[0][1], hostname=t.devices[d].node,
            iterations_s=(noisy(metrics["iteration_s"]),) * 3,
            memory={"peak_allocated_bytes": None, "peak_reserved_bytes": None,
                    "peak_resident_bytes": int(noisy(metrics["peak_memory_bytes"][dev]))},
            profiled_steps=(1,), forward_s=tuple(fwd), backward_s=tuple(bwd),
            transfers=tuple(sends.get(d, ())), forward_stages=tuple(fwd_of) if several else (),
            backward_stages=tuple(bwd_of) if several else ()))
    run = RunRecord(plan_digest=digest(plan.to_document()), graph_digest=graph.digest,
                    topology_digest=topology.digest, solver=plan.solver, kind="throughput", mode="training",
                    micro_batches=plan.micro_batches, schedule=plan.schedule, steps=3, warmup=0, profile_steps=1,
                    rows_per_iteration=plan.micro_batches * graph.profiled_batch_size,
                    environment={"device_kind": t.devices[0].kind, "world_size": len(ranks)},
                    iterations_s=(metrics["iteration_s"],) * 3, ranks=tuple(ranks),
                    summary=run_summary(ranks, len(plan.stages), 0))
    return run.to_document()


def calibrated_latency_run(plan_doc: dict[str, Any], graph: OpGraph, topology: Topology, truth: Calibration,
                           jitter: float = 0.0, seed: int = 0) -> dict[str, Any]:
    """A run record of the latency (op-level) plan ``plan_doc`` in training, as a machine whose true cost model
    is ``truth`` would measure it: the iteration is the simulator's training pass on the calibrated graph and
    topology (times ``1 + jitter * N(0, 1)``, seeded), each rank's peak its device's; like the launcher's
    dataflow runner, it records no stage ranges and no transfers."""
    rng = np.random.default_rng(seed)
    plan = plan_from_document(plan_doc)
    g, t = apply_calibration(graph, topology, truth)
    metrics = simulate(Problem(g, t, "latency").with_settings(pass_="training"), plan).metrics
    iteration_s = float(metrics["iteration_s"] * (1.0 + jitter * rng.standard_normal())) if jitter else \
        float(metrics["iteration_s"])
    ranks = [RankRecord(rank=r, device=d, stage=s, replica=0, hostname=t.devices[t.index[d]].node,
                        iterations_s=(iteration_s,) * 3,
                        memory={"peak_allocated_bytes": None, "peak_reserved_bytes": None,
                                "peak_resident_bytes": int(metrics["peak_memory_bytes"][d])},
                        profiled_steps=(1,))
             for r, (s, d) in enumerate((s, st.devices[0]) for s, st in enumerate(plan.stages))]
    run = RunRecord(plan_digest=digest(plan.to_document()), graph_digest=graph.digest,
                    topology_digest=topology.digest, solver=plan.solver, kind="latency", mode="training",
                    micro_batches=1, schedule=plan.schedule, steps=3, warmup=0, profile_steps=1,
                    rows_per_iteration=graph.profiled_batch_size,
                    environment={"device_kind": t.devices[0].kind, "world_size": len(ranks)},
                    iterations_s=(iteration_s,) * 3, ranks=tuple(ranks), summary=run_summary(ranks, len(plan.stages), 0))
    return run.to_document()
