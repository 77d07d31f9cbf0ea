"""``python -m bench.pin_rank CORES -- ARGV...``: pin this process to core ``CORES[LOCAL_RANK]`` (one core per
torchrun rank, ``bench/pinned.py``), then replace it with ``python ARGV...`` (the affinity is inherited)."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        raise SystemExit("usage: python -m bench.pin_rank CORES -- SCRIPT [ARGS...] (CORES: comma-separated core ids)")
    cores = [int(c) for c in argv[0].split(",")]
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    if rank >= len(cores):
        raise SystemExit(f"bench.pin_rank: LOCAL_RANK {rank} but only {len(cores)} cores given ({argv[0]})")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cores[rank]})
    os.execv(sys.executable, [sys.executable, *argv[2:]])


if __name__ == "__main__":
    main(sys.argv[1:])
