"""The torchrun world: process group, which rank runs which plan device, and the world checks.

Every process reports (host, local rank); the manifest's device table says which (host, local
rank) runs which plan device.  Refused before any work, naming the culprit: a world whose size
is not the plan's device count, a process whose (host, local rank) holds no plan device, a plan
device that no process holds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from launcher.preflight import world_size_refusal
from solvers.model.errors import InvalidPlan


@dataclass(frozen=True)
class World:
    """This process's place: its rank, its plan device, and every device's rank."""

    rank: int
    size: int
    device: str
    torch_device: torch.device
    rank_of: dict[str, int]


def start_process_group() -> None:
    """gloo on CPU, NCCL where CUDA is available; torchrun's environment gives rank and size."""
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend)


def check_world_size(n_devices: int) -> None:
    """Refuse a torchrun world that is not exactly one process per plan device."""
    refusal = world_size_refusal(int(os.environ.get("WORLD_SIZE", "1")), n_devices)
    if refusal is not None:
        raise InvalidPlan(refusal, field="world_size")


def select_gpu(devices: Sequence[Mapping[str, Any]], host: str) -> None:
    """Make this process's GPU (its slot's local index) the current CUDA device, before any GPU work."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    for d in devices:
        if str(d["host"]) == host and int(d["local_rank"]) == local_rank and torch.cuda.is_available():
            torch.cuda.set_device(int(d["local_index"]))


def locate(devices: Sequence[Mapping[str, Any]], host: str) -> World:
    """Match every rank to its device (all_gather of host and local rank) and refuse a mismatch."""
    rank, size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, (host, local_rank))
    by_slot = {(str(d["host"]), int(d["local_rank"])): str(d["device"]) for d in devices}
    rank_of = {by_slot[(h, lr)]: r for r, (h, lr) in enumerate(gathered) if (h, lr) in by_slot}
    stray = [(r, h, lr) for r, (h, lr) in enumerate(gathered) if (h, lr) not in by_slot]
    absent = [d for d in by_slot.values() if d not in rank_of]
    if absent:
        where = next((h, lr) for (h, lr), d in by_slot.items() if d == absent[0])
        raise InvalidPlan(f"plan device {absent[0]!r} (host {where[0]!r}, local rank {where[1]}) is absent from the "
                          f"torchrun world" + (f"; rank {stray[0][0]} is host {stray[0][1]!r}, local rank {stray[0][2]}, "
                                               "which holds no plan device (is --host right?)" if stray else ""),
                          field="world", ref=absent[0])
    if stray:
        r, h, lr = stray[0]
        raise InvalidPlan(f"rank {r} (host {h!r}, local rank {lr}) holds no plan device (is --host right?)",
                          field="world", ref=str(h))
    mine = by_slot[(host, local_rank)]
    index = next(int(d["local_index"]) for d in devices if d["device"] == mine)
    torch_device = torch.device("cuda", index) if torch.cuda.is_available() else torch.device("cpu")
    if torch_device.type == "cuda":
        torch.cuda.set_device(torch_device)
    return World(rank, size, mine, torch_device, rank_of)


def new_groups(rank_lists: Sequence[Sequence[int]]) -> list[dist.ProcessGroup]:
    """One process group per list (every rank creates every group, in the same order)."""
    return [dist.new_group(sorted(ranks)) for ranks in rank_lists]
