"""A device's timeline in the list schedule (``solvers.listsched.timeline``): the insertion search
over the idle gaps and their suffix maxima against the plain scan over the tasks."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.listsched.timeline import Timeline
from tests.strategies import examples


def plain_slot_s(tasks: list[tuple[float, float]], ready: float, dur: float) -> float:
    """The definition: from ``ready``, the first stretch between tasks (``(start, end)``, by start)
    that holds ``dur``, else after the last task."""
    t = ready
    for start, end in tasks:
        if end <= ready:
            continue
        if start - t >= dur:
            return t
        t = max(t, end)
    return t


def expected_gaps(tasks: list[tuple[float, float]]) -> tuple[list[tuple[float, float, float]],
                                                             list[tuple[float, float]]]:
    """The idle gaps between ``tasks`` and their suffix maxima, by the definition."""
    gaps = [(tasks[j - 1][1], tasks[j][0], tasks[j][0] - tasks[j - 1][1])
            for j in range(1, len(tasks)) if tasks[j][0] - tasks[j - 1][1] > 0.0]
    tops: list[tuple[float, float]] = []
    for a, _, length in reversed(gaps):
        if not tops or length > tops[-1][1]:
            tops.append((a, length))
    return gaps, tops[::-1]


# ready times and durations on a coarse grid, so that tasks meet end to start, fill gaps exactly
# and tie; zero durations included (the plain scan)
_ready = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.5, 6.0, 8.0, 0.1, 0.7])
_dur = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 0.1, 0.3])


@settings(max_examples=examples(200))
@given(st.lists(st.tuples(_ready, _dur, st.booleans()), min_size=1, max_size=80))
def test_earliest_start_and_gaps_as_the_plain_definitions(steps: list[tuple[float, float, bool]]) -> None:
    """Along a run of tasks placed at their earliest start (or, where the flag says so, after the
    last task), the search gives the plain definition's start, and the gaps and suffix maxima the
    timeline keeps are those of its tasks; the lower bound from ``gap_from`` never exceeds the
    start."""
    line = Timeline()
    tasks: list[tuple[float, float]] = []
    for ready, dur, at_end in steps:
        want = plain_slot_s(tasks, ready, dur)
        assert line.slot_s(ready, dur) == want
        if tasks and ready < tasks[-1][1] and dur > 0.0:
            i = line.gap_from(ready, dur)
            assert (i < 0) == (want == ready)
            assert i < 0 or (line.bound_s(i) <= want and line.first_gap(i, dur) == want)
        start = max(ready, tasks[-1][1]) if at_end and tasks else want
        line.insert(start, start + dur)
        bisect.insort(tasks, (start, start + dur))
        assert [end for _, end in tasks] == sorted(end for _, end in tasks)  # no task overlaps another
        gaps, tops = expected_gaps(tasks)
        assert list(zip(line.gap_a, line.gap_b, line.gap_len, strict=True)) == gaps
        assert list(zip(line.top_a, line.top_len, strict=True)) == tops
        assert (line.first_start, line.last_end) == (tasks[0][0], tasks[-1][1])


def test_a_gap_split_twice_keeps_the_longest_gaps_after_it() -> None:
    """Tasks of 1 at 0, 3, 5 and 6.5 leave gaps of 2, 1 and 0.5; a task in the first gap leaves
    gaps of 0.5 and 1 there, and the suffix maxima become those gaps and the later ones."""
    line = Timeline()
    for start in (0.0, 3.0, 5.0, 6.5):
        line.insert(start, start + 1.0)
    assert (line.top_a, line.top_len) == ([1.0, 4.0, 6.0], [2.0, 1.0, 0.5])
    assert line.slot_s(0.5, 1.5) == 1.0
    line.insert(1.5, 2.0)
    assert (line.gap_a, line.gap_len) == ([1.0, 2.0, 4.0, 6.0], [0.5, 1.0, 1.0, 0.5])
    assert (line.top_a, line.top_len) == ([4.0, 6.0], [1.0, 0.5])
    assert line.slot_s(0.5, 1.5) == 7.5
    assert line.slot_s(0.5, 1.0) == 2.0
