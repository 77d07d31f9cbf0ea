from __future__ import annotations

import subprocess
import sys
from unittest import mock

import pytest

from solvers import registry
from solvers.base import parse_options
from solvers.model.errors import InvalidOptions, NotApplicable, UnknownSolver
from solvers.solving import solve
from tests.solvers import contract_fixtures as fx


def test_lookup_is_case_insensitive() -> None:
    assert registry.get_solver_class("EVEN") is registry.get_solver_class("even")


def test_a_builtin_solver_is_found_without_reading_the_entry_points() -> None:
    """Entry points never replace a built-in name, so its lookup does not scan the installed distributions."""
    registry._table.cache_clear()
    try:
        with mock.patch.object(registry, "entry_points", side_effect=AssertionError("entry points read")):
            assert registry.get_solver_class("Celeritas").name == "celeritas"
            with pytest.raises(AssertionError, match="entry points read"):
                registry.get_solver_class("not-built-in")
    finally:
        registry._table.cache_clear()


def test_unknown_solver_lists_valid_names() -> None:
    with pytest.raises(UnknownSolver) as err:
        registry.get_solver_class("nope")
    for name in registry.names():
        assert name in str(err.value)


def test_catalogue_has_schemas_and_objectives() -> None:
    for entry in registry.catalogue():
        assert entry.summary and entry.objectives
        assert entry.options_schema["type"] == "object"
        assert entry.name == entry.name.lower()


def test_unknown_option_is_rejected_naming_it() -> None:
    cls = registry.get_solver_class("even")
    with pytest.raises(InvalidOptions, match="bogus"):
        parse_options(cls.options_type, {"bogus": 1}, "even")


def test_solver_not_answering_objective_is_refused() -> None:
    with pytest.raises(NotApplicable, match="single"):
        solve(fx.throughput_problem(), "single")


def test_import_solvers_is_light() -> None:
    code = ("import sys, solvers, solvers.registry, solvers.model; "
            "bad = [m for m in ('fastapi', 'sqlalchemy', 'ortools', 'pulp', 'torch', 'scipy', 'service') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_builtin_objectives_match_their_classes_and_need_no_import() -> None:
    """``auto`` picks its members from :data:`registry.BUILTIN_OBJECTIVES` without importing them."""
    assert set(registry.BUILTIN_OBJECTIVES) == set(registry.BUILTIN)
    for name in registry.BUILTIN:
        assert registry.objectives(name) == tuple(registry.get_solver_class(name).objectives), name
    assert registry.canonical_name(" HEFT ") == "heft"
    with pytest.raises(UnknownSolver, match="nope"):
        registry.canonical_name("nope")
    code = ("import sys; from solvers import registry; "
            "names = [n for n in registry.names() if 'latency' in registry.objectives(n)]; "
            "bad = [m for m in ('solvers.moirai', 'solvers.exact', 'solvers.celeritas', 'scipy', 'ortools') "
            "if m in sys.modules]; print(names, bad); sys.exit(1 if bad or 'moirai' not in names else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
