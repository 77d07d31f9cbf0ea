"""The op-level engine's successor and message lists when every group is one device (numpy).

A latency plan from a list scheduler or Celeritas puts each device in a group of its own without
tensor parallelism.  Then every message is one transfer on one channel
(:meth:`~solvers.simulator._channels.ChannelTable.one_device_messages`), and the lists that
:func:`solvers.simulator.dataflow._general_lists` builds edge by edge in Python can be built from
the edge arrays sorted once: the same lists in the same order (a test compares them), in about a
third of the time at 36,352 ops (docs/benchmarks.md, "Celeritas").
"""

from __future__ import annotations

import itertools
from typing import TypeVar

import numpy as np

from solvers.arrays import IntArray
from solvers.model.plan import ResolvedPlan
from solvers.model.problem import Problem
from solvers.simulator._channels import ChannelTable, Transfers

TaskLists = tuple[list[list[int]], list[list[tuple[Transfers, list[int]]]]]
T = TypeVar("T")


def one_device(rp: ResolvedPlan) -> bool:
    """Whether every stage is one device without tensor parallelism, no device in two stages."""
    devices = [devs[0] for devs in rp.stage_devices if len(devs) == 1]
    return (len(devices) == rp.n_stages and len(set(devices)) == len(devices)
            and all(rp.tp(s) == 1 for s in range(rp.n_stages)))


def _slices(flat: list[T], keys: IntArray, n: int) -> list[list[T]]:
    """``flat`` cut into ``n`` lists, list ``i`` holding the entries whose (sorted) ``keys`` equal ``i``."""
    bounds = np.searchsorted(keys, np.arange(n + 1)).tolist()
    return [flat[a:b] for a, b in itertools.pairwise(bounds)]


def one_device_lists(problem: Problem, rp: ResolvedPlan, channels: ChannelTable, micro_batches: int) -> TaskLists:
    """Per template (forward ops, then backward ops in a training pass): the deltas of its local
    successors and its messages, as :func:`~solvers.simulator.dataflow._general_lists` gives them
    when :func:`one_device` holds.  Forward: op ``u``'s edges in edge order; one message per
    consumer group (by group) with the largest bytes of its edges and their deltas; then ``F(u) ->
    B(u)``.  Backward: op ``w``'s incoming edges in edge order, each remote one a gradient message."""
    g = problem.graph
    n = g.n_ops
    group = rp.stage_of
    device = np.array([devs[0] for devs in rp.stage_devices], dtype=np.int64)
    src, dst, size = g.edge_src, g.edge_dst, g.edge_bytes
    by_src = np.argsort(src, kind="stable")  # out_edges: by producer, in edge order
    s, d, b = src[by_src], dst[by_src], size[by_src]
    gs, gd = group[s], group[d]
    same = gs == gd
    local = _slices((d - s)[same].tolist(), s[same], n)
    if problem.training:
        block = micro_batches * n
        for out in local:
            out.append(block)  # F(u, m) -> B(u, m)
    # remote edges by (producer, consumer group), edge order kept within: one message each run
    rs, rd, rb, rh, rg = s[~same], d[~same], b[~same], gd[~same], gs[~same]
    by_group = np.lexsort((rh, rs))
    rs, rd, rb, rh, rg = rs[by_group], rd[by_group], rb[by_group], rh[by_group], rg[by_group]
    starts = np.flatnonzero(np.concatenate(([True], (rs[1:] != rs[:-1]) | (rh[1:] != rh[:-1])))) if len(rs) else \
        np.zeros(0, dtype=np.int64)
    largest = np.maximum(np.maximum.reduceat(rb, starts), 0.0) if len(rs) else np.zeros(0)
    transfers = channels.one_device_messages(device[rg[starts]], device[rh[starts]], largest, micro_batches)
    deltas = (rd - rs).tolist()
    cuts = [*starts.tolist(), len(rs)]
    sent = [(transfers[i], deltas[cuts[i]:cuts[i + 1]]) for i in range(len(transfers))]
    messages = _slices(sent, rs[starts], n)
    if not problem.training:
        return local, messages
    by_dst = np.argsort(dst, kind="stable")  # in_edges: by consumer, in edge order
    s, d, b = src[by_dst], dst[by_dst], size[by_dst]
    gs, gd = group[s], group[d]
    same = gs == gd
    local += _slices((s - d)[same].tolist(), d[same], n)
    rs, rd = s[~same], d[~same]
    grads = channels.one_device_messages(device[gd[~same]], device[gs[~same]], b[~same], micro_batches)
    back = [(t, [delta]) for t, delta in zip(grads, (rs - rd).tolist(), strict=True)]
    messages += _slices(back, rd, n)
    return local, messages
