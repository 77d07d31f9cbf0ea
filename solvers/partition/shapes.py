"""The pipeline shapes ``(S, R)`` a partition search tries (Parmesan Appendix B).

The settings' values when given; otherwise ``S`` in powers of two and divisors of the device
count ``D`` (``R = D / S``), at least one more than the largest stage pin.  Parmesan's search,
PipeDream's and the exact solver search the same list.

A stage's ``R`` replicas share each micro-batch, so ``R`` must divide its rows
(:meth:`~solvers.model.problem.Problem.micro_batch_rows`); where ``D / S`` does not, the list also
holds the largest ``R < D / S`` that does, and the searches skip every (``R``, micro-batch count)
pair that :func:`replicas_fit` refuses.
"""

from __future__ import annotations

from typing import NamedTuple

from solvers.arrays import IntArray
from solvers.model.plan import exported_graph, replicas_split_rows
from solvers.model.problem import Problem


class StagePartition(NamedTuple):
    """A partition into one shape: ``stage_of[op]`` in ``0..S-1``, ``S`` stages of ``R`` replicas
    each, ``MB`` micro-batches an iteration."""

    stage_of: IntArray
    n_stages: int
    replicas: int
    micro_batches: int


def sr_candidates(problem: Problem, max_stages: int, n_units: int | None = None) -> list[tuple[int, int]]:
    """(S, R) pairs to search: the settings' values, else S in powers of two and divisors of D.

    ``n_units``: place stage replicas on this many units instead of the devices (the tensor-parallel
    groups of one degree, :func:`solvers.partition.tp.tp_groups`); ``S x R`` may then exceed it
    only when the settings fix both."""
    d = problem.topology.n_devices if n_units is None else n_units
    s_fix, r_fix = problem.settings.stages, problem.settings.replicas
    pins = [t for t in problem.settings.pinned.values() if isinstance(t, int)]
    s_min = max(pins, default=-1) + 1
    if s_fix is not None:
        return [(s_fix, r_fix or max(1, d // s_fix))]
    most = d // (r_fix or 1)
    stages = {1 << i for i in range(most.bit_length()) if (1 << i) <= most}
    stages |= {s for s in range(1, most + 1) if most % s == 0}
    out: list[tuple[int, int]] = []
    for s in sorted(stages):
        if s <= max_stages and s >= max(1, s_min):
            for r in [r_fix] if r_fix else replica_counts(problem, d // s):
                out.append((s, r))
    return out or [(max(1, min(max_stages, most)), r_fix or 1)]


def replica_counts(problem: Problem, most: int) -> list[int]:
    """``most`` first, then for every micro-batch count whose rows ``most`` does not divide, the
    largest replica count below ``most`` that does (descending, no repeats)."""
    out = [most]
    for mb in problem.micro_batch_candidates:
        rows = problem.micro_batch_rows(mb)
        fit = max(r for r in range(1, most + 1) if replicas_split_rows(r, rows, exported_graph(problem.graph.attrs)))
        if fit not in out:
            out.append(fit)
    return sorted(out, reverse=True)


def replicas_fit(problem: Problem, replicas: int, micro_batches: int) -> bool:
    """Whether ``replicas`` replicas of a stage split a micro-batch of a plan with ``micro_batches``
    micro-batches evenly (the plan-validity rule of :func:`solvers.model.plan.check_replica_rows`)."""
    return problem.objective != "throughput" or replicas_split_rows(replicas, problem.micro_batch_rows(micro_batches),
                                                                      exported_graph(problem.graph.attrs))
