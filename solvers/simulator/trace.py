"""A simulated timeline as a Chrome trace: the JSON object format of the Trace Event Format that
chrome://tracing and Perfetto open (the format PyTorch's profiler exports).

Every interval is a complete event (``ph: "X"``, microseconds).  Devices are the threads of
process 1 ("devices"), channels (``gpu0->gpu1``) those of process 2 ("channels"), named by metadata
events.  A pipeline task is named by what it is (``forward s2 mb3``, ``weight-grad s2 mb3``), its
``cat`` is its :func:`category`, and its ``args`` hold the entry's task label, ``kind``, ``stage``,
``chunk``, ``rank`` and ``micro_batch`` (those that are set).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from solvers.simulator.result import TASK_FIELDS, TimelineEntry

PID_DEVICES = 1
PID_CHANNELS = 2
# a task kind -> its trace category (also the dashboard's colour key) and the word its name starts with
KIND_CATEGORIES: dict[str, str] = {"F": "forward", "B": "backward", "I": "backward-input",
                                   "W": "backward-weight", "allreduce": "allreduce", "transfer": "transfer"}
KIND_WORDS: dict[str, str] = {"F": "forward", "B": "backward", "I": "input-grad", "W": "weight-grad"}


def category(entry: TimelineEntry) -> str:
    """``forward``, ``backward`` (full), ``backward-input`` (I), ``backward-weight`` (W),
    ``recompute``, ``allreduce``, ``transfer`` or ``op`` (op-level tasks are named by their op)."""
    if entry.kind is not None:
        return KIND_CATEGORIES.get(entry.kind, "op")
    if "->" in entry.resource:
        return "transfer"
    return task_category(entry.task)


def task_category(task: str) -> str:
    """The category read from a task label alone (``F3``, ``B3``, ``R3``, ``allreduce``, an op name)."""
    if task == "allreduce":
        return "allreduce"
    if len(task) > 1 and task[1:].split(" ")[0].isdigit():
        return {"F": "forward", "B": "backward", "R": "recompute"}.get(task[0], "op")
    return "op"


def event_name(entry: TimelineEntry) -> str:
    """What the trace calls the interval: ``forward s2 mb3`` for a pipeline action, else the task label
    (a message ``F3 s2->s3``, ``allreduce``, an op)."""
    word = KIND_WORDS.get(entry.kind or "")
    if word is None or entry.stage is None or entry.micro_batch is None:
        return entry.task
    return f"{word} s{entry.stage} mb{entry.micro_batch}"


def chrome_trace(entries: Iterable[TimelineEntry], other_data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The timeline ``entries`` as a Trace Event Format object (see the module doc); ``other_data``
    goes to its ``otherData``."""
    tids: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    for e in entries:
        tid = tids.setdefault(e.resource, len(tids) + 1)
        channel = "->" in e.resource
        args: dict[str, Any] = {"task": e.task}
        args.update({name: getattr(e, name) for name in TASK_FIELDS if getattr(e, name) is not None})
        events.append({"name": event_name(e), "cat": category(e), "ph": "X", "ts": e.start_s * 1e6,
                       "dur": max(0.0, e.end_s - e.start_s) * 1e6, "pid": PID_CHANNELS if channel else PID_DEVICES,
                       "tid": tid, "args": args})
    meta: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": PID_DEVICES, "tid": 0, "args": {"name": "devices"}},
        {"name": "process_name", "ph": "M", "pid": PID_CHANNELS, "tid": 0, "args": {"name": "channels"}},
    ]
    for resource, tid in tids.items():
        pid = PID_CHANNELS if "->" in resource else PID_DEVICES
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": resource}})
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"source": "placer simulator", **(other_data or {})}}
