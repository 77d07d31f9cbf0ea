"""``placer topology measure``: the cluster's devices and links, measured under ``torchrun``.

Every rank (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` from torchrun) reports its device kind,
memory and host.  Then, one ordered pair at a time (the others wait at a barrier), rank ``i``
sends a message of ``s`` bytes to rank ``j``, which answers with one byte; the median round trip
over ``repeats`` at each size from ``min_bytes`` to ``max_bytes`` (×4 steps) is fitted by least
squares to ``t(s) = a + s / bandwidth`` (the cost model's latency + bytes / bandwidth,
docs/cost-model.md).  The link ``i -> j`` gets that bandwidth and ``latency_s = a / 2`` (the
intercept holds the one-byte answer as well); each direction is its own link, so asymmetric
channels stay asymmetric.  Finally the all-reduce bus bandwidth, ``2 (n - 1) / n * s / t``
(the NCCL tests' definition), is measured inside each host and across all ranks, and recorded
in the topology's ``attrs``.

gloo on CPU, NCCL on CUDA devices (``LOCAL_RANK`` picks the GPU).  CPU memory is the host's
physical memory divided by its ranks.  Each device's ``base_memory_bytes`` is what the rank's
process holds once the process group has run its first collective, the modules named by
``imports`` are loaded (the model's library) and a two-op module has been exported (the export
machinery a launcher loads to rebuild its model), before any tensor of the measurement: on a GPU
the device memory in use less what torch's allocator reserved (the CUDA context, NCCL's
buffers); on the CPU the process's resident set (the interpreter, torch, gloo, those modules).  Device ids are ``<host>:<local rank>``; each device's
``attrs`` holds its ``rank``, ``local_rank`` and ``host``.
"""

from __future__ import annotations

import gc
import importlib
import os
import resource
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from solvers.model.errors import InvalidInput
from solvers.model.topology import Device, Link, Topology


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    if min_bytes < 4 or max_bytes < min_bytes:
        raise InvalidInput(f"message sizes: need 4 <= --min-bytes <= --max-bytes, got {min_bytes}, {max_bytes}",
                           field="max_bytes")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= 4
    if sizes[-1] != max_bytes:
        sizes.append(max_bytes)
    return sizes


def fit_link(sizes: Sequence[int], times_s: Sequence[float]) -> tuple[float, float]:
    """(bandwidth_Bps, latency_s) of ``t = a + s / bw`` by least squares; ``latency_s = a / 2``.

    A slope that is not positive (noise swamping the sizes) falls back to the largest message's
    rate."""
    x = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(times_s, dtype=np.float64)
    if len(x) >= 2:
        slope, intercept = np.polyfit(x, y, 1)
    else:
        slope, intercept = 0.0, 0.0
    if slope <= 0:
        return float(x[-1] / y[-1]), float(max(0.0, y.min()) / 2)
    return float(1.0 / slope), float(max(0.0, intercept) / 2)


def _device() -> tuple[torch.device, str, float]:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
        name = torch.cuda.get_device_name(dev)
        kind = next((k for k in ("H100", "A100", "V100") if k in name), name)
        return dev, kind, float(torch.cuda.get_device_properties(dev).total_memory)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return torch.device("cpu"), "cpu", float(total // max(1, local_world))


def load_runtime(imports: Sequence[str]) -> None:
    """Import ``imports`` and export a two-op module, as a launcher process does before it trains.

    Without a model this is the export machinery only: a launched rank also loads its model's own
    modules (a transformers model class is imported lazily, about 60 MiB for GPT-2) and keeps its
    export, which ``measure``'s ``model`` counts.
    """
    for name in imports:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise InvalidInput(f"--import {name}: {exc}", field="imports", ref=name) from exc
    probe = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    torch.export.export(probe, (torch.zeros(2, 4),), strict=False).module()


def base_memory_bytes(dev: torch.device) -> float:
    """What this process holds on ``dev`` beyond torch's tensors (see the module docstring)."""
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        free, total = torch.cuda.mem_get_info(dev)
        return float(max(0, total - free - torch.cuda.memory_reserved(dev)))
    try:
        with open("/proc/self/statm") as f:
            return float(int(f.read().split()[1]) * resource.getpagesize())
    except (OSError, IndexError, ValueError):
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _round_trip(src: int, dst: int, size: int, repeats: int, dev: torch.device) -> float:
    rank = dist.get_rank()
    buf = torch.zeros(max(1, size // 4), dtype=torch.float32, device=dev)
    ack = torch.zeros(1, dtype=torch.uint8, device=dev)
    times = []
    for i in range(repeats + 1):  # the first exchange sets the channel up and is dropped
        _sync(dev)
        start = time.perf_counter()
        if rank == src:
            dist.send(buf, dst)
            dist.recv(ack, dst)
        else:
            dist.recv(buf, src)
            dist.send(ack, src)
        _sync(dev)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _pairs(world: int, sizes: Sequence[int], repeats: int, dev: torch.device) -> dict[tuple[int, int], list[float]]:
    rank = dist.get_rank()
    measured: dict[tuple[int, int], list[float]] = {}
    for src in range(world):
        for dst in range(world):
            if src == dst:
                continue
            if rank in (src, dst):
                measured[(src, dst)] = [_round_trip(src, dst, s, repeats, dev) for s in sizes]
            dist.barrier()
    return measured


def _allreduce_busbw(group: Any, size: int, n: int, repeats: int, dev: torch.device) -> float:
    buf = torch.ones(max(1, size // 4), dtype=torch.float32, device=dev)
    times = []
    for i in range(repeats + 1):
        _sync(dev)
        start = time.perf_counter()
        dist.all_reduce(buf, group=group)
        _sync(dev)
        if i:
            times.append(time.perf_counter() - start)
    t = statistics.median(times)
    return 2 * (n - 1) / n * size / t if n > 1 else 0.0


def measure(min_bytes: int = 4096, max_bytes: int = 256 * 2**20, repeats: int = 5, name: str = "measured",
            imports: Sequence[str] = (), model: Callable[[], object] | None = None) -> Topology | None:
    """Run on every rank of a torchrun job; rank 0 returns the topology, the others ``None``.

    ``model``: rebuilds the model the processes will run, as a launched rank does; what it returns
    is kept until the base has been read, so the base counts the model's modules and its export.
    """
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise InvalidInput("placer topology measure runs under torchrun, e.g. python -m torch.distributed.run "
                           "--nproc-per-node 4 -m cli topology measure -o topo.json", field="torchrun")
    sizes = message_sizes(min_bytes, max_bytes)
    load_runtime(imports)
    kept = None if model is None else model()
    dev, kind, memory = _device()
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    try:
        return _measure(sizes, repeats, dev, kind, memory, name, kept)
    finally:
        dist.destroy_process_group()


def _measure(sizes: list[int], repeats: int, dev: torch.device, kind: str, memory: float,
             name: str, kept: object = None) -> Topology | None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.barrier()  # the first collective sets the communicator up before the base is read
    me = {"rank": rank, "local_rank": int(os.environ.get("LOCAL_RANK", "0")), "host": socket.gethostname(),
          "kind": kind, "memory_bytes": memory, "base_memory_bytes": base_memory_bytes(dev)}
    del kept  # held until the base is read: it counts there
    infos: list[Any] = [None] * world
    dist.all_gather_object(infos, me)
    measured = _pairs(world, sizes, repeats, dev)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, {f"{a},{b}": v for (a, b), v in measured.items() if a == rank})
    hosts = list(dict.fromkeys(str(i["host"]) for i in infos))
    allreduce: dict[str, Any] = {"bytes": sizes[-1]}
    for host in hosts:
        members = [i["rank"] for i in infos if i["host"] == host]
        group = dist.new_group(members)
        if rank in members:
            allreduce[f"intra_host:{host}_busbw_Bps"] = _allreduce_busbw(group, sizes[-1], len(members), repeats, dev)
    allreduce["world_busbw_Bps"] = _allreduce_busbw(None, sizes[-1], world, repeats, dev)
    parts: list[Any] = [None] * world
    dist.all_gather_object(parts, allreduce)
    if rank != 0:
        return None
    return _topology(name, infos, gathered, sizes, parts)


def _topology(name: str, infos: list[Any], gathered: list[Any], sizes: list[int], parts: list[Any]) -> Topology:
    ids = [f"{i['host']}:{i['local_rank']}" for i in infos]
    devices = [Device(ids[k], str(i["kind"]), str(i["host"]), float(i["memory_bytes"]),
                      attrs={"rank": i["rank"], "local_rank": i["local_rank"], "host": i["host"]},
                      base_memory_bytes=min(float(i.get("base_memory_bytes", 0.0)), float(i["memory_bytes"])))
               for k, i in enumerate(infos)]
    links, fits = [], {}
    for part in gathered:
        for key, times in sorted(part.items()):
            a, b = (int(x) for x in key.split(","))
            bw, lat = fit_link(sizes, times)
            links.append(Link(ids[a], ids[b], bw, lat, bidirectional=False))
            fits[f"{ids[a]}->{ids[b]}"] = {"round_trip_s": times}
    allreduce: dict[str, Any] = {}
    for part in parts:
        allreduce.update({k: v for k, v in part.items() if k not in allreduce})
    attrs = {"measured": {"message_bytes": sizes, "pairs": fits, "allreduce": allreduce,
                          "backend": "nccl" if devices[0].kind != "cpu" else "gloo"}}
    return Topology.from_links(name, devices, links, attrs)
