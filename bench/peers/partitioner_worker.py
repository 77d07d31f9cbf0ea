"""One outside partitioner, run in the peers' virtual environment (never imported by Placer).

Reads one JSON request on stdin, writes one JSON answer on stdout:

* ``{"peer": "pipedream", "repo": DIR, "profile": FILE, "machines": [4, 4], "bandwidths_Bps": [...],
  "memory_bytes": M}`` runs PipeDream's ``optimizer/optimizer_graph_hierarchical.py`` (its ``main``,
  with ``--activation_compression_ratio 1``) from the user's checkout and answers its "time per
  stage" (``objective_s``), every node's ``stage_id`` and, per level from the top, the printed
  ``(start, end) time replicas`` rows.  Its graph drawing (Graphviz's ``dot``) is skipped.
* ``{"peer": "deepspeed", "weights": [...], "parts": [k, ...]}``: ``deepspeed.runtime.utils.partition_balanced``,
  answers ``bounds`` (per ``k``, ``k + 1`` offsets into the weights).
* ``{"peer": "torchgpipe", "weights": [...], "parts": [k, ...]}``: torchgpipe's balance-by-time on
  given costs (``torchgpipe.balance.balance_cost``), answers ``balance`` (per ``k``, items per
  partition).

Every answer has ``solve_s``: the time of the peer's own call (after its library is imported).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ROW = re.compile(r"^\((\d+), (\d+)\) (\S+) (\d+)$")


def _levels(printed: str) -> list[list[list[int]]]:
    """The ``(start, end) time replicas`` rows printed under each ``Level k`` header, top first."""
    levels: list[list[list[int]]] = []
    for line in printed.splitlines():
        line = line.strip()
        if line.startswith("Level "):
            levels.append([])
        elif levels and (match := _ROW.match(line)):
            levels[-1].append([int(match.group(1)), int(match.group(2)), int(match.group(4))])
    return levels


def _stage_ids(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        if line.startswith("\t"):
            continue
        parts = line.strip().split(" -- ")
        if len(parts) > 3 and parts[3].startswith("stage_id="):
            out[parts[0]] = int(parts[3].split("=")[1])
    return out


def run_pipedream(req: dict[str, Any]) -> dict[str, Any]:
    repo = Path(req["repo"]).resolve()
    sys.path[:0] = [str(repo / "optimizer"), str(repo)]
    import graph  # the checkout's graph package
    import optimizer_graph_hierarchical as opt

    graph.Graph.to_dot = lambda self, arch: None  # drawing needs Graphviz's binary, not the plan
    # the script sets these module globals from its command line
    opt.straight_pipeline, opt.use_memory_constraint, opt.use_fewer_machines = False, False, False
    opt.activation_compression_ratio, opt.memory_size = 1.0, float(req["memory_bytes"])
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()) as printed:
        value, _ = opt.main(req["machines"], req["profile"], req["bandwidths_Bps"], float(req["memory_bytes"]),
                            False, False, False, 1.0, out, print_configuration=True, verbose=False)
        total = 1
        for m in req["machines"]:
            total *= m
        stages = _stage_ids((Path(out) / f"gpus={total}.txt").read_text())
    return {"objective_s": value, "stage_id": stages, "levels": _levels(printed.getvalue())}


Runner = Callable[[dict[str, Any]], dict[str, Any]]


def load(peer: str) -> Runner:
    """The peer's runner, its library imported here (before the clock starts)."""
    if peer == "deepspeed":
        from deepspeed.runtime.utils import partition_balanced

        return lambda req: {"bounds": {str(k): [int(b) for b in partition_balanced(req["weights"], int(k))]
                                       for k in req["parts"]}}
    if peer == "torchgpipe":
        from torchgpipe.balance import balance_cost

        return lambda req: {"balance": {str(k): [int(b) for b in balance_cost(req["weights"], int(k))]
                                        for k in req["parts"]}}
    if peer == "pipedream":
        return run_pipedream
    raise ValueError(f"unknown peer {peer!r}")


def main() -> None:
    req = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):  # libraries' chatter must not spoil the answer
        runner = load(req["peer"])
        started = time.perf_counter()
        answer = runner(req)
        answer["solve_s"] = time.perf_counter() - started
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
