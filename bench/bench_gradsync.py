"""The data-parallel gradient all-reduce alone: one collective per tensor against 25 MiB buckets.

``OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc-per-node 2 -m bench.bench_gradsync``

Two gloo processes hold the gradients of ``bench.launcher_model:bert`` (the 1-stage x 2-replica
plan's stage) and average them with :func:`launcher.runtime.gradsync.all_reduce_gradients`, with
buckets of one tensor each (one all-reduce per tensor, as before bucketing) and of 25 MiB; rank 0
prints the all-reduce calls and the median time of each, over 3 rounds of 15 (docs/launcher.md).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from bench.launcher_model import bert
from launcher.runtime.gradsync import BUCKET_BYTES, all_reduce_gradients

ONE_TENSOR_BYTES = 1  # every bucket closes after one tensor


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    group = dist.new_group([0, 1])
    model, _ = bert()
    params = list(model.named_parameters())
    for _, p in params:
        p.grad = torch.randn_like(p)
    times_s: dict[int, list[float]] = {ONE_TENSOR_BYTES: [], BUCKET_BYTES: []}
    calls: dict[int, int] = {}
    for _ in range(3):
        for bucket_bytes in times_s:
            for _ in range(15):
                dist.barrier()
                start = time.perf_counter()
                calls[bucket_bytes] = all_reduce_gradients(
                    [(n, p, group) for n, p in params], divide_by=2, bucket_bytes=bucket_bytes
                )
                times_s[bucket_bytes].append(time.perf_counter() - start)
    if dist.get_rank() == 0:
        for bucket_bytes, kept in times_s.items():
            print(
                f"buckets of {bucket_bytes} bytes: {calls[bucket_bytes]} all_reduce calls, "
                f"median {statistics.median(kept) * 1e3:.2f} ms over {len(kept)}"
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
