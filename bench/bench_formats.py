"""Document loading speed target (docs/benchmarks.md, "Formats").

``.venv/bin/python -m bench.bench_formats`` writes a 50k-op / ~100k-edge graph (the seeded
``random_dag`` generator) to a JSON file and prints the median of 5 runs of loading it from disk:
read + JSON parse + validation (every field, ids, edges, acyclicity with the topological order).
Target: <= 1 s.  Also reported: the gzip-compressed file, and the parse / validate split; every
figure as wall-clock and CPU seconds (single-threaded, so CPU time is what an idle machine's
wall-clock would be; on a shared machine the wall-clock includes waiting for a core).

The ratio target (issue 33, <= 3x): load + validate against a bare ``orjson.loads`` of the same
bytes, the two interleaved run by run (so that both see the same load) and compared as medians,
in wall-clock and CPU time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from solvers.generate import generate_graph
from solvers.model.documents import load_graph, read_json, write_json
from solvers.model.graph import graph_from_document

TARGET_S = 1.0
TARGET_RATIO = 3.0


def _median_s(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall-clock and median CPU seconds of ``repeat`` calls."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def _interleaved(fns: list[Callable[[], object]], repeat: int) -> list[tuple[float, float]]:
    """Median wall-clock and CPU seconds of each function, the functions run in turn ``repeat`` times."""
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[k].append(time.perf_counter() - start)
            cpu[k].append(time.process_time() - start_cpu)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(wall, cpu, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    graph = generate_graph("random_dag", n_ops=args.ops, width=8, edge_prob=0.1, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        plain, packed = Path(tmp) / "graph.json", Path(tmp) / "graph.json.gz"
        write_json(graph.to_document(), plain)
        write_json(graph.to_document(), packed)
        doc = read_json(plain)
        parse_s = _median_s(lambda: json.loads(plain.read_bytes()), args.repeat)
        validate_s = _median_s(lambda: graph_from_document(doc), args.repeat)
        load_s = _median_s(lambda: load_graph(plain), args.repeat)
        gzip_s = _median_s(lambda: load_graph(packed), args.repeat)
        ratio_n = max(args.repeat, 5)
        raw = plain.read_bytes()
        bare, loaded = _interleaved([lambda: orjson.loads(raw), lambda: load_graph(plain)], ratio_n)
        size_mb = plain.stat().st_size / 1e6
        gz_mb = packed.stat().st_size / 1e6
    print(f"graph: {graph.n_ops} ops, {len(graph.edges)} edges; file {size_mb:.1f} MB (gzip {gz_mb:.1f} MB)")
    print(f"median of {args.repeat} runs (wall / CPU seconds); target for load + validate <= {TARGET_S} s")
    for label, (wall, cpu) in (("load + validate from JSON", load_s), ("  JSON parse only", parse_s),
                               ("  validate + build only", validate_s), ("load + validate from gzip JSON", gzip_s)):
        print(f"{label:32s} {wall:7.3f} s / {cpu:7.3f} s")
    for label, value in (("wall-clock", load_s[0]), ("CPU time", load_s[1])):
        print(f"target on {label}: {'met' if value <= TARGET_S else 'MISSED'} ({value:.3f} s)")
    print(f"ratio to a bare orjson.loads of the same bytes, interleaved, median of {ratio_n}; "
          f"target <= {TARGET_RATIO:g}x")
    print(f"{'  orjson.loads only':32s} {bare[0]:7.3f} s / {bare[1]:7.3f} s")
    print(f"{'  load + validate from JSON':32s} {loaded[0]:7.3f} s / {loaded[1]:7.3f} s")
    for label, k in (("wall-clock", 0), ("CPU time", 1)):
        ratio = loaded[k] / bare[k]
        print(f"ratio on {label}: {ratio:.2f}x ({'met' if ratio <= TARGET_RATIO else 'MISSED'})")

if __name__ == "__main__":
    main()
