"""``make bench``: run benchmarks one after the other, each as ``python -m bench.<name>``.

By default the quick ones (a few minutes together): formats, simulator, graph algorithms,
dashboard and service.  ``--all`` runs every ``bench/bench_*.py`` (an hour or more; the ones
that need Redis, wrk, a PipeDream checkout or peer virtual environments say what they need when
it is missing).  ``--only NAME ...`` runs the named ones.  Results print to stdout; the tables in
docs/benchmarks.md are written by hand from them, with the machine's load beside them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

QUICK = ("formats", "simulate", "graph_algorithms", "dashboard", "service")


def available() -> list[str]:
    """Every benchmark module's short name (``bench/bench_<name>.py``)."""
    return sorted(p.stem.removeprefix("bench_") for p in Path(__file__).parent.glob("bench_*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every benchmark, not only the quick ones")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=available(), help="these benchmarks")
    args = parser.parse_args(argv)
    names = args.only or (available() if args.all else list(QUICK))
    failed = []
    for name in names:
        print(f"== bench.bench_{name}", flush=True)
        started = time.monotonic()
        code = subprocess.call([sys.executable, "-m", f"bench.bench_{name}"])
        print(f"== bench.bench_{name}: exit {code} after {time.monotonic() - started:.1f} s", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
