"""Hypothesis profiles for the whole suite, and the order of its files.

``ci`` (the default, used by ``make test`` and ``.ci/run``): derandomized, so a run draws the
same examples every time and never fails on a case nobody touched.  ``fuzz`` (``make fuzz``):
random examples, ten times as many per test (:func:`tests.strategies.examples`).  A failure
either profile finds stays in the suite as an explicit ``@example``.

The longest files are collected first, longest first (:data:`LONGEST_FIRST`), then the other
files holding a ``slow`` test (the launcher's torchrun runs, the service's outages), then the
rest; each file's tests kept together and in order.  ``make test`` runs the files in that order
on its two workers (``--dist loadfile --no-loadscope-reorder``): the whole run takes at least its
longest file, so that one starts at once, and the long files start while many short ones remain
to even the workers out, rather than last (xdist's default order, most tests first, puts files of
one or a few long tests at the end).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from tests.strategies import PROFILE

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True, database=None)
settings.register_profile("fuzz", derandomize=False, deadline=None, print_blob=True, max_examples=1000)
settings.load_profile(PROFILE)


# Longest first, by their seconds in a whole-suite run on the 2-core machine (docs/benchmarks.md,
# "The suite's longest files"); a file not named here and holding a ``slow`` test comes after these.
LONGEST_FIRST = (
    "tests/launcher/test_matrix.py",
    "tests/solvers/test_latency_matrix.py",
    "tests/launcher/test_runs.py",
    "tests/launcher/test_schedules.py",
    "tests/service/jobs/test_celery_faults.py",
    "tests/service/jobs/test_resilience.py",
    "tests/launcher/test_tensor_parallel.py",
    "tests/service/jobs/test_outages.py",
    "tests/launcher/test_boundaries.py",
    "tests/launcher/test_memory_fits.py",
    "tests/service/jobs/test_fanout.py",
    "tests/launcher/test_training.py",
    "tests/service/dashboard/test_browser.py",
)


def file_rank(item: pytest.Item, root: Path, slow_files: set[Path]) -> int:
    """Where ``item``'s file goes: its place in :data:`LONGEST_FIRST`, then the other slow files, then the rest."""
    try:
        return LONGEST_FIRST.index(item.path.relative_to(root).as_posix())
    except ValueError:
        return len(LONGEST_FIRST) + (item.path not in slow_files)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first, then the slow ones; the order is otherwise the collection's (a stable sort)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: file_rank(item, config.rootpath, slow_files))
