"""The discrete-event core of the op-level simulator: tasks on groups, messages on channels.

Tasks are block-structured so that per-task data is stored once per *template*: with ``n``
items (ops, or stages for pipeline units), ``P`` passes and ``MB`` micro-batches, task
``t = (p * MB + m) * n + i`` is item ``i``'s pass ``p`` for micro-batch ``m``, and its template
is ``k = p * n + i``.  Successors are stored as task-id deltas, valid for every micro-batch.

A group runs one task at a time.  A group with a fixed sequence runs it in that order, each task
starting at ``max(group free, inputs arrived)``; any other group is a non-idling list scheduler:
when free it takes, among the tasks whose inputs have all arrived, the one with the smallest key
``(ready time, priority)``.  Events at one instant are all processed (completions first, by task
id) before free groups choose (by group id), so a choice sees every task ready at that instant.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from solvers.model.errors import InvalidPlan
from solvers.simulator._channels import ChannelTable, Transfers
from solvers.simulator.result import TimelineEntry


@dataclass
class EventGraph:
    """Templates of a block-structured task set (see the module doc for the indexing)."""

    n_items: int
    n_passes: int
    micro_batches: int
    group_of: list[int]  # group_of[i] = group that runs item i (in every pass)
    group_devices: list[list[int]]  # group_devices[g] = device positions of group g
    duration_s: list[float]  # duration_s[k] = time of template k on its group
    local: list[list[int]]  # local[k] = deltas to tasks of the same group that may start when this one ends
    messages: list[list[tuple[Transfers, list[int]]]]  # messages[k] = (transfers, consumer deltas)
    n_inputs: list[int]  # n_inputs[k] = local predecessors + messages a task must wait for
    priority: list[int]  # priority[k] = tie-break rank within a block (list-scheduled groups; may be empty without)
    sequences: list[list[int] | None] = field(default_factory=list)  # sequences[g] = fixed task order


def run_tasks(tg: EventGraph, channels: ChannelTable, label: Callable[[int], str] | None = None,
              log: list[TimelineEntry] | None = None,
              transfer_label: Callable[[int, int], str] | None = None) -> list[float]:
    """Simulate every task; return ``last_end[g]``, the end of group ``g``'s last task.

    ``log`` receives every task interval (named by ``label``: task id -> name) and every
    transfer (named by ``transfer_label``: (sender task, first consumer task) -> name).
    Raises :class:`InvalidPlan` when fixed sequences deadlock (an order against the dependencies).
    This is the hot loop of the op-level engine: it is one function over flat lists on purpose
    (no per-task objects, no method calls per task), which keeps 400k tasks to about a second.
    """
    if log is None and _sequenced(tg):
        return _run_sequenced(tg, channels, label)
    n, mb = tg.n_items, tg.micro_batches
    block = mb * n
    n_tasks = tg.n_passes * block
    n_groups = len(tg.group_devices)
    group_of, duration, priority = tg.group_of, tg.duration_s, tg.priority
    waiting = _waiting(tg)
    ready = [0.0] * n_tasks  # ready[t] = latest arrival among task t's inputs so far
    sequences = tg.sequences or [None] * n_groups
    pointer = [0] * n_groups  # pointer[g] = next position in sequences[g]
    queues: list[list[tuple[float, int, int]]] = [[] for _ in range(n_groups)]  # (ready, priority, task)
    busy = [False] * n_groups
    last_end = [0.0] * n_groups
    events: list[tuple[float, int, int]] = []  # (time, 0 = task end | 1 = group wake-up, task | group)
    pending: set[int] = set(range(n_groups))  # groups to offer work to at the current instant
    push, pop = heapq.heappush, heapq.heappop
    send = channels.send
    names = None if log is None else [channels.topology.devices[d].id for d in range(channels.topology.n_devices)]

    outputs = _outputs(tg)
    for u in range(n_tasks):
        if waiting[u] == 0:
            g = group_of[u % n]
            if sequences[g] is None:
                push(queues[g], (0.0, u - u % n + priority[(u // block) * n + u % n], u))
    done = 0
    now = 0.0
    while True:
        for g in (sorted(pending) if len(pending) > 1 else pending):
            if busy[g]:
                continue
            seq = sequences[g]
            if seq is None:
                queue = queues[g]
                if not queue:
                    continue
                r = queue[0][0]
                if r > now:
                    push(events, (r, 1, g))
                    continue
                t = pop(queue)[2]
            else:
                if pointer[g] >= len(seq):
                    continue
                t = seq[pointer[g]]
                if waiting[t]:
                    continue
                if ready[t] > now:
                    push(events, (ready[t], 1, g))
                    continue
                pointer[g] += 1
            busy[g] = True
            end = now + duration[(t // block) * n + t % n]
            push(events, (end, 0, t))
            if log is not None and label is not None:
                for d in tg.group_devices[g]:
                    log.append(TimelineEntry(names[d], label(t), now, end))  # type: ignore[index]
        pending.clear()
        if not events:
            break
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, x = pop(events)
            if kind:
                pending.add(x)
                continue
            done += 1
            i = x % n
            g = group_of[i]
            busy[g] = False
            last_end[g] = now
            pending.add(g)
            k = (x // block) * n + i
            for transfers, consumers in outputs[k]:
                if transfers is None:
                    arrival = now
                elif log is None:
                    arrival = send(transfers, now)
                else:
                    name = transfer_label(x, x + consumers[0]) if transfer_label else ""
                    arrival = channels.send_logged(transfers, now, name, log)
                for delta in consumers:
                    u = x + delta
                    waiting[u] -= 1
                    if arrival > ready[u]:
                        ready[u] = arrival
                    if waiting[u]:
                        continue
                    h = group_of[u % n]  # u is resolved: queue it, or wake its group if it is next
                    seq = sequences[h]
                    if seq is None:
                        push(queues[h], (ready[u], u - u % n + priority[(u // block) * n + u % n], u))
                        pending.add(h)
                    elif seq[pointer[h]] == u:
                        pending.add(h)
    if done < n_tasks:
        _deadlock(tg, pointer, label)
    return last_end


Outputs = list[list[tuple[Transfers | None, list[int]]]]


def _outputs(tg: EventGraph) -> Outputs:
    """``outputs[k]`` = (transfers, or None for a local hand-over; consumer deltas) of template ``k``."""
    return [[(None, loc), *msgs] if loc else [*msgs] for loc, msgs in zip(tg.local, tg.messages, strict=True)]


def _waiting(tg: EventGraph) -> list[int]:
    """Per task: the inputs it waits for (local predecessors and messages)."""
    n, mb = tg.n_items, tg.micro_batches
    if mb == 1:
        return list(tg.n_inputs)
    return [c for p in range(tg.n_passes) for c in tg.n_inputs[p * n:(p + 1) * n] * mb]


def _sequenced(tg: EventGraph) -> bool:
    """Whether every group runs a fixed sequence and no device serves two groups, so that each
    channel carries the messages of one group only (:func:`_run_sequenced`)."""
    if not tg.sequences or any(seq is None for seq in tg.sequences):
        return False
    devices = [d for devs in tg.group_devices for d in devs]
    return len(devices) == len(set(devices))


def _run_sequenced(tg: EventGraph, channels: ChannelTable, label: Callable[[int], str] | None) -> list[float]:
    """:func:`run_tasks` when every group runs a fixed sequence (:func:`_sequenced`), without the
    event queue: the same start and end of every task and the same transfers.

    A task of a sequenced group starts at ``max(end of the group's previous task, arrival of its
    last input)``, whatever else happens at that instant, and a channel serves its transfers in
    the order its one sending group runs its tasks.  So the groups can be advanced one at a time,
    each as far as its next task's inputs have all arrived, in any order that respects the
    dependencies: every start, end, channel booking and arrival is the same sum and maximum of
    the same numbers as in the event loop.  A group whose next task is resolved by another
    group's task is resumed then; tasks left over mean the sequences deadlock."""
    n, mb = tg.n_items, tg.micro_batches
    block = mb * n
    n_tasks = tg.n_passes * block
    duration = tg.duration_s
    group_of = tg.group_of * (tg.n_passes * mb)  # group_of[t] = group of task t
    template = list(range(n_tasks)) if mb == 1 else [(t // block) * n + t % n for t in range(n_tasks)]
    sequences = [seq for seq in tg.sequences if seq is not None]
    n_groups = len(sequences)
    waiting = _waiting(tg)
    ready = [0.0] * n_tasks  # ready[t] = latest arrival among task t's inputs so far
    pointer = [0] * n_groups  # pointer[g] = next position in sequences[g]
    free = [0.0] * n_groups  # free[g] = end of group g's last task
    local, messages = tg.local, tg.messages
    channel_free = channels.free_s
    runnable = [g for g in range(n_groups) if sequences[g] and not waiting[sequences[g][0]]][::-1]
    done = 0
    while runnable:
        g = runnable.pop()
        seq, p, now = sequences[g], pointer[g], free[g]
        length = len(seq)
        while p < length:
            x = seq[p]
            if waiting[x]:
                break
            r = ready[x]
            k = template[x]
            now = (r if r > now else now) + duration[k]
            p += 1
            for delta in local[k]:
                # a task of group g, later in its sequence: it starts after g's clock, which is
                # past now, so its ready time needs no raise; g's own loop takes it up
                waiting[x + delta] -= 1
            for transfers, consumers in messages[k]:
                arrival = now
                for cid, dur in transfers:  # ChannelTable.send, inlined
                    if dur > 0.0:
                        start = channel_free[cid]
                        if start < now:
                            start = now
                        end = channel_free[cid] = start + dur
                        if end > arrival:
                            arrival = end
                for delta in consumers:
                    u = x + delta
                    left = waiting[u] = waiting[u] - 1
                    if arrival > ready[u]:
                        ready[u] = arrival
                    if not left:
                        h = group_of[u]
                        if h != g and pointer[h] < len(sequences[h]) and sequences[h][pointer[h]] == u:
                            runnable.append(h)
        done += p - pointer[g]
        pointer[g], free[g] = p, now
    if done < n_tasks:
        _deadlock(tg, pointer, label)
    return free


def _deadlock(tg: EventGraph, pointer: list[int], label: Callable[[int], str] | None) -> None:
    for g, seq in enumerate(tg.sequences):
        if seq is not None and pointer[g] < len(seq):
            t = seq[pointer[g]]
            name = label(t) if label else str(t)
            raise InvalidPlan(f"order: group {g} waits forever at task {name}: the order runs an op before "
                              "one of its inputs can exist", field="order")
    raise InvalidPlan("the task graph deadlocks", field="stages")  # pragma: no cover
