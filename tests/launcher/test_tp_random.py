"""Dropout streams of a tensor-parallel stage (launcher.runtime.tp_random), one process playing each device in turn.

A fake process group (no communication: the random ops run on each device's own part) stands for
device 0 and then device 1 of a group of two, each starting from the shared stream of the same
stage and replica: a value held whole gets the same mask on both, a value split over them (the
sequence, the heads) a mask of each device's own, and the shared streams stay in step after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Placement, Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore

from launcher.runtime.tensor_parallel import _attention_by_heads
from launcher.runtime.tp_random import dropout, native_dropout, seed_shared_stream, stream_seed


@contextmanager
def device_of_two(rank: int) -> Iterator[DeviceMesh]:
    assert not dist.is_initialized()
    dist.init_process_group("fake", rank=rank, world_size=2, store=FakeStore())
    try:
        yield DeviceMesh("cpu", [0, 1])
    finally:
        dist.destroy_process_group()


def on_each_device(placement: Placement, op: Callable[[DTensor], Any]) -> list[tuple[torch.Tensor, int]]:
    """Per device of the group: ``op``'s local result on a part of ones, and the shared stream's next draw."""
    out = []
    for rank in (0, 1):
        with device_of_two(rank) as mesh:
            seed_shared_stream(7, stage=1, replica=0)
            value = DTensor.from_local(torch.ones(2, 4, 6, 8), mesh, [placement], run_check=False)
            made = op(value)
            assert isinstance(made, DTensor) and made.placements == (placement,)
            assert made.shape == value.shape
            out.append((made.to_local(), int(torch.randint(0, 2**62, (1,)).item())))
    return out


@pytest.mark.parametrize(("placement", "same_mask"), [(Replicate(), True), (Shard(1), False), (Shard(2), False)])
def test_dropout_draws_a_split_value_from_each_device_s_own_stream(placement: Placement, same_mask: bool) -> None:
    (part0, next0), (part1, next1) = on_each_device(placement, lambda v: dropout(v, 0.5, True))
    assert next0 == next1  # the shared streams stay in step
    assert torch.equal(part0 == 0, part1 == 0) is same_mask
    for part in (part0, part1):
        assert 0.2 < float((part == 0).float().mean()) < 0.8  # a mask at p 0.5, scaled by 1 / (1 - p)
        assert bool(((part == 0) | (part == 2)).all())  # dropped, or kept and scaled by 2


def test_native_dropout_returns_the_mask_placed_as_its_value() -> None:
    (mask0, _), (mask1, _) = on_each_device(Shard(1), lambda v: native_dropout(v, 0.5, True)[1])
    assert mask0.dtype == torch.bool and not torch.equal(mask0, mask1)


def test_dropout_that_drops_nothing_draws_nothing() -> None:
    (part0, next0), (part1, next1) = on_each_device(Shard(1), lambda v: dropout(v, 0.0, True))
    assert torch.equal(part0, torch.ones_like(part0)) and torch.equal(part1, part0)
    seed_shared_stream(7, stage=1, replica=0)
    assert next0 == next1 == int(torch.randint(0, 2**62, (1,)).item())


@pytest.mark.parametrize(("placement", "same_output"), [(Replicate(), True), (Shard(1), False)])
def test_attention_dropout_by_heads_draws_from_each_device_s_own_stream(placement: Placement, same_output: bool) -> None:
    def attention(v: DTensor) -> Any:
        return _attention_by_heads(v, v, v, None, 0.5)

    (out0, next0), (out1, next1) = on_each_device(placement, attention)
    assert next0 == next1
    assert torch.equal(out0, out1) is same_output


def test_shared_streams_differ_by_stage_replica_and_seed() -> None:
    seeds = {stream_seed(seed, stage, replica) for seed in (0, 1) for stage in range(3) for replica in range(3)}
    assert len(seeds) == 18
    assert stream_seed(0, 1, 2) == stream_seed(0, 1, 2)
