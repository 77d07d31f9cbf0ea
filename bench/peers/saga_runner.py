"""Run schedulers of the PyPI package ``anrg-saga`` on one task graph (inside the peer venv only).

Reads JSON on stdin: ``{"tasks": [[name, cost]], "dependencies": [[src, dst, size]],
"nodes": [[name, speed]], "links": [[a, b, speed]], "schedulers": [name, ...]}`` and writes
``{name: {"mapping": {node: [[task, start, end], ...]}, "solve_time_s": s, "makespan": m}
| {"error": text}}`` on stdout.  saga's model: a task takes ``cost / speed`` on a node, a
dependency ``size / link speed`` between two nodes (no latency, no contention, no memory).
This file imports saga and is never imported by Placer.
"""

import json
import sys
import time

from saga import Network, TaskGraph, schedulers


def main() -> None:
    req = json.load(sys.stdin)
    network = Network.create([tuple(n) for n in req["nodes"]], [tuple(link) for link in req["links"]])
    graph = TaskGraph.create([tuple(t) for t in req["tasks"]], [tuple(d) for d in req["dependencies"]])
    out = {}
    for name in req["schedulers"]:
        try:
            started = time.perf_counter()
            schedule = getattr(schedulers, name)().schedule(network, graph)
            elapsed = time.perf_counter() - started
            mapping = {node: [[t.name, t.start, t.end] for t in tasks] for node, tasks in schedule.mapping.items()}
            out[name] = {"mapping": mapping, "solve_time_s": elapsed, "makespan": schedule.makespan}
        except Exception as exc:  # report the failure of one scheduler, keep the others
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
