"""Gradient all-reduce in buckets: one collective per bucket of gradients, not one per parameter.

After the schedule every rank reduces its parameters' gradients over a process group: the replicas
of its stage (data parallelism) or, for a tied parameter, every replica of every stage that reads it.
One ``all_reduce`` per tensor pays each collective's latency hundreds of times; like PyTorch DDP
(Li et al., "PyTorch Distributed", VLDB 2020, Sec. 3.2.3 "Gradient Bucketing") the gradients of one
group are flattened into buckets of at most ``bucket_bytes`` and each bucket is reduced once, then
copied back.  A gradient larger than a bucket is reduced alone, in place.

Every rank of a group must issue the same buckets in the same order: within a group the
parameters go in name order (the names a group's ranks hold are the same), and a rank visits its
groups in the order of their global rank lists, one order on every rank, so two ranks never wait
on each other's groups in opposite orders.  The reduction is elementwise, so each element gets the
same sum as with one call per tensor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from solvers.cost.comm import GRADIENT_BUCKET_BYTES

BUCKET_BYTES = GRADIENT_BUCKET_BYTES  # 25 MiB (DDP's bucket_cap_mb); the simulator counts these buckets


@dataclass
class _Bucket:
    grads: list[torch.Tensor] = field(default_factory=list)
    size_bytes: int = 0


def _buckets(grads: list[torch.Tensor], bucket_bytes: int) -> list[_Bucket]:
    """Consecutive runs of ``grads`` (one dtype and device) of at most ``bucket_bytes`` each."""
    out: list[_Bucket] = []
    current = _Bucket()
    for g in grads:
        size_bytes = g.numel() * g.element_size()
        if current.grads and current.size_bytes + size_bytes > bucket_bytes:
            out.append(current)
            current = _Bucket()
        current.grads.append(g)
        current.size_bytes += size_bytes
    if current.grads:
        out.append(current)
    return out


def _reduce_bucket(bucket: _Bucket, group: dist.ProcessGroup, divide_by: int) -> None:
    if len(bucket.grads) == 1 and bucket.grads[0].is_contiguous():
        grad = bucket.grads[0]  # alone: reduced in place, no copy
        dist.all_reduce(grad, group=group)
        if divide_by != 1:
            grad /= divide_by
        return
    flat = torch.cat([g.reshape(-1) for g in bucket.grads])
    dist.all_reduce(flat, group=group)
    if divide_by != 1:
        flat /= divide_by
    offset = 0
    for g in bucket.grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def all_reduce_gradients(
    entries: Iterable[tuple[str, torch.nn.Parameter, dist.ProcessGroup]],
    *,
    divide_by: int = 1,
    bucket_bytes: int = BUCKET_BYTES,
) -> int:
    """Sum each parameter's gradient over its group (then divide it by ``divide_by``), in buckets.

    ``entries`` are ``(name, parameter, group)``; a parameter without a gradient gets zeros first
    (its group's other ranks may have one).  Returns the number of ``all_reduce`` calls made.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    by_group: dict[tuple[int, ...], tuple[dist.ProcessGroup, list[tuple[str, torch.nn.Parameter]]]] = {}
    for name, param, group in entries:
        ranks = tuple(dist.get_process_group_ranks(group))
        by_group.setdefault(ranks, (group, []))[1].append((name, param))
    calls = 0
    for ranks in sorted(by_group):
        group, params = by_group[ranks]
        by_kind: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for _, param in sorted(params, key=lambda item: item[0]):
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            grad = param.grad.to_local() if isinstance(param.grad, DTensor) else param.grad  # a shard: a view
            by_kind.setdefault((grad.dtype, grad.device), []).append(grad)
        for kind in sorted(by_kind, key=str):
            for bucket in _buckets(by_kind[kind], bucket_bytes):
                _reduce_bucket(bucket, group, divide_by)
                calls += 1
    return calls
