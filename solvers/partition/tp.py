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

import numpy as np

from solvers.arrays import IntArray
from solvers.cost.tensor_parallel import layout_of
from solvers.model.problem import Problem
from solvers.model.settings import ONE_STAGE_PER_RANK
from solvers.model.topology import Topology


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


def expand_groups(place: IntArray, groups: list[list[int]]) -> list[list[int]]:
    """Per stage, its devices replica-major (docs/formats.md) from ``place[s, i]`` = the group index of
    replica ``i`` of stage ``s``."""
    return [[d for g in row for d in groups[int(g)]] for row in np.asarray(place)]
