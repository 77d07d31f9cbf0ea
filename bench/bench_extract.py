"""Extraction and profiling speed (docs/benchmarks.md, "Extraction").

``.venv/bin/python -m bench.bench_extract`` prints, for each case, the op and edge counts and
the median wall-clock and CPU seconds of ``--runs`` runs (after one warm-up run that pays the
imports):

* ``placer extract`` of BERT-Large (24 layers, hidden 1024, 16 heads, seq 512, batch 8;
  target <= 10 s);
* ``placer extract`` of a GPT-2 XL-sized model (48 layers, hidden 1600, 25 heads, seq 1024,
  vocab 50257, batch 1; target <= 30 s);
* ``placer profile`` of a small BERT on CPU (2 layers, hidden 256, seq 128, batch 8, 5 profiled
  steps after 2 warm-up steps, one torch thread).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from extract.build import example_source
from extract.extract import extract
from extract.profile import profile

BERT_LARGE = {"layers": 24, "hidden": 1024, "heads": 16, "seq": 512}
GPT2_XL = {"layers": 48, "hidden": 1600, "heads": 25, "seq": 1024, "vocab": 50257}
SMALL_BERT = {"layers": 2, "hidden": 256, "heads": 4, "seq": 128, "vocab": 1000}


def _timed(run: Callable[[], Any], runs: int) -> tuple[Any, float, float]:
    run()
    walls, cpus, result = [], [], None
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        result = run()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return result, statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cases: list[tuple[str, str, Callable[[], Any]]] = [
        ("extract BERT-Large, batch 8", "<= 10 s", lambda: extract(example_source("bert", BERT_LARGE, 8))),
        ("extract GPT-2 XL size, batch 1", "<= 30 s", lambda: extract(example_source("gpt2", GPT2_XL, 1))),
    ]
    for name, target, run in cases:
        graph, wall, cpu = _timed(run, args.runs)
        print(f"{name}: {graph.n_ops} ops, {len(graph.edges)} edges, target {target}, "
              f"median wall {wall:.2f} s, CPU {cpu:.2f} s")
    torch.set_num_threads(1)
    graph, wall, cpu = _timed(lambda: profile(example_source("bert", SMALL_BERT, 8), repeats=5, warmup=2),
                              args.runs)
    step_s = graph.attrs["profile"]["step_s"]
    total = float(graph.fwd_s.sum() + graph.bwd_s.sum())
    print(f"profile small BERT, CPU, 1 thread: {graph.n_ops} ops, median wall {wall:.2f} s, CPU {cpu:.2f} s; "
          f"sum of op times {total * 1e3:.1f} ms against a whole step of {step_s * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
