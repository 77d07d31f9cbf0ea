"""The service's modules import one another without a cycle, and import first-party modules
inside functions only where listed (to defer an optional dependency, or the service itself from
the ``placer`` command line)."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = ("solvers", "service", "client", "launcher")
DEFERRED = {
    # module: the first-party modules it imports inside functions
    "service/jobs/dispatch.py": {"service.jobs.celery_dispatch"},  # celery, an optional dependency
    # the plugin that every `placer` command loads: the service's modules when a service command runs
    # (service.jobs.worker also for celery); see the module's docstring
    "service/cli.py": {"service.jobs.worker", "service.db", "service.db.engine", "service.auth", "service.app",
                       "service.config", "service.demo"},
}


def test_no_import_cycle_in_the_service() -> None:
    graph = grimp.build_graph("service", "solvers", "client", "launcher")
    imports = nx.DiGraph()
    for module in graph.modules:
        if module.startswith("service"):
            imports.add_edges_from((module, dep) for dep in graph.find_modules_directly_imported_by(module)
                                   if dep.startswith("service"))
    assert list(nx.simple_cycles(imports)) == []


def test_first_party_imports_inside_functions_only_defer_heavy_dependencies() -> None:
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "service").rglob("*.py")):
        for func in ast.walk(ast.parse(path.read_text())):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                for name in names:
                    if name.split(".")[0] in FIRST_PARTY:
                        found.setdefault(str(path.relative_to(ROOT)), set()).add(name)
    assert found == DEFERRED
