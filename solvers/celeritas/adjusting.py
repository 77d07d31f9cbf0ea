"""Adjusting Placement (Celeritas Algorithm 2) as one loop over the list schedule.

:func:`solvers.celeritas.place.adjusting_place` places each node with two calls into the shared
list schedule, :meth:`~solvers.listsched.ListSchedule.est_all` (Eq. 7 on every device, exact
where the EST may be least and on ``d_k``) and :meth:`~solvers.listsched.ListSchedule.commit`.
Each call sets up its locals again and passes its figures through the schedule's fields; without
that, the placement of 36,352 nodes takes a quarter to a third less CPU (docs/benchmarks.md, "Celeritas").
:meth:`AdjustingSchedule.place_all` computes the same figures in one loop with the locals set up
once: the messages of a node, its data-ready time on each device that may hold it, the insertion
slot (the first steps of :class:`~solvers.listsched.timeline.Timeline`'s search inlined), the
choice of Eq. 9 and the commit (the timeline, the channels into the device and its memory).  It
is the same computation term by term, so the
devices and start times are the same as those of the two calls (a test compares them, and
``tests/solvers/celeritas/test_same_plans.py`` pins the placements).  What the loop does not
cover goes through the two calls: a pinned node, a node that no device holds (best effort), and
postal planning (:func:`~solvers.listsched.postal_planning`), where messages do not queue.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence

from solvers.listsched import ListSchedule
from solvers.listsched.schedule import Ready
from solvers.listsched.timeline import Timeline

_INF = float("inf")


class AdjustingSchedule(ListSchedule):
    """A list schedule that Adjusting Placement fills in one loop (module doc)."""

    def place_all(self, order: Sequence[int], pins: Mapping[int, int], back_s: Sequence[float],
                  move_threshold: float) -> None:
        """Place every node of ``order`` by Algorithm 2 (lines 5–19): ``d_k`` is the device of
        the node placed before (none for the first node: the earliest device), ``d_1`` the device
        of the least EST (ties: the one that finishes the node first, then the lowest index); the
        node moves to ``d_1`` only if ``EST(d_k) - EST(d_1) > move_threshold * back_s[v]`` (Eq. 8,
        9).  ``pins`` place a node on its device whatever its EST."""
        if not self.costs.channel_queues:
            self._place_each(order, pins, back_s, move_threshold)
            return
        n_dev = self.n_devices
        devices = self._devices
        keep_first = self._keep_first
        preds, pred_bytes = self.tasks.pred, self.tasks.pred_bytes
        finish, device, start_s = self.finish_s, self.device, self.start_s
        finish_of, device_of = finish.__getitem__, device.__getitem__
        dur_all, add_all, work_all = self._dur_s, self._add_bytes, self._work_bytes
        lat, inv, f = self._latency_s, self._inv_bandwidth_sPB, self.costs.msg_factor
        arrival, chan_free = self._arrival, self._chan_free
        lines, free_s = self._lines, self.free_s
        first_gap = Timeline.first_gap
        mem = self.mem
        mem_add, mem_work, limits = mem.add_bytes, mem.work_bytes, mem.limits
        roomy, add_max, work_max = self._roomy, self._add_max, self._work_max
        prev = -1
        for v in order:
            if pins and v in pins:
                prev = pins[v]
                self.commit_forced(v, prev, True)
                continue
            # v's messages in the order they take their channels (ListSchedule._messages)
            pred = preds[v]
            if len(pred) == 1:
                p = pred[0]
                msgs = [(finish[p], p, device[p], pred_bytes[v][0])]
            elif len(pred) == 2:  # the sort of two, written out: by finish, then producer
                p, q = pred
                fp, fq = finish[p], finish[q]
                bp, bq = pred_bytes[v]
                if fq < fp or (fq == fp and q < p):
                    msgs = [(fq, q, device[q], bq), (fp, p, device[p], bp)]
                else:
                    msgs = [(fp, p, device[p], bp), (fq, q, device[q], bq)]
            else:
                msgs = sorted(zip(map(finish_of, pred), pred, map(device_of, pred), pred_bytes[v]))
            add, work = add_all[v], work_all[v]
            if self._n_roomy == n_dev:
                fitting = devices if prev < 0 else keep_first[prev]
            else:  # MemoryTracker.fits, inlined
                fitting = [d for d in range(n_dev) if not mem_add[d] + add + max(mem_work[d], work) > limits[d]]
                if prev in fitting:
                    fitting = [prev, *(d for d in fitting if d != prev)]
            dur_v = dur_all[v]
            est = [_INF] * n_dev  # exact where it may be least and on d_k (ListSchedule.est_all's keep)
            found: list[Ready | None] = [None] * n_dev
            least = _INF
            for d in fitting:
                # data-ready time on d, with the arrivals and channels its new messages book (ListSchedule._ready_on)
                t = 0.0
                arrived = arrival[d]
                chan: list[float] | None = None
                booked: list[tuple[int, float]] | None = None
                for fin, p, dp, size in msgs:
                    if dp == d:
                        if fin > t:
                            t = fin
                        continue
                    hit = arrived[p]
                    if hit is not None:
                        if hit > t:
                            t = hit
                        continue
                    comm = f * (lat[dp][d] + size * inv[dp][d]) if size > 0.0 else 0.0
                    if comm <= 0.0:
                        if fin > t:
                            t = fin
                        continue
                    if chan is None:
                        chan = chan_free[d][:]
                        booked = []
                    a = chan[dp]
                    if fin > a:
                        a = fin
                    a += comm
                    chan[dp] = a
                    booked.append((p, a))  # type: ignore[union-attr]  # set with chan
                    if a > t:
                        t = a
                if t > least and d != prev:
                    est[d] = t  # a lower bound above the least: d is not chosen
                    continue
                # the insertion slot (Timeline.slot_s and gap_from, inlined), or a lower bound above the least
                line = lines[d]
                if t >= line.last_end:  # after the last task
                    e = t
                else:
                    dur = dur_v[d]
                    if dur <= 0.0:
                        e = line.slot_s(t, dur)
                    elif line.first_start - t >= dur:  # before the first task
                        e = t
                    else:
                        gap_a, gap_b = line.gap_a, line.gap_b
                        i = bisect_right(gap_b, t)  # the first gap that ends after t
                        if i < len(gap_b) and gap_a[i] <= t:  # t falls in gap i
                            if gap_b[i] - t >= dur:
                                i = -1
                            else:
                                i += 1
                        if i < 0:
                            e = t
                        elif d != prev and (gap_a[i] if i < len(gap_a) else line.last_end) > least:
                            est[d] = gap_a[i] if i < len(gap_a) else line.last_end  # Timeline.bound_s
                            continue
                        else:
                            e = first_gap(line, i, dur)
                est[d] = e
                found[d] = (e, booked, chan)
                if e < least:
                    least = e
            # Eq. 9
            if est.count(least) == 1:
                d1 = est.index(least)
            else:
                d1 = min(devices, key=lambda d: (est[d], est[d] + dur_v[d], d))
            d_k = d1 if prev < 0 else prev
            if est[d_k] - est[d1] > move_threshold * back_s[v]:  # inf - finite > cost: d_k is full
                choice = d1
            elif est[d_k] < _INF:
                choice = d_k
            else:  # no device holds v
                prev = mem.most_free()
                self.commit(v, prev, True, True)
                continue
            picked = found[choice]
            assert picked is not None  # d_1 and d_k are timed exactly
            start, booked, chan = picked
            if chan is not None:  # book v's messages (ListSchedule._ready_s)
                arrived = arrival[choice]
                for p, a in booked:  # type: ignore[union-attr]  # set with chan
                    arrived[p] = a
                chan_free[choice] = chan
            end = start + dur_v[choice]
            device[v], start_s[v], finish[v] = choice, start, end
            lines[choice].insert(start, end)  # ListSchedule._insert and _account, inlined
            if end > free_s[choice]:
                free_s[choice] = end
            mem_add[choice] += add
            if work > mem_work[choice]:
                mem_work[choice] = work
            if roomy[choice] and not (mem_add[choice] + add_max) + (mem_work[choice] + work_max) <= limits[choice]:
                roomy[choice] = False
                self._n_roomy -= 1
            prev = choice
        self._ready_v = -1

    def _place_each(self, order: Sequence[int], pins: Mapping[int, int], back_s: Sequence[float],
                    move_threshold: float) -> None:
        """:meth:`place_all` with a call of ``est_all`` and ``commit`` per node (any channel model)."""
        devices = self._devices
        dur = self._dur_s
        prev = -1
        for v in order:
            if pins and v in pins:
                prev = pins[v]
                self.commit_forced(v, prev, True)
                continue
            est = self.est_all(v, prev)  # exact where it may be least and on d_k, the only ones read below
            # ties on EST (e.g. every device idle) go to the device that finishes v first
            first = min(est)
            if est.count(first) == 1:
                d1 = est.index(first)
            else:
                dur_v = dur[v]
                d1 = min(devices, key=lambda d: (est[d], est[d] + dur_v[d], d))
            d_k = d1 if prev < 0 else prev
            if est[d_k] - est[d1] > move_threshold * back_s[v]:  # inf - finite > cost: d_k is full
                choice, effort = d1, False
            elif est[d_k] < _INF:
                choice, effort = d_k, False
            else:
                choice, effort = self.mem.most_free(), True
            self.commit(v, choice, True, effort)
            prev = choice
