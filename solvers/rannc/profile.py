"""Stage profiling for the stage-level DP (RaNNC §III-C, Algorithm 1 line 17).

RaNNC runs a candidate stage (the merged blocks ``B_{b'+1} .. B_b``) on a GPU at the batch
size of one replica and records forward time, backward time and peak memory.  Here the
default profiler, :class:`CostModelProfiler`, evaluates the shared cost model
(``solvers.cost``) on the merged ops instead; any callable with the :class:`StageProfiler`
signature can replace it (for example one that looks up measured profiles).

Batch sizes: a graph is profiled at ``profiled_batch_size`` samples per micro-batch, so the
paper's ``BS / MB`` is ``profiled_batch_size`` and a stage with ``R`` replicas gives each
replica ``profiled_batch_size / R`` samples (``samples_per_replica``); the cost model divides
the stage's time and activation memory by ``R`` accordingly (Parmesan Eq. 3), without a floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.cost.memory import kept_bytes
from solvers.model.problem import Problem
from solvers.model.topology import Topology
from solvers.partition.tp import SplitOpCosts
from solvers.rannc.groups import reference_times


@dataclass(frozen=True)
class StageCandidate:
    """Blocks ``first_block .. last_block`` (inclusive, 0-based) merged into one stage."""

    first_block: int
    last_block: int
    ops: IntArray  # op positions, each once
    input_bytes: float  # bytes per micro-batch entering the stage (one tensor per producer)
    output_bytes: float  # bytes per micro-batch leaving the stage (one tensor per producer)
    replicas: int
    samples_per_replica: float


@dataclass(frozen=True)
class StageProfile:
    """What profiling one replica of a candidate stage returns (per micro-batch)."""

    fwd_s: float
    bwd_s: float  # includes the forward recomputation when activations are recomputed
    param_bytes: float  # parameters held by the replica (optimizer state is added by the DP)
    kept_bytes: float  # activation bytes kept per in-flight micro-batch
    working_bytes: float  # peak working memory of one op


class StageProfiler(Protocol):
    """The swappable profiling function of Algorithm 1."""

    def __call__(self, stage: StageCandidate) -> StageProfile: ...


class CostModelProfiler:
    """Default profiler: the shared cost model on the merged ops, slowest device as reference.

    Its profile of ``r`` replicas is its profile of one replica with times, kept and working
    bytes divided by ``r`` (``scales_with_replicas``), which lets the search build the tables
    of every replica count from one profile per block range.
    """

    scales_with_replicas: ClassVar[bool] = True

    def __init__(self, problem: Problem, recompute: bool, split: SplitOpCosts | None = None) -> None:
        """``split``: stages of a tensor-parallel degree (:func:`~solvers.partition.tp.split_op_costs`):
        split ops over ``t e`` with their collectives, ``1/t`` of their memory (docs/tensor-parallel.md)."""
        self.problem = problem
        self.recompute = recompute
        g = problem.graph
        self.work = np.maximum(g.mem_fwd_bytes, g.mem_bwd_bytes)
        self.params, self.act = g.param_bytes, g.act_bytes
        if split is None:
            self.fwd_ref, self.bwd_ref = reference_times(problem)
        else:
            self.fwd_ref, self.bwd_ref = split.fwd_s + split.comm_fwd_s, split.bwd_s + split.comm_bwd_s
            self.work, self.params, self.act = self.work * split.shrink, self.params * split.shrink, self.act * split.shrink
        self._sums: dict[tuple[int, int], tuple[float, float, float, float, float]] = {}

    def _range_sums(self, stage: StageCandidate) -> tuple[float, float, float, float, float]:
        key = (stage.first_block, stage.last_block)
        hit = self._sums.get(key)
        if hit is None:
            ops = stage.ops
            work = float(self.work[ops].max()) if len(ops) else 0.0
            hit = (float(self.fwd_ref[ops].sum()), float(self.bwd_ref[ops].sum()), float(self.params[ops].sum()),
                   float(self.act[ops].sum()), work)
            self._sums[key] = hit
        return hit

    def __call__(self, stage: StageCandidate) -> StageProfile:
        fwd, bwd, params, act, work = self._range_sums(stage)
        r = stage.replicas
        kept = kept_bytes(act, stage.input_bytes, self.recompute)
        bwd_total = bwd + fwd if self.recompute else bwd
        return StageProfile(fwd / r, bwd_total / r, params, kept / r, work / r)


class RangeTable:
    """Merged ops and boundary traffic of every contiguous block range ``i .. j``."""

    def __init__(self, problem: Problem, block_ops: list[IntArray]) -> None:
        self.problem = problem
        self.block_ops = block_ops
        self._cache: dict[tuple[int, int], tuple[IntArray, float, float]] = {}

    def get(self, i: int, j: int) -> tuple[IntArray, float, float]:
        """(ops, input bytes, output bytes) of blocks ``i .. j`` inclusive."""
        hit = self._cache.get((i, j))
        if hit is not None:
            return hit
        g = self.problem.graph
        inside = np.zeros(g.n_ops, dtype=bool)
        for b in range(i, j + 1):
            inside[self.block_ops[b]] = True
        ops = np.flatnonzero(inside).astype(np.int64)
        src, dst, size = g.edge_src, g.edge_dst, g.edge_bytes
        s_in, d_in = inside[src], inside[dst]
        hit = (ops, _per_producer(src[~s_in & d_in], size[~s_in & d_in], g.n_ops),
               _per_producer(src[s_in & ~d_in], size[s_in & ~d_in], g.n_ops))
        self._cache[(i, j)] = hit
        return hit


def _per_producer(src: IntArray, size: FloatArray, n: int) -> float:
    """Sum over producers of the largest tensor each sends (a tensor crosses once)."""
    if len(src) == 0:
        return 0.0
    best = np.zeros(n)
    np.maximum.at(best, src, size)
    return float(best.sum())


def intra_node_channel(topology: Topology) -> tuple[float, float]:
    """(bandwidth_Bps, latency_s) used to estimate inter-stage transfers (§III-B footnote 3).

    The slowest channel between two devices of the same host; with no host holding two
    devices, the slowest channel of the whole topology.
    """
    hosts = np.asarray([topology.hosts.index(d.node) for d in topology.devices])
    same = hosts[:, None] == hosts[None, :]
    np.fill_diagonal(same, False)
    if not same.any():
        same = ~np.eye(len(hosts), dtype=bool)
    if not same.any():
        return float("inf"), 0.0
    return float(topology.bandwidth_Bps[same].min()), float(topology.latency_s[same].max())
