"""Rank <-> device: which host runs which of the plan's devices, and the torchrun command per host.

A device's host is its topology ``node``; its **local index** is its position among the
topology's devices of that host (the CUDA ordinal on a GPU node).  Without a topology every plan
device is on one host, ``localhost``, in plan order.  On each host torchrun starts one process per
plan device of that host; the process with ``LOCAL_RANK`` r runs the host's r-th plan device (by
local index).  Ranks are matched to devices by (host, local rank), never by global rank, so the
rendezvous may number the nodes in any order.
"""

from __future__ import annotations

from dataclasses import dataclass

from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan
from solvers.model.topology import Topology

LOCALHOST = "localhost"


@dataclass(frozen=True)
class DeviceSlot:
    """Where one plan device runs: host, local index on the host, local rank of its process."""

    device: str
    host: str
    local_index: int
    local_rank: int


def plan_devices(plan: Plan) -> list[str]:
    """The plan's devices in stage order (each once); a tensor-parallel stage's devices replica-major."""
    seen: dict[str, None] = {}
    for stage in plan.stages:
        for d in stage.devices:
            seen.setdefault(d, None)
    return list(seen)


def device_slots(plan: Plan, topology: Topology | None) -> list[DeviceSlot]:
    """One slot per plan device, hosts in topology order and local ranks by local index."""
    devices = plan_devices(plan)
    if topology is None:
        return [DeviceSlot(d, LOCALHOST, i, i) for i, d in enumerate(devices)]
    local: dict[str, tuple[str, int]] = {}
    count: dict[str, int] = {}
    for dev in topology.devices:
        local[dev.id] = (dev.node, count.get(dev.node, 0))
        count[dev.node] = count.get(dev.node, 0) + 1
    unknown = [d for d in devices if d not in local]
    if unknown:
        raise InvalidPlan(f"plan device {unknown[0]!r} is not in the topology {topology.name!r}",
                          field="stages", ref=unknown[0])
    slots: list[DeviceSlot] = []
    for host in topology.hosts:
        mine = sorted((local[d][1], d) for d in devices if local[d][0] == host)
        slots += [DeviceSlot(d, host, index, r) for r, (index, d) in enumerate(mine)]
    return slots


def hosts(slots: list[DeviceSlot]) -> list[tuple[str, int]]:
    """(host, processes) in order."""
    out: dict[str, int] = {}
    for slot in slots:
        out[slot.host] = out.get(slot.host, 0) + 1
    return list(out.items())


def torchrun_command(slots: list[DeviceSlot], host: str, endpoint: str = "$RDZV_HOST:29500") -> str:
    """The command to start on ``host`` (``endpoint``: the rendezvous host:port, a placeholder)."""
    table = hosts(slots)
    nproc = dict(table)[host]
    args = [f"torchrun --nnodes {len(table)} --nproc-per-node {nproc}"]
    if len(table) > 1:
        args.append(f"--rdzv-backend c10d --rdzv-endpoint {endpoint} --rdzv-id placer")
    else:
        args.append("--standalone")
    args.append(f"launch.py --host {host}")
    return " ".join(args)
