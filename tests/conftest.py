"""Hypothesis profiles for the whole suite.

``ci`` (the default, used by ``make test`` and ``.ci/run``): derandomized, so a run draws the
same examples every time and never fails on a case nobody touched.  ``fuzz`` (``make fuzz``):
random examples, ten times as many per test (:func:`tests.strategies.examples`).  A failure
either profile finds stays in the suite as an explicit ``@example``.
"""

from __future__ import annotations

from hypothesis import settings

from tests.strategies import PROFILE

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True, database=None)
settings.register_profile("fuzz", derandomize=False, deadline=None, print_blob=True, max_examples=1000)
settings.load_profile(PROFILE)
