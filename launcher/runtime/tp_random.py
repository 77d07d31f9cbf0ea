"""Random streams of a tensor-parallel stage: which generator each device draws a dropout mask from.

Megatron-LM keeps two streams per device (Shoeybi et al. 2019, §3; Korthikanti et al. 2022, §4.2.2):
one the devices of a tensor-parallel group share, for the values every device of the group holds
whole (a mask drawn on one must be the mask drawn on the others, or the "replicated" value differs
between them), and one of each device's own, for the values split over the group (each head, each
piece of the sequence gets a mask of its own, not the same mask repeated on every device).  Here:

- **The shared stream** is the default generator (``torch.manual_seed``), seeded when the stage
  is built by :func:`stream_seed`: the source's ``seed``, the stage and the replica, the same on
  every device of the group, different between stages and between replicas.  The devices of a
  group run the same ops in the same order, so their shared streams stay in step.
- **A device's own stream** is drawn afresh for each random op on a split value
  (:func:`own_stream`): one 62-bit number taken from the shared stream (the same on every device
  of the group, so the shared streams stay in step), hashed with the device's position in the
  group (:func:`~launcher.runtime.seeded.name_seed`), seeds a generator forked for that op.

Recomputation (``torch.utils.checkpoint``, which saves and restores the default generator's state)
replays the shared stream, so a recomputed stage draws the same masks, its own streams included.

The ops run on each device's local part (the DTensor's ``to_local``), not through DTensor's
random-op tracker, so the streams are as above whatever the device type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard

from launcher.runtime.seeded import name_seed

DRAW_BITS = 62  # the width of the number a device's own stream is seeded from


def stream_seed(seed: int, stage: int, replica: int) -> int:
    """The seed of the shared stream of ``stage``'s replica ``replica`` (every device of its tensor-parallel group)."""
    return name_seed(seed, f"dropout/stage{stage}/replica{replica}")


def seed_shared_stream(seed: int, stage: int, replica: int) -> int:
    """Seed the default generator (CPU and every CUDA device) with :func:`stream_seed`; returns the seed."""
    value = stream_seed(seed, stage, replica)
    torch.manual_seed(value)
    return value


def own_seed(draw: int, tp_rank: int) -> int:
    """The seed of the own stream of the device at ``tp_rank`` in its group, for the shared ``draw``."""
    return name_seed(draw, f"tp{tp_rank}")


@contextmanager
def own_stream(mesh: DeviceMesh) -> Iterator[int]:
    """Draw from this device's own stream inside: the default generator forked and seeded with
    :func:`own_seed` of one draw from the shared stream; the shared stream continues after that draw."""
    draw = int(torch.randint(0, 2**DRAW_BITS, (1,)).item())
    seed = own_seed(draw, mesh.get_local_rank())
    devices = [torch.cuda.current_device()] if mesh.device_type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield seed


def is_split(value: Any) -> bool:
    """Whether ``value`` is a DTensor split over its mesh (each device holds a different part)."""
    return isinstance(value, DTensor) and any(isinstance(p, Shard) for p in value.placements)


def on_parts(op: Callable[..., Any], value: Any, *args: Any, **kwargs: Any) -> Any:
    """``op`` (a random op whose first argument is the value it draws for) on this device's part: a split
    value from the device's own stream, a whole one from the shared stream; its tensor results placed as
    ``value`` is."""
    if not isinstance(value, DTensor):
        return op(value, *args, **kwargs)
    mesh, placements = value.device_mesh, value.placements
    with own_stream(mesh) if is_split(value) else nullcontext():
        out = op(value.to_local(), *args, **kwargs)

    def placed(part: Any) -> Any:
        if not isinstance(part, torch.Tensor):
            return part
        return DTensor.from_local(part, mesh, placements, run_check=False, shape=value.shape, stride=value.stride())

    return tuple(placed(o) for o in out) if isinstance(out, tuple) else placed(out)


def dropout(value: Any, p: float, train: bool | None) -> Any:
    """``aten.dropout`` on the parts (:func:`on_parts`); nothing is drawn where it drops nothing."""
    if not train or p == 0:
        return torch.ops.aten.dropout.default(value, p, train)
    return on_parts(torch.ops.aten.dropout.default, value, p, train)


def native_dropout(value: Any, p: float, train: bool | None) -> Any:
    """``aten.native_dropout`` (output and mask) on the parts (:func:`on_parts`)."""
    return on_parts(torch.ops.aten.native_dropout.default, value, p, train)


RANDOM_OPS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.dropout.default: dropout,
    torch.ops.aten.native_dropout.default: native_dropout,
}
