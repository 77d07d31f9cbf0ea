"""Figures about a stored graph: totals for the list, the summary by layer and the heaviest ops."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from service.documents import decompress

HEAVIEST = 20
MAX_GROUPS = 60


@dataclass(frozen=True)
class Totals:
    compute_s: float  # forward + backward, reference device, per profiled micro-batch
    param_bytes: float


@dataclass(frozen=True)
class Group:
    name: str
    n_ops: int
    fwd_s: float
    bwd_s: float
    param_bytes: float
    act_bytes: float


@dataclass(frozen=True)
class OpRow:
    id: str
    op: str
    layer: str
    fwd_s: float
    bwd_s: float
    param_bytes: float
    act_bytes: float


_TOTALS: OrderedDict[str, Totals] = OrderedDict()
_LOCK = threading.Lock()


def totals(digest: str, body: bytes) -> Totals:
    """Compute and parameter totals of a graph, remembered by digest (documents never change)."""
    with _LOCK:
        hit = _TOTALS.get(digest)
    if hit is not None:
        return hit
    nodes = decompress(body)["nodes"]
    out = Totals(sum(float(n["fwd_s"]) + float(n.get("bwd_s", 0.0)) for n in nodes),
                 sum(float(n.get("param_bytes", 0.0)) for n in nodes))
    with _LOCK:
        _TOTALS[digest] = out
        while len(_TOTALS) > 4096:
            _TOTALS.popitem(last=False)
    return out


def module_of(layer: str | None, depth: int) -> str:
    """The module path cut to ``depth`` components (``encoder.layer.3`` for depth 3)."""
    if not layer:
        return "(no layer)"
    return ".".join(layer.split(".")[:depth])


def summarize(doc: dict[str, Any], depth: int) -> tuple[list[Group], list[OpRow]]:
    """Ops grouped by module (``layer`` cut to ``depth``; the heaviest groups first, at most
    ``MAX_GROUPS``) and the ``HEAVIEST`` ops by forward + backward time."""
    groups: dict[str, list[float]] = {}
    ops: list[OpRow] = []
    for n in doc["nodes"]:
        row = OpRow(n["id"], n["op"], n.get("layer") or "", float(n["fwd_s"]), float(n.get("bwd_s", 0.0)),
                    float(n.get("param_bytes", 0.0)), float(n.get("act_bytes", 0.0)))
        ops.append(row)
        g = groups.setdefault(module_of(row.layer, depth), [0, 0.0, 0.0, 0.0, 0.0])
        g[0] += 1
        g[1] += row.fwd_s
        g[2] += row.bwd_s
        g[3] += row.param_bytes
        g[4] += row.act_bytes
    out = [Group(name, int(v[0]), v[1], v[2], v[3], v[4]) for name, v in groups.items()]
    out.sort(key=lambda g: -(g.fwd_s + g.bwd_s))
    ops.sort(key=lambda r: -(r.fwd_s + r.bwd_s))
    return out[:MAX_GROUPS], ops[:HEAVIEST]
