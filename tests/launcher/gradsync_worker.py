"""Bucketed gradient all-reduce against one all-reduce per tensor, in a real gloo world of 3 processes:
``python -m torch.distributed.run --standalone --nproc-per-node 3 -m tests.launcher.gradsync_worker OUT``.

Three overlapping groups ({0, 1}, {1, 2}, {0, 1, 2}); float32 and float64 gradients, one gradient
larger than a bucket, one missing on one rank; every rank lists its parameters in another order.
Each rank writes ``OUT/rank<r>.json``: the calls each bucket size made and whether every gradient
is bitwise equal to the per-tensor result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from launcher.runtime.gradsync import BUCKET_BYTES, all_reduce_gradients

# group members -> parameters (name, shape, dtype); every member holds the same names
LAYOUT: dict[tuple[int, ...], list[tuple[str, tuple[int, ...], torch.dtype]]] = {
    (0, 1): [
        ("a.w", (3, 4), torch.float32),
        ("a.b", (5,), torch.float32),
        ("a.big", (40,), torch.float32),
        ("a.h", (7,), torch.float64),
    ],
    (1, 2): [("b.w", (2, 2), torch.float32), ("b.v", (10,), torch.float32)],
    (0, 1, 2): [("c.x", (6,), torch.float32), ("c.y", (2, 3), torch.float32)],
}
MISSING = ("a.b", 0)  # rank 0 has no gradient for a.b: it takes part with zeros
BUCKET_SMALL_BYTES = 64  # 16 float32: a.big (160 bytes) goes alone


def parameters(rank: int) -> list[tuple[str, torch.nn.Parameter, dist.ProcessGroup]]:
    groups = {ranks: dist.new_group(list(ranks)) for ranks in LAYOUT}  # every rank creates every group
    out = []
    gen = torch.Generator().manual_seed(1000 + rank)
    for ranks, params in LAYOUT.items():
        if rank not in ranks:
            continue
        for name, shape, dtype in params:
            p = torch.nn.Parameter(torch.zeros(shape, dtype=dtype))
            if (name, rank) != MISSING:
                if len(ranks) == 2:  # a + b is the same in any order: arbitrary values
                    p.grad = torch.randn(shape, generator=gen).to(dtype)
                else:  # three addends: integers, exact in any order
                    p.grad = torch.randint(-50, 50, shape, generator=gen).to(dtype)
            out.append((name, p, groups[ranks]))
    return out[::-1] if rank % 2 else out


def per_tensor(
    entries: list[tuple[str, torch.nn.Parameter, dist.ProcessGroup]], divide_by: int
) -> dict[str, torch.Tensor]:
    """One all_reduce per gradient, groups in global-rank order, names sorted (the order the ranks agree on)."""
    want: dict[str, torch.Tensor] = {}
    for _, name, p, group in sorted((tuple(dist.get_process_group_ranks(g)), n, p, g) for n, p, g in entries):
        grad = p.grad.clone() if p.grad is not None else torch.zeros_like(p)
        dist.all_reduce(grad, group=group)
        grad /= divide_by
        want[name] = grad
    return want


def check(rank: int, bucket_bytes: int, divide_by: int) -> dict[str, object]:
    entries = parameters(rank)
    want = per_tensor(entries, divide_by)
    calls = all_reduce_gradients(entries, divide_by=divide_by, bucket_bytes=bucket_bytes)
    equal = {name: p.grad is not None and torch.equal(p.grad, want[name]) for name, p, _ in entries}
    return {"calls": calls, "equal": equal}


def main(out: Path) -> int:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result = {"small": check(rank, BUCKET_SMALL_BYTES, 1), "default": check(rank, BUCKET_BYTES, 3)}
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
