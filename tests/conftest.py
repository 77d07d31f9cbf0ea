"""Hypothesis profiles for the whole suite, and the order of its files.

``ci`` (the default, used by ``make test`` and ``.ci/run``): derandomized, so a run draws the
same examples every time and never fails on a case nobody touched.  ``fuzz`` (``make fuzz``):
random examples, ten times as many per test (:func:`tests.strategies.examples`).  A failure
either profile finds stays in the suite as an explicit ``@example``.

The files holding a ``slow`` test (the launcher's torchrun runs, the service's outages) are
collected first, each file's tests kept together and in order.  ``make test`` runs the files in
that order on its two workers (``--dist loadfile --no-loadscope-reorder``): the long files start
while many short ones remain to even the workers out, rather than last (xdist's default order,
most tests first, puts files of one or a few long tests at the end).
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.strategies import PROFILE

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True, database=None)
settings.register_profile("fuzz", derandomize=False, deadline=None, print_blob=True, max_examples=1000)
settings.load_profile(PROFILE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with a ``slow`` test first; the order is otherwise the collection's (a stable sort)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)
