"""The kept torchrun worlds (tests/launcher/worlds.py) answer as worlds of their own would: a job that fails
ends its world with a failing code and its own part of the log, and the next job starts a new world."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.launcher.conftest import bundle, check_training_step, solve, torchrun
from tests.launcher.worlds import WORLDS

pytestmark = pytest.mark.slow


def test_a_failing_job_ends_the_world_and_the_next_starts_another(workdir: Path,
                                                                   graphs: Callable[[str], Path]) -> None:
    graph = graphs("cnn")
    folder = bundle(workdir, solve(workdir, graph, "even", 2, "--stages", "2"), graph, 2, "worlds-cnn")
    world = WORLDS.get(2)
    first = torchrun(folder, 2, kept=True)
    check_training_step(first, folder, 2)
    starts = world.starts
    failed = torchrun(folder, 2, "--data", "tests.launcher.models:no_such_dataset", kept=True)
    assert failed.code != 0
    assert "no_such_dataset" in failed.log and "done " not in failed.log, failed.log[-3000:]
    assert world.proc is None or world.proc.poll() is not None
    again = torchrun(folder, 2, kept=True)
    check_training_step(again, folder, 2)
    assert world.starts == starts + 1
    assert "no_such_dataset" not in again.log  # each job's log is its own
