"""Block-level partitioning (RaNNC §III-B): coarsening, uncoarsening, compaction to ``k`` blocks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solvers.arrays import BoolArray, IntArray
from solvers.base import Budget
from solvers.model.problem import Problem
from solvers.rannc.atomic import AtomicPartition
from solvers.rannc.coarsen import coarsen
from solvers.rannc.compact import compact
from solvers.rannc.groups import AtomicGraph, build_atomic_graph, group_members
from solvers.rannc.uncoarsen import uncoarsen
from solvers.runnable import computing_ops


@dataclass(frozen=True)
class BlockPartition:
    """``blocks[j]`` = atomic subcomponents of block ``j`` (blocks in topological order);
    ``block_ops[j]`` = the ops they hold (a clone counted once per block); ``computes[j]`` = block
    ``j`` holds an op that computes (:func:`solvers.runnable.computing_ops`) and is not cloned, so
    any stage holding the block computes (a clone goes to its earliest stage only)."""

    blocks: list[IntArray]
    block_ops: list[IntArray]
    graph: AtomicGraph
    levels: int
    coarsened_groups: int
    moves: int
    computes: BoolArray

    @property
    def k(self) -> int:
        return len(self.blocks)


def partition_blocks(problem: Problem, atoms: AtomicPartition, k: int, *, recompute_possible: bool,
                     refine: bool = True, budget: Budget | None = None) -> BlockPartition:
    """Group the atomic subcomponents into (at most) ``k`` convex blocks that fit the memory."""
    ag = build_atomic_graph(problem, atoms, recompute_possible)
    levels = coarsen(ag, k, budget)
    moves = 0
    if refine and len(levels) > 1:
        levels, moves = uncoarsen(ag, levels, budget)
    top = levels[-1]
    coarsened = int(top.max()) + 1
    final = compact(ag, top, k) if coarsened > k else top
    blocks = group_members(final)
    topo = problem.graph.topo_position
    block_ops = []
    for atoms_of_block in blocks:
        ops = np.unique(np.concatenate([atoms.members[a] for a in atoms_of_block.tolist()]))
        block_ops.append(ops[np.argsort(topo[ops], kind="stable")])
    single = computing_ops(problem.graph) & np.fromiter((len(h) == 1 for h in atoms.homes), dtype=bool,
                                                        count=problem.graph.n_ops)
    computes = np.fromiter((bool(single[ops].any()) for ops in block_ops), dtype=bool, count=len(block_ops))
    return BlockPartition(blocks, block_ops, ag, len(levels) - 1, coarsened, moves, computes)
