"""Window search: a large-neighbourhood search over MOIRAI's model on the uncoarsened graph.

A window is a run of ``size`` consecutive units in the incumbent's start-time order (a slice of
time), taken from the end of the schedule backwards.  :func:`~solvers.moirai.window.solve_window` re-places and re-schedules the window's units
with everything else fixed (devices, and each device's order of its fixed tasks); the solution is
re-timed exactly and accepted when its makespan — the simulated latency, since the graph is not
coarsened — is smaller, or equal with a smaller sum of completion times (a move along a plateau,
which the next windows can build on).  Windows overlap by half; after a pass over the schedule without a
shorter makespan the window doubles, and the search ends when a pass over the whole graph improved
nothing, at the deadline, or when the incumbent meets ``target_s`` (a proven lower bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from solvers.moirai.instance import Instance
from solvers.moirai.schedule import TimedSchedule
from solvers.moirai.window import solve_window

MIN_WINDOW_S = 0.2  # a window gets at least this long, or the search stops
IMPROVEMENT = 1e-9  # relative improvement needed to accept a window's solution
TARGET_GAP = 1e-4  # the search ends when the incumbent is this close to the target (relative)


@dataclass
class SearchStats:
    windows: int = 0
    improved: int = 0
    largest_window: int = 0


def _windows(inst: Instance, sched: TimedSchedule, size: int) -> list[list[int]]:
    """Runs of ``size`` units in start order, overlapping by half, latest first (everything that
    ends before a window starts keeps its times, so late windows are small models)."""
    units = sorted(range(inst.n_units), key=lambda u: (sched.start_s[u], u))
    if size >= len(units):
        return [units]
    step = max(1, size // 2)
    starts = [*list(range(0, len(units) - size, step)), len(units) - size]
    return [units[s:s + size] for s in reversed(starts)]


def _better(a: TimedSchedule, b: TimedSchedule) -> bool:
    """A shorter makespan, or the same makespan with a smaller sum of completion times."""
    if a.makespan_s < b.makespan_s * (1 - IMPROVEMENT):
        return True
    return a.makespan_s <= b.makespan_s * (1 + 1e-12) and sum(a.end_s) < sum(b.end_s) * (1 - IMPROVEMENT)


def window_search(inst: Instance, incumbent: TimedSchedule, deadline: float, size: int, window_s: float,
                  target_s: float = 0.0, seed: int = 0, threads: int = 1,
                  improved: Callable[[TimedSchedule], None] | None = None) -> tuple[TimedSchedule, SearchStats]:
    """Improve ``incumbent`` window by window until ``deadline`` (``time.monotonic()``; module doc)."""
    stats = SearchStats()
    size = max(1, min(size, inst.n_units))
    best = incumbent
    while True:
        stats.largest_window = max(stats.largest_window, size)
        gained = False
        i = 0
        while True:
            windows = _windows(inst, best, size)
            if i >= len(windows) or best.makespan_s * (1 - TARGET_GAP) <= target_s:
                break
            left = deadline - time.monotonic()
            if left < MIN_WINDOW_S:
                return best, stats
            result = solve_window(inst, best, windows[i], best.makespan_s, min(window_s, left), seed + stats.windows,
                                  threads, target_s)
            stats.windows += 1
            found = result.schedule
            if found is not None and _better(found, best):
                gained = gained or found.makespan_s < best.makespan_s * (1 - IMPROVEMENT)
                best = found
                stats.improved += 1
                if improved is not None:
                    improved(best)
            i += 1
        if best.makespan_s * (1 - TARGET_GAP) <= target_s or (size >= inst.n_units and not gained):
            return best, stats
        if not gained:
            size = min(inst.n_units, 2 * size)
