"""The front door: ``from solvers import ...``, its docstrings' examples and docs/python.md run as doctests."""

from __future__ import annotations

import doctest
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import solvers

ROOT = Path(__file__).resolve().parents[2]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# modules whose docstrings carry the examples of the exported names
DOCUMENTED_MODULES = ["solvers.generate", "solvers.model.documents", "solvers.model.graph", "solvers.model.graphml",
                      "solvers.model.topology", "solvers.registry", "solvers.simulator", "solvers.solving"]


def test_every_name_is_exported_and_resolves() -> None:
    assert solvers.__all__ == sorted(solvers._EXPORTS)
    for name in solvers.__all__:
        module, attr = solvers._EXPORTS[name]
        assert getattr(solvers, name) is getattr(importlib.import_module(module), attr)
        assert name in dir(solvers)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = solvers.nope  # type: ignore[attr-defined]


def test_import_loads_no_numpy_and_no_back_end() -> None:
    code = ("import sys, solvers; heavy = [m for m in sys.modules if m.split('.')[0] in "
            "('numpy', 'networkx', 'pydantic', 'ortools') or m.startswith('solvers.')]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_simulate_stays_the_function_after_its_subpackage_is_imported() -> None:
    from solvers import simulate as first

    importlib.import_module("solvers.simulator.stage")
    from solvers import simulate

    assert callable(simulate) and simulate is first and solvers.simulate is first
    assert sys.modules["solvers.simulator"].simulate is first


@pytest.mark.parametrize("name", [n for n in solvers.__all__ if inspect.isfunction(getattr(solvers, n))])
def test_exported_functions_document_parameters_returns_raises_and_an_example(name: str) -> None:
    doc = inspect.getdoc(getattr(solvers, name)) or ""
    for section in ("Parameters\n----------", "Returns\n-------", "Raises\n------", "Examples\n--------\n>>> "):
        assert section in doc, f"{name}: no {section.splitlines()[0]} section"


@pytest.mark.parametrize("cls", ["OpGraph", "Topology"])
def test_networkx_methods_are_documented_the_same_way(cls: str) -> None:
    for method in ("to_networkx", "from_networkx"):
        doc = inspect.getdoc(getattr(getattr(solvers, cls), method)) or ""
        assert all(s in doc for s in ("Parameters", "Returns", "Raises", "Examples\n--------\n>>> "))


@pytest.mark.parametrize("module", DOCUMENTED_MODULES)
def test_docstring_examples_run(module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(importlib.import_module(module), optionflags=FLAGS, verbose=False, report=True)
    assert result.attempted > 0 and result.failed == 0


def test_python_md_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = doctest.testfile(str(ROOT / "docs" / "python.md"), module_relative=False, optionflags=FLAGS,
                              verbose=False, report=True)
    assert result.attempted > 20 and result.failed == 0


def test_readme_library_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:] if "from solvers import" in b]
    assert blocks
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "README.md", "exec"), {})
    status = capsys.readouterr().out.split()[0]
    assert status in ("optimal", "feasible")
