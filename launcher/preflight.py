"""What ``launch.py`` refuses before it imports torch: a torchrun world of the wrong size.

Importing the runtime (torch, ``torch.distributed.pipelining``, the model's modules) takes a rank
several seconds; a world started with the wrong ``--nproc-per-node`` is refused from the
manifest and torchrun's environment alone, before that.  :func:`world_size_refusal` is the one
wording, also used by :func:`launcher.runtime.world.check_world_size` inside the runtime.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def world_size_refusal(world_size: int, n_devices: int) -> str | None:
    """Why a world of ``world_size`` processes cannot run a plan of ``n_devices`` devices, or None."""
    if world_size == n_devices:
        return None
    return (f"the torchrun world has {world_size} process(es) but the plan runs on {n_devices} device(s); "
            "start the commands of README.md (one process per plan device)")


def refused_early(bundle: Path, argv: list[str]) -> str | None:
    """The refusal of this process's world, from ``bundle``'s manifest and ``WORLD_SIZE``; None where it may run
    (and for ``--help``, or a manifest this cannot read: the runtime then says what is wrong)."""
    if "-h" in argv or "--help" in argv:
        return None
    try:
        devices = json.loads((bundle / "manifest.json").read_text())["devices"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return world_size_refusal(int(os.environ.get("WORLD_SIZE", "1")), len(devices))
