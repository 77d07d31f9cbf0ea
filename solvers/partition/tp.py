"""The tensor-parallel degrees a throughput search tries, and the device groups that run them.

A stage of degree ``t`` with ``R`` replicas runs on ``R`` tensor-parallel groups of ``t`` devices
(docs/tensor-parallel.md, "Search").  :func:`tp_degrees` lists the degrees: ``settings.tp`` when
fixed, else the powers of two ``1, 2, 4, ...`` up to ``settings.max_tp``, the device count and, with
``settings.tp_within_host``, the largest host; only ``1`` when the graph has no op a group would
split (the rules of :mod:`solvers.model.tp_rules`), or when the schedule needs the action-list engine,
which times no split stage.  Megatron-LM keeps ``t`` within a host, where NVLink joins the GPUs
(Narayanan et al., SC'21, §3.3, Takeaway #1: tensor parallelism up to the GPUs of one server).

:func:`tp_groups` forms the groups of one degree on the measured topology: the devices of one kind
on one host (or, where the host has too few and groups may span hosts, the leftovers of one kind),
each group grown greedily along the widest channel from its last member, so that a group sits on the
widest links there are and its ring's slowest hop is as fast as the greedy chain finds.  A solver
then places stages on groups as it placed them on devices (:func:`expand_groups`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.cost.calibrated import tp_efficiency
from solvers.cost.comm import ring_hop_s
from solvers.cost.compute import ComputeModel
from solvers.cost.tensor_parallel import layout_of
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.model.settings import ONE_STAGE_PER_RANK
from solvers.model.topology import Device, Topology


def tp_degrees(problem: Problem) -> tuple[int, ...]:
    """The tensor-parallel degrees to search for ``problem`` (module doc), ascending, ``1`` first."""
    s = problem.settings
    if s.tp is not None:
        return (s.tp,)
    if problem.objective != "throughput" or s.schedule not in (*ONE_STAGE_PER_RANK, "auto"):
        return (1,)
    if not layout_of(problem.graph).split_mask(False).any():
        return (1,)
    topo = problem.topology
    most = min(s.max_tp, topo.n_devices)
    if s.tp_within_host:
        most = min(most, max(sum(1 for d in topo.devices if d.node == h) for h in topo.hosts))
    out = [1]
    while 2 * out[-1] <= most:
        out.append(2 * out[-1])
    return tuple(out)


def _widest_chain(topology: Topology, pool: list[int], size: int) -> list[int]:
    """``size`` devices of ``pool``: its first, then repeatedly the device joined to the last one by the
    widest channel (ties: the most bandwidth to the whole group, then the lowest index)."""
    bw = topology.bandwidth_Bps
    group = [pool[0]]
    rest = pool[1:]
    while len(group) < size:
        last = group[-1]
        nxt = max(rest, key=lambda d: (float(bw[last, d]), sum(float(bw[g, d]) for g in group), -d))
        group.append(nxt)
        rest.remove(nxt)
    return group


def tp_groups(topology: Topology, t: int, within_host: bool = True) -> list[list[int]]:
    """Disjoint groups of ``t`` device indices, each of one device kind (module doc), in the order of
    their first device; every device when ``t = 1``.  Devices that complete no group stay out."""
    if t == 1:
        return [[d] for d in range(topology.n_devices)]
    buckets: dict[tuple[str, str], list[int]] = {}
    for d, dev in enumerate(topology.devices):
        buckets.setdefault((dev.node, dev.kind), []).append(d)
    groups: list[list[int]] = []
    leftover: dict[str, list[int]] = {}
    for (_, kind), pool in buckets.items():
        pool = list(pool)
        while len(pool) >= t:
            group = _widest_chain(topology, pool, t)
            groups.append(group)
            pool = [d for d in pool if d not in group]
        leftover.setdefault(kind, []).extend(pool)
    if not within_host:
        for pool in leftover.values():
            pool = sorted(pool)
            while len(pool) >= t:
                group = _widest_chain(topology, pool, t)
                groups.append(group)
                pool = [d for d in pool if d not in group]
    return sorted(groups, key=lambda g: min(g))


def allocate_mixed_groups(topology: Topology, degrees: list[int], replicas: int,
                          within_host: bool = True) -> list[list[list[int]]] | None:
    """Per stage ``s``, its ``replicas`` disjoint groups of ``degrees[s]`` devices each (a plan whose stages
    have different tensor-parallel degrees), or ``None`` when the topology cannot hold them all.

    The widest groups are taken first (a wide group needs a host with that many free devices of one kind,
    and leftovers of narrower groups would fragment them); each is grown along the widest channel from the
    lowest free device of the host with the fewest free devices that still holds it (:func:`tp_groups`'
    greedy chain), one device kind per group.  With ``within_host`` false a group that no host holds may
    take the leftovers of one kind across hosts.  A stage's replicas are then handed out in the order of
    their first device, stage by stage in order (stage ``s`` of one degree after stage ``s - 1`` of the
    same degree), so consecutive stages sit on consecutive devices where the degrees allow."""
    free: dict[tuple[str, str], list[int]] = {}
    for d, dev in enumerate(topology.devices):
        free.setdefault((dev.node, dev.kind), []).append(d)
    made: dict[int, list[list[int]]] = {}
    for t in sorted(set(degrees), reverse=True):
        need = replicas * sum(1 for x in degrees if x == t)
        got: list[list[int]] = []
        while len(got) < need:
            pools = [key for key, pool in free.items() if len(pool) >= t]
            if pools:
                key = min(pools, key=lambda k: (len(free[k]), free[k][0]))
                group = _widest_chain(topology, free[key], t)
                free[key] = [d for d in free[key] if d not in group]
            elif within_host or t == 1:
                return None
            else:
                kinds: dict[str, list[int]] = {}
                for (_, kind), pool in free.items():
                    kinds.setdefault(kind, []).extend(pool)
                wide = next((pool for _, pool in sorted(kinds.items()) if len(pool) >= t), None)
                if wide is None:
                    return None
                group = _widest_chain(topology, sorted(wide), t)
                for key in free:
                    free[key] = [d for d in free[key] if d not in group]
            got.append(group)
        made[t] = sorted(got, key=min)
    taken = {t: 0 for t in made}
    out = []
    for t in degrees:
        out.append(made[t][taken[t]:taken[t] + replicas])
        taken[t] += replicas
    return out


def expand_groups(place: IntArray, groups: list[list[int]]) -> list[list[int]]:
    """Per stage, its devices replica-major (docs/formats.md) from ``place[s, i]`` = the group index of
    replica ``i`` of stage ``s``."""
    return [[d for g in row for d in groups[int(g)]] for row in np.asarray(place)]


@dataclass(frozen=True)
class SplitOpCosts:
    """Per op of the graph, for one replica's group of ``t`` devices and a whole micro-batch.

    ``work_s``: forward + backward (+ forward again with recomputation) with a split op's compute
    divided by ``t e`` (Shoeybi et al. 2019, §3; ``e`` the kind's calibrated efficiency);
    ``comm_s``: its collectives, ``2 ((t-1)/t) B / bw + 2 (t-1) lat`` per all-reduce (the row or
    vocabulary-embedding output forward, the column or LM-head input's gradient backward, §3's
    ``g`` and ``f``); ``shrink``: ``1/t`` for a split op (its parameters, activations and working
    memory on each device), 1 otherwise.  The terms of :mod:`solvers.cost.tensor_parallel`.
    """

    work_s: FloatArray
    comm_s: FloatArray
    shrink: FloatArray
    fwd_s: FloatArray  # the forward alone, split ops over t e
    bwd_s: FloatArray  # the backward alone, split ops over t e
    comm_fwd_s: FloatArray  # the forward's collectives (row / vocabulary embedding output)
    comm_bwd_s: FloatArray  # the backward's collectives (column / LM head input gradient)


def split_op_costs(problem: Problem, t: int, groups: list[list[int]], slowest: bool) -> SplitOpCosts:
    """:class:`SplitOpCosts` over ``groups``: each op's time on the slowest of their devices and the
    slowest ring among them (``slowest``), or the least time and the fastest per-byte time and latency
    of any group (a relaxation, for a bound)."""
    g, topo = problem.graph, problem.topology
    lay = layout_of(g)
    split = lay.split_mask(False)
    compute = ComputeModel(g, topo)
    pick = np.maximum if slowest else np.minimum
    work: FloatArray | None = None
    fwd: FloatArray | None = None
    bwd: FloatArray | None = None
    for d in sorted({d for group in groups for d in group}):
        f, b = compute.fwd_s(d).copy(), compute.bwd_s(d).copy()
        scale = t * tp_efficiency(topo, topo.devices[d].kind)
        f[split] /= scale
        b[split] /= scale
        w = f + (b + (f if problem.settings.recomputes else 0.0) if problem.training else 0.0)
        work = w if work is None else pick(work, w)
        fwd = f if fwd is None else pick(fwd, f)
        bwd = b if bwd is None else pick(bwd, b)
    assert work is not None and fwd is not None and bwd is not None
    hops = [ring_hop_s(topo, group) for group in groups]
    per_byte = max(h[0] for h in hops) if slowest else min(h[0] for h in hops)
    lat = max(h[1] for h in hops) if slowest else min(h[1] for h in hops)
    share = (t - 1) / t

    def all_reduce_s(size: FloatArray) -> FloatArray:
        return np.asarray(np.where(size > 0, 2.0 * (share * size * per_byte + (t - 1) * lat), 0.0), dtype=np.float64)

    comm_fwd = all_reduce_s(lay.output_reduce_bytes)
    comm_bwd = all_reduce_s(lay.input_gather_bytes)
    return SplitOpCosts(np.asarray(work, dtype=np.float64), comm_fwd + comm_bwd if problem.training else comm_fwd,
                        np.asarray(np.where(split, 1.0 / t, 1.0), dtype=np.float64),
                        np.asarray(fwd, dtype=np.float64), np.asarray(bwd, dtype=np.float64), comm_fwd, comm_bwd)


def group_problem(problem: Problem, t: int, groups: list[list[int]]) -> Problem:
    """``problem`` with each group of ``t`` devices as one device, for a solver that plans on devices
    (docs/tensor-parallel.md, "Search"): each op timed as :func:`split_op_costs` times it on the
    group (the slowest device and ring, forward and backward each with its collectives), split ops
    holding ``1/t`` of their memory; a group device has the least memory and the largest base memory
    of its devices, and the channels of rank 0 to rank 0 (each rank's transfers run in parallel).
    Its settings: no tensor parallelism (``max_tp`` 1).  :func:`expand_plan` maps a plan back."""
    g, topo = problem.graph, problem.topology
    costs = split_op_costs(problem, t, groups, slowest=True)
    nodes = [dataclasses.replace(node, fwd_s=float(costs.fwd_s[v] + costs.comm_fwd_s[v]),
                                 bwd_s=float(costs.bwd_s[v] + costs.comm_bwd_s[v]),
                                 param_bytes=node.param_bytes * float(costs.shrink[v]),
                                 act_bytes=node.act_bytes * float(costs.shrink[v]),
                                 mem_fwd_bytes=node.mem_fwd_bytes * float(costs.shrink[v]),
                                 mem_bwd_bytes=node.mem_bwd_bytes * float(costs.shrink[v]), times=None)
             for v, node in enumerate(g.nodes)]
    graph = OpGraph.build(f"{g.name} (tp {t})", nodes, list(g.edges), g.profiled_batch_size, g.attrs)
    devices = [Device(f"tp{k}", topo.devices[grp[0]].kind, topo.devices[grp[0]].node,
                      min(topo.devices[d].memory_bytes for d in grp), 1.0,
                      base_memory_bytes=max(topo.devices[d].base_memory_bytes for d in grp)) for k, grp in enumerate(groups)]
    rank0 = np.array([grp[0] for grp in groups], dtype=np.int64)
    bandwidth = topo.bandwidth_Bps[np.ix_(rank0, rank0)].copy()
    np.fill_diagonal(bandwidth, 0.0)  # no channel from a device to itself
    grouped = Topology.from_matrices(f"{topo.name} (tp {t})", devices, bandwidth.tolist(),
                                     topo.latency_s[np.ix_(rank0, rank0)].tolist(), topo.attrs)
    settings = problem.settings.model_copy(update={"tp": None, "max_tp": 1})
    return Problem(graph, grouped, problem.objective, settings)


def expand_plan(problem: Problem, plan: Plan, groups: list[list[int]]) -> Plan:
    """A plan of :func:`group_problem` on ``problem``: each group device ``tp{k}`` becomes the devices of
    ``groups[k]``, every stage of degree ``t = len(groups[0])``."""
    topo = problem.topology
    stages = tuple(Stage(stage.ops, tuple(topo.devices[d].id for unit in stage.devices
                                          for d in groups[int(unit.removeprefix("tp"))]), len(groups[0]))
                   for stage in plan.stages)
    return plan.with_(stages=stages, claimed_objective_s=None, lower_bound_s=None)
