"""Pipeline schedules as data: per rank, the ordered list of its compute actions (docs/simulator.md).

A schedule runs ``S = ranks * v`` virtual stages, ``v`` per rank, over ``MB`` micro-batches.  Each
rank executes its :class:`Action` list in order:

* ``F`` forward of one virtual stage for one micro-batch;
* ``B`` the full backward; schedules that split it run ``I`` (gradient of the stage's inputs,
  what the previous stage waits for) and ``W`` (gradient of its weights, which nothing waits for)
  instead, as in zero-bubble pipelining (Qi et al., arXiv 2401.10241, Section 2).

Sends and receives are not listed: they are implied by the data dependencies, exactly as torch
lowers a compute-only schedule (``_add_send_recv``): an ``F`` of stage ``j`` is followed by a send
to the rank of ``j + 1`` and a ``B`` / ``I`` by a send to the rank of ``j - 1`` whenever that rank
differs, and each consumer receives before it computes.

The generators reproduce the compute order of torch's schedule classes
(``torch.distributed.pipelining.schedules``) and their constraints; a differential test compares
them with torch 2.13 for every class.  ``"1f1b"`` keeps Placer's own rule below ``MB < S`` (torch
refuses it; Placer's launcher then runs its own runtime).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.model.errors import InvalidProblem

FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT = "F", "B", "I", "W"
ACTION_KINDS: tuple[str, ...] = (FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT)

# Every schedule Placer can express, in the order of docs/simulator.md.
PIPELINE_SCHEDULES: tuple[str, ...] = (
    "gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv", "dualpipev")
# The torch class that builds each schedule (the differential test and the launcher use these names).
TORCH_SCHEDULE_CLASSES: dict[str, str] = {
    "gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved-1f1b": "ScheduleInterleaved1F1B",
    "looped-bfs": "ScheduleLoopedBFS", "interleaved-zb": "ScheduleInterleavedZeroBubble",
    "zbv": "ScheduleZBVZeroBubble", "dualpipev": "ScheduleDualPipeV",
}
_ACTION_TEXT = re.compile(r"(\d+)([FBIW])(\d+)")
V_SHAPED: frozenset[str] = frozenset({"zbv", "dualpipev"})  # rank r holds stages r and 2R-1-r


class Action(NamedTuple):
    """One compute action: ``kind`` (``F``/``B``/``I``/``W``) of virtual ``stage`` for ``micro_batch``."""

    kind: str
    stage: int
    micro_batch: int

    def __str__(self) -> str:
        """torch's compact form: ``2F0`` = stage 2, forward, micro-batch 0."""
        return f"{self.stage}{self.kind}{self.micro_batch}"

    @staticmethod
    def from_str(text: str) -> Action:
        """The action written ``text`` in the compact form (``2F0``); :class:`InvalidProblem` if it is not one."""
        match = _ACTION_TEXT.fullmatch(text.strip())
        if match is None:
            raise InvalidProblem(f"schedule: {text!r} is not an action such as '2F0' (stage, F/B/I/W, micro-batch)",
                                 field="schedule")
        return Action(match[2], int(match[1]), int(match[3]))


@dataclass(frozen=True)
class PipelineSchedule:
    """A schedule's action lists; ``actions[r]`` runs on rank ``r``, ``stage_rank[j]`` holds stage ``j``."""

    name: str
    ranks: int
    virtual_stages: int  # v, virtual stages per rank
    micro_batches: int
    stage_rank: tuple[int, ...]  # stage_rank[j] = rank that runs virtual stage j (0 <= j < ranks * v)
    actions: tuple[tuple[Action, ...], ...]  # actions[r] = rank r's compute actions, in execution order

    @property
    def n_stages(self) -> int:
        """Virtual stages in all, ``ranks * virtual_stages``."""
        return len(self.stage_rank)

    @property
    def splits_backward(self) -> bool:
        """Whether some backward runs as ``I`` + ``W``."""
        return any(a.kind == BACKWARD_INPUT for acts in self.actions for a in acts)

    def rank_stages(self, rank: int) -> list[int]:
        """The virtual stages of ``rank``, in increasing order."""
        return [j for j, r in enumerate(self.stage_rank) if r == rank]

    def format(self) -> list[str]:
        """One line per rank, actions in torch's compact form (``0F0 0F1 0B0 ...``)."""
        return [" ".join(map(str, acts)) for acts in self.actions]


def check_schedule(schedule: PipelineSchedule) -> None:
    """Check that ``schedule`` runs each stage's ``F`` and its ``B``, or ``I`` and ``W``, once per micro-batch,
    each on the rank holding the stage; raise :class:`InvalidProblem` (``field="schedule"``) naming the action.
    A schedule found valid is remembered (the simulator checks the same built schedules again and again)."""
    _check_once(schedule)


@lru_cache(maxsize=256)  # only a valid schedule is remembered: a raising call caches nothing
def _check_once(schedule: PipelineSchedule) -> None:
    n, mb = schedule.n_stages, schedule.micro_batches
    if len(schedule.actions) != schedule.ranks or sorted(set(schedule.stage_rank)) != list(range(schedule.ranks)):
        raise InvalidProblem(f"schedule: {schedule.name!r} needs one action list and at least one stage per rank",
                             field="schedule")
    done = {kind: [False] * (n * mb) for kind in ACTION_KINDS}  # done[kind][j * MB + m]: action listed
    for r, acts in enumerate(schedule.actions):
        for a in acts:
            kind, j, m = a
            if kind not in done or not 0 <= j < n or not 0 <= m < mb:
                raise InvalidProblem(f"schedule: rank {r}'s action {a} is not an F, B, I or W of a stage below {n} "
                                     f"and a micro-batch below {mb}", field="schedule")
            if done[kind][j * mb + m] or schedule.stage_rank[j] != r:
                where = "twice" if done[kind][j * mb + m] else f"on rank {r}, but stage {j} is on rank {schedule.stage_rank[j]}"
                raise InvalidProblem(f"schedule: action {a} runs {where}", field="schedule")
            done[kind][j * mb + m] = True
    f, b, i, w = (done[kind] for kind in (FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT))
    for k in range(n * mb):
        if not f[k] or (b[k], i[k], w[k]) not in ((True, False, False), (False, True, True)):
            raise InvalidProblem(f"schedule: stage {k // mb}, micro-batch {k % mb} needs one F and either one B or "
                                 "one I and one W", field="schedule")


def stage_ranks(name: str, ranks: int, virtual_stages: int) -> tuple[int, ...]:
    """Rank of each virtual stage: round-robin (``j mod R``), or V-shaped for ZBV and DualPipeV."""
    n = ranks * virtual_stages
    if name in V_SHAPED:
        return tuple(j if j < ranks else n - 1 - j for j in range(n))
    return tuple(j % ranks for j in range(n))


@lru_cache(maxsize=256)  # a schedule is immutable data; solvers and the simulator ask for the same ones often
def build_schedule(name: str, ranks: int, virtual_stages: int, micro_batches: int) -> PipelineSchedule:
    """The action lists of schedule ``name`` for ``ranks`` ranks, ``v`` stages per rank, ``MB`` micro-batches.

    Raises
    ------
    InvalidProblem
        ``name`` is unknown (the message lists :data:`PIPELINE_SCHEDULES`), or a count breaks the
        schedule's rule (the ``field`` names the setting): GPipe and 1F1B take ``v = 1``; ZBV and
        DualPipeV ``v = 2``; DualPipeV ``MB >= 2 R``; interleaved 1F1B and interleaved zero-bubble
        ``MB`` a multiple of ``max(1, MB // R)`` (torch's rounds).
    """
    _check_counts(name, ranks, virtual_stages, micro_batches)
    build = _BUILDERS[name]
    actions = tuple(tuple(build(r, ranks, virtual_stages, micro_batches)) for r in range(ranks))
    return PipelineSchedule(name, ranks, virtual_stages, micro_batches, stage_ranks(name, ranks, virtual_stages),
                            actions)


def _check_counts(name: str, ranks: int, v: int, mb: int) -> None:
    if name not in _BUILDERS:
        raise InvalidProblem(f"schedule: must be one of {', '.join(PIPELINE_SCHEDULES)}, got {name!r}",
                             field="schedule")
    for field, value in (("ranks", ranks), ("virtual_stages", v), ("micro_batches", mb)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidProblem(f"{field}: must be an integer >= 1, got {value!r}", field=field)
    if name in ("gpipe", "1f1b") and v != 1:
        raise InvalidProblem(f"virtual_stages: schedule {name!r} runs one stage per rank, got {v}",
                             field="virtual_stages")
    if name in V_SHAPED and v != 2:
        raise InvalidProblem(f"virtual_stages: schedule {name!r} runs exactly 2 stages per rank, got {v}",
                             field="virtual_stages")
    if name == "dualpipev" and mb < 2 * ranks:
        raise InvalidProblem(f"micro_batches: schedule 'dualpipev' needs at least 2 x ranks = {2 * ranks} "
                             f"micro-batches, got {mb}", field="micro_batches")
    rounds = max(1, mb // ranks)
    if name in ("interleaved-1f1b", "interleaved-zb") and mb % rounds:
        raise InvalidProblem(f"micro_batches: schedule {name!r} needs micro-batches a multiple of "
                             f"max(1, micro_batches // ranks) = {rounds}, got {mb}", field="micro_batches")


def _gpipe(rank: int, ranks: int, v: int, mb: int) -> list[Action]:
    return [Action(FORWARD, rank, m) for m in range(mb)] + [Action(BACKWARD, rank, m) for m in range(mb)]


def _one_f_one_b(rank: int, ranks: int, v: int, mb: int) -> list[Action]:
    """``w = min(R - r - 1, MB)`` warm-up forwards, then F/B alternately, then the remaining backwards."""
    warm = min(ranks - rank - 1, mb)
    out = [Action(FORWARD, rank, m) for m in range(warm)]
    for i in range(mb - warm):
        out += [Action(FORWARD, rank, warm + i), Action(BACKWARD, rank, i)]
    return out + [Action(BACKWARD, rank, m) for m in range(mb - warm, mb)]


def _looped_bfs(rank: int, ranks: int, v: int, mb: int) -> list[Action]:
    """Breadth first (Lamy-Poirier, arXiv 2211.05953): every forward of each local stage in turn, then the
    backwards stage by stage from the last, micro-batches in reverse."""
    stages = range(rank, ranks * v, ranks)
    out = [Action(FORWARD, j, m) for j in stages for m in range(mb)]
    return out + [Action(BACKWARD, j, m) for j in reversed(stages) for m in reversed(range(mb))]


def _interleaved(rank: int, ranks: int, v: int, mb: int, zero_bubble: bool) -> list[Action]:
    """Interleaved 1F1B (Narayanan et al., arXiv 2104.04473, Section 2.2) in torch's flexible form:
    rounds of ``MB // max(1, MB // R)`` micro-batches per local stage; with ``zero_bubble`` the ZB-1P
    schedule (arXiv 2401.10241, Section 3): ``I`` instead of ``B``, one warm-up forward per hop
    instead of two, and a ``W`` after each steady-state step once ``rank`` steps have passed."""
    per_round = mb // max(1, mb // ranks)
    warmup = min((v - 1) * per_round + (1 if zero_bubble else 2) * (ranks - 1 - rank), mb * v)
    steady = mb * v - warmup  # steps with one forward and one backward; the cooldown has ``warmup``
    backward_kind = BACKWARD_INPUT if zero_bubble else BACKWARD

    def forward_stage(step: int) -> int:
        return (step // per_round) % v * ranks + rank

    def backward_stage(step: int) -> int:
        return (v - 1 - (step - warmup) // per_round % v) * ranks + rank

    next_mb: dict[tuple[str, int], int] = defaultdict(int)  # (kind, stage) -> its next micro-batch

    def action(kind: str, stage: int) -> Action:
        m = next_mb[(kind, stage)]
        next_mb[(kind, stage)] = m + 1
        return Action(kind, stage, m)

    out: list[Action] = []
    backward_steps: list[int] = []  # steps whose backward ran, in order (their W follow in this order)
    weights_done = 0
    for step in range(mb * v + warmup):
        if step < warmup + steady:
            out.append(action(FORWARD, forward_stage(step)))
        if step >= warmup:
            out.append(action(backward_kind, backward_stage(step)))
            backward_steps.append(step)
            if zero_bubble and step - warmup >= rank:
                out.append(action(BACKWARD_WEIGHT, backward_stage(backward_steps[weights_done])))
                weights_done += 1
    if zero_bubble:
        out += [action(BACKWARD_WEIGHT, backward_stage(s)) for s in backward_steps[weights_done:]]
    return out


def _interleaved_1f1b(rank: int, ranks: int, v: int, mb: int) -> list[Action]:
    return _interleaved(rank, ranks, v, mb, zero_bubble=False)


def _interleaved_zb(rank: int, ranks: int, v: int, mb: int) -> list[Action]:
    return _interleaved(rank, ranks, v, mb, zero_bubble=True)


def _zbv(rank: int, ranks: int, v: int, mb: int) -> list[Action]:
    """ZB-V (arXiv 2401.10241, Section 6): stages ``r`` and ``2R-1-r``; built for
    ``max(2R-1, MB)`` micro-batches, the ones beyond ``MB`` then dropped (as torch does)."""
    n_micro = max(2 * ranks - 1, mb)
    s0, s1 = rank, 2 * ranks - 1 - rank
    count: dict[tuple[str, int], int] = defaultdict(int)
    out: list[Action] = []

    def add(kind: str, stage: int, m: int | None = None) -> None:
        if m is None:
            m = count[(kind, stage)]
            count[(kind, stage)] = m + 1
        out.append(Action(kind, stage, m))

    for _ in range(2 * (ranks - rank) - 1):
        add(FORWARD, s0)
    for _ in range(rank):
        add(FORWARD, s1)
        add(FORWARD, s0)
    for _ in range(ranks - rank):
        add(FORWARD, s1)
        add(BACKWARD_INPUT, s1)
        add(BACKWARD_WEIGHT, s1)
    while count[(FORWARD, s1)] < count[(FORWARD, s0)] or count[(FORWARD, s0)] < n_micro:
        if count[(FORWARD, s0)] < n_micro:
            add(FORWARD, s0)
        add(BACKWARD_INPUT, s0)
        add(BACKWARD_WEIGHT, s0)
        add(FORWARD, s1)
        add(BACKWARD_INPUT, s1)
        add(BACKWARD_WEIGHT, s1)
    for _ in range(rank):
        add(BACKWARD_INPUT, s0)
        add(BACKWARD_INPUT, s1)
    for _ in range(ranks - rank):
        add(BACKWARD_INPUT, s0)
        add(BACKWARD_WEIGHT, s0)
    for stage in (s1, s0):
        while count[(BACKWARD_WEIGHT, stage)] < count[(BACKWARD_INPUT, stage)]:
            add(BACKWARD_WEIGHT, stage)
    return [a for a in out if a.micro_batch < mb]


def _dualpipev(rank: int, ranks: int, v: int, mb: int) -> list[Action]:
    """DualPipeV (DeepSeek-V3, arXiv 2412.19437, Section 3.2.1, in its one-direction "V" form) as torch
    builds it.  torch's overlapped forward+backward pairs (``OVERLAP_F_B``) run their forward, then
    their backward, one after the other; they are listed here as those two actions."""
    s0, s1 = rank, 2 * ranks - 1 - rank
    count: dict[tuple[str, int], int] = defaultdict(int)  # (F or I, stage) -> next micro-batch
    weights: list[tuple[int, int]] = []  # (stage, micro-batch) of each I whose W is still to run
    out: list[Action] = []

    def add(kind: str, stage: int) -> None:
        key = (BACKWARD_INPUT if kind == BACKWARD else kind, stage)
        m = count[key]
        count[key] = m + 1
        out.append(Action(kind, stage, m))
        if kind == BACKWARD_INPUT:
            weights.append((stage, m))

    def add_weight() -> None:
        if weights:
            stage, m = weights.pop(0)
            out.append(Action(BACKWARD_WEIGHT, stage, m))

    for _ in range((ranks - rank - 1) * 2):
        add(FORWARD, s0)
    for _ in range(rank + 1):
        add(FORWARD, s0)
        add(FORWARD, s1)
    for _ in range(ranks - rank - 1):
        add(BACKWARD_INPUT, s1)
        add_weight()
        add(FORWARD, s1)
    for _ in range(mb - ranks * 2 + rank + 1):  # the main phase: F0 B1, F1 B0 (overlapped pairs)
        add(FORWARD, s0)
        add(BACKWARD, s1)
        add(FORWARD, s1)
        add(BACKWARD, s0)
    for _ in range(ranks - rank - 1):
        add(BACKWARD, s1)
        add(FORWARD, s1)
        add(BACKWARD, s0)
    split = False  # the second half of the last backwards run as I, their W later
    for i in range(rank + 1):
        split = split or (i == (rank + 1) // 2 and rank % 2 == 1)
        add(BACKWARD_INPUT if split else BACKWARD, s1)
        split = split or (i == (rank + 1) // 2 and rank % 2 == 0)
        add(BACKWARD_INPUT if split else BACKWARD, s0)
    for _ in range(ranks - rank - 1):
        add_weight()
        add(BACKWARD_INPUT if split else BACKWARD, s0)
    for _ in range(rank + 1):
        add_weight()
    return out


_BUILDERS: dict[str, Callable[[int, int, int, int], list[Action]]] = {
    "gpipe": _gpipe, "1f1b": _one_f_one_b, "interleaved-1f1b": _interleaved_1f1b, "looped-bfs": _looped_bfs,
    "interleaved-zb": _interleaved_zb, "zbv": _zbv, "dualpipev": _dualpipev,
}


def peak_held_bytes(schedule: PipelineSchedule, held_bytes: Sequence[float], retained: float = 0.0) -> list[float]:
    """Per rank, the most activation bytes it holds at once; ``held_bytes[j]`` = one micro-batch of stage ``j``.

    An ``F`` takes its micro-batch's activations; a ``B`` frees them; a split backward frees them
    at its ``W`` (the weight gradient still reads the stage's inputs, so zero-bubble schedules hold
    activations until ``W``), an ``I`` frees nothing.  A free gives back ``1 - retained`` of them: a
    calibration's share of a finished micro-batch that the runtime still holds within the iteration
    (``memory.retained``; under 1F1B the peak is then ``k + retained (MB - k)`` micro-batches, as
    :func:`solvers.cost.memory.held_micro_batches` counts).  A rank runs its actions one at a time, so the
    peak depends on the order only, not on timing.  Each rank's running sum is one ``cumsum`` over its
    actions (the same additions, in the same order, as one at a time).
    """
    held = np.asarray(held_bytes, dtype=np.float64)
    out = []
    for stages, signs in _held_deltas(schedule):
        scaled = np.where(signs < 0, signs * (1.0 - retained), signs) if retained else signs
        running = np.cumsum(held[stages] * scaled)
        out.append(max(0.0, float(running.max())) if len(running) else 0.0)
    return out


@lru_cache(maxsize=256)
def _held_deltas(schedule: PipelineSchedule) -> tuple[tuple[IntArray, FloatArray], ...]:
    """Per rank, the stage of each action and its sign on the held bytes (+1 ``F``; -1 ``B``, ``W``; 0 ``I``)."""
    out = []
    for acts in schedule.actions:
        stages = np.fromiter((j for _, j, _ in acts), dtype=np.int64, count=len(acts))
        signs = np.fromiter((1.0 if kind == FORWARD else 0.0 if kind == BACKWARD_INPUT else -1.0
                             for kind, _, _ in acts), dtype=np.float64, count=len(acts))
        out.append((stages, signs))
    return tuple(out)
