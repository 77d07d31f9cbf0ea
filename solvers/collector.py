"""Pausing Python's cyclic garbage collector around work that allocates many acyclic objects.

Reference counting frees every list, tuple and dict when it is dropped; the cyclic collector
only finds cycles, and each full collection scans every live container.  Loading a large graph
or simulating a plan allocates hundreds of thousands of small containers while the parsed
document or the problem's graph lives on, so the collections the allocations trigger scan
those again and again (docs/benchmarks.md, "Formats" and "Celeritas").
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector paused inside the block.

    Re-enabled on exit only if it was enabled on entry: a collector that was already off stays
    off, and nested or concurrent uses leave it enabled once the first of them exits.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
