"""The suite's file order (tests/conftest.py): the files it names exist, and they come first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.conftest import LONGEST_FIRST, file_rank

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_named_longest_first_exists_once() -> None:
    missing = [name for name in LONGEST_FIRST if not (ROOT / name).is_file()]
    assert not missing, f"tests/conftest.py LONGEST_FIRST names files that are not there: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def _item(name: str) -> Any:
    return SimpleNamespace(path=ROOT / name)


def test_named_files_first_in_their_order_then_slow_files_then_the_rest() -> None:
    slow = {ROOT / "tests/launcher/test_weights.py"}
    names = ["tests/test_architecture.py", "tests/launcher/test_weights.py", *reversed(LONGEST_FIRST)]
    ranked = sorted(names, key=lambda n: file_rank(_item(n), ROOT, slow))
    assert ranked == [*LONGEST_FIRST, "tests/launcher/test_weights.py", "tests/test_architecture.py"]
