"""Document loading speed target (docs/benchmarks.md, "Formats").

``.venv/bin/python -m bench.bench_formats`` writes a 50k-op / ~100k-edge graph (the seeded
``random_dag`` generator) to a JSON file and prints the median of 5 runs of loading it from disk:
read + JSON parse + validation (every field, ids, edges, acyclicity with the topological order).
Target: <= 1 s.  Also reported: the gzip-compressed file, and the parse / validate split.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from solvers.generate import generate_graph
from solvers.model.documents import load_graph, read_json, write_json
from solvers.model.graph import graph_from_document

TARGET_S = 1.0


def _median_s(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
        size_mb = plain.stat().st_size / 1e6
        gz_mb = packed.stat().st_size / 1e6
    print(f"graph: {graph.n_ops} ops, {len(graph.edges)} edges; file {size_mb:.1f} MB (gzip {gz_mb:.1f} MB)")
    print(f"load + validate from JSON: median {load_s:.3f} s over {args.repeat} runs (target <= {TARGET_S} s)"
          f" -> {'met' if load_s <= TARGET_S else 'MISSED'}")
    print(f"  of which JSON parse {parse_s:.3f} s, validate + build {validate_s:.3f} s")
    print(f"load + validate from gzip JSON: median {gzip_s:.3f} s")


if __name__ == "__main__":
    main()
