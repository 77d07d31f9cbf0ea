"""One device's timeline in a list schedule: its idle gaps, for the insertion search.

The insertion-based earliest start (Celeritas Eq. 7; HEFT's EST) of a task that is ready at
``t`` and runs ``dur > 0`` is ``t`` when ``t`` falls before the first task or in an idle gap
that still holds the task, else the start of the first later idle gap that holds it, else the
end of the last task.  Most tasks of a long timeline follow one another without a gap (at 36,352
ops on 4 devices, nine tasks in ten), so the timeline keeps its idle gaps, not its tasks: their
starts (the end of the task before), ends (the start of the task after) and lengths, in time
order.  A task placed in a gap replaces the gap by what is left on either side; a task after
the last one adds the gap before it.  No list of tasks is shifted.

Most searches find no gap (the ready time lies far back in a busy timeline and no gap after it
is long enough), so the timeline also keeps the *suffix maxima* of the gap lengths: the gaps
longer than every later gap, by start.  Their lengths decrease with their starts, and the
longest gap from any gap on is the first suffix maximum from there: one bisection answers
"is there a gap of at least ``dur`` after ``t``", and a search that has an answer scans the
gaps up to that suffix maximum at most.

A gap's length is ``start of the task after - end of the task before``, the float subtraction of
the plain definition, and a gap is kept when that is positive.  A task of zero duration fits
where a gap of zero does, which the gaps do not record: its search is the plain scan over the
tasks, sorted from a log of them when it is needed (:meth:`Timeline.slot_s`).  The plain
definition is ``NaiveSchedule`` in ``tests/solvers/celeritas/test_place.py``; property tests
compare the two (there and in ``tests/solvers/listsched/test_timeline.py``).  Tasks never overlap
(each starts at its earliest start or after the last task), which the gap updates rely on.
"""

from __future__ import annotations

import bisect

_INF = float("inf")


class Timeline:
    """The idle gaps of one device, their suffix maxima, and its first start and last end (module doc)."""

    __slots__ = ("_log", "_sorted", "first_start", "gap_a", "gap_b", "gap_len", "last_end", "top_a", "top_len")

    def __init__(self) -> None:
        self.first_start = _INF  # the start of the first task
        self.last_end = -_INF  # the end of the last task (-inf: no task)
        # the idle gaps (positive time between two consecutive tasks), in time order
        self.gap_a: list[float] = []  # end of the task before the gap
        self.gap_b: list[float] = []  # start of the task after it
        self.gap_len: list[float] = []  # gap_b - gap_a, as computed from the tasks
        # the suffix maxima of gap_len: start and length of every gap longer than all later gaps
        self.top_a: list[float] = []
        self.top_len: list[float] = []
        self._log: list[tuple[float, float]] = []  # (start, end) of every task, sorted up to _sorted
        self._sorted = 0

    def slot_s(self, ready: float, dur: float) -> float:
        """The insertion-based earliest start of a task ready at ``ready`` that runs ``dur``."""
        if ready >= self.last_end:
            return ready
        if dur <= 0.0:
            return self._scan_tasks(ready, dur)
        i = self.gap_from(ready, dur)
        return ready if i < 0 else self.first_gap(i, dur)

    def gap_from(self, ready: float, dur: float) -> int:
        """For ``dur > 0`` and ``ready`` before the end of the last task: -1 when the task can
        start at ``ready`` (before the first task, or in the gap ``ready`` falls in), else the
        first gap that may hold it (every later gap starts after ``ready``; :meth:`bound_s`)."""
        if self.first_start - ready >= dur:  # before the first task (never true once ready passes its start)
            return -1
        gap_b = self.gap_b
        i = bisect.bisect_right(gap_b, ready)  # the first gap that ends after ready
        if i < len(gap_b) and self.gap_a[i] <= ready:  # ready falls in gap i
            if gap_b[i] - ready >= dur:
                return -1
            i += 1
        return i

    def bound_s(self, i: int) -> float:
        """A lower bound of what :meth:`first_gap` gives from gap ``i``: that gap's start, or
        the end of the last task when there is no gap from ``i`` on."""
        return self.gap_a[i] if i < len(self.gap_a) else self.last_end

    def first_gap(self, i: int, dur: float) -> float:
        """The start of the first gap from gap ``i`` on that holds ``dur`` (> 0), else the end of
        the last task."""
        gap_a = self.gap_a
        if i >= len(gap_a):
            return self.last_end
        r = bisect.bisect_left(self.top_a, gap_a[i])  # the longest gap from gap i on (the last gap is one)
        if self.top_len[r] < dur:
            return self.last_end
        gap_len = self.gap_len
        while gap_len[i] < dur:  # stops at that suffix maximum at the latest
            i += 1
        return gap_a[i]

    def _scan_tasks(self, ready: float, dur: float) -> float:
        """:meth:`slot_s` by the plain scan over the tasks (for ``dur <= 0``, where gaps of length
        0 count): the task running or next at ``ready``, then the first gap after it whose length
        is at least ``dur``."""
        log = self._log
        if self._sorted < len(log):
            log.sort()  # by start, an empty task before a task that starts with it: as inserted
            self._sorted = len(log)
        k = bisect.bisect_right([end for _, end in log], ready)
        if log[k][0] - ready >= dur:
            return ready
        for j in range(k + 1, len(log)):
            if log[j][0] - log[j - 1][1] >= dur:
                return log[j - 1][1]
        return log[-1][1]

    def insert(self, start: float, end: float) -> None:
        """Add a task from ``start`` to ``end``: after the last task, before the first one, or
        in a gap (at its earliest start; an empty task may also start where a task starts or
        ends, which changes no gap)."""
        self._log.append((start, end))
        last = self.last_end
        if start >= last:  # after the last task (most tasks), or the first task
            if start - last > 0.0 and last > -_INF:
                self._append_gap(last, start, start - last)
            self.last_end = end
            if start < self.first_start:
                self.first_start = start
            return
        if start < self.first_start:  # before the first task: a gap ahead of every other, if any
            first, self.first_start = self.first_start, start
            if first - end > 0.0:
                self._prepend_gap(end, first, first - end)
            return
        i = bisect.bisect_right(self.gap_a, start) - 1  # the gap the task starts in
        if i < 0 or self.gap_b[i] < start:
            return  # an empty task where a task starts or ends
        a, b = self.gap_a[i], self.gap_b[i]
        parts = []
        if start - a > 0.0:
            parts.append((a, start, start - a))
        if b - end > 0.0:
            parts.append((end, b, b - end))
        self._split_gap(i, parts)

    def _append_gap(self, a: float, b: float, length: float) -> None:
        self.gap_a.append(a)
        self.gap_b.append(b)
        self.gap_len.append(length)
        top_a, top_len = self.top_a, self.top_len
        while top_len and top_len[-1] <= length:
            top_a.pop()
            top_len.pop()
        top_a.append(a)
        top_len.append(length)

    def _prepend_gap(self, a: float, b: float, length: float) -> None:
        self.gap_a.insert(0, a)
        self.gap_b.insert(0, b)
        self.gap_len.insert(0, length)
        if not self.top_len or length > self.top_len[0]:
            self.top_a.insert(0, a)
            self.top_len.insert(0, length)

    def _split_gap(self, i: int, parts: list[tuple[float, float, float]]) -> None:
        """Replace gap ``i`` by ``parts``, the gaps left on either side of a task placed in it
        (none, one or two, each no longer than the gap)."""
        gap_a, gap_len = self.gap_a, self.gap_len
        a = gap_a[i]
        gap_a[i:i + 1] = [p[0] for p in parts]
        self.gap_b[i:i + 1] = [p[1] for p in parts]
        gap_len[i:i + 1] = [p[2] for p in parts]
        top_a, top_len = self.top_a, self.top_len
        r = bisect.bisect_left(top_a, a)
        if r == len(top_a) or top_a[r] != a:
            return  # a later gap is at least as long as gap i, and so as its parts: nothing changes
        # gap i was a suffix maximum: each gap from the suffix maximum before it (exclusive) to
        # its parts is one when it is longer than every gap after it
        later = top_len[r + 1] if r + 1 < len(top_len) else -_INF
        lo = bisect.bisect_right(gap_a, top_a[r - 1]) if r else 0
        new_a: list[float] = []
        new_len: list[float] = []
        for j in range(i + len(parts) - 1, lo - 1, -1):
            if gap_len[j] > later:
                later = gap_len[j]
                new_a.append(gap_a[j])
                new_len.append(later)
        top_a[r:r + 1] = new_a[::-1]
        top_len[r:r + 1] = new_len[::-1]
