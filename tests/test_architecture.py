"""The two import rules of docs/architecture.md, read from the source with ``ast`` (nothing is imported).

1. No import cycle among first-party modules, counting imports at module level and inside
   functions (``if TYPE_CHECKING:`` blocks aside).
2. A first-party import inside a function only where it defers a heavy optional dependency: the
   imported module imports one at module level, itself or through its own module-level
   first-party imports.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = frozenset({"torch", "transformers", "ortools", "pulp", "psycopg", "celery", "redis", "playwright"})


@dataclass(frozen=True)
class Import:
    """One import statement's first-party target, where it is and whether it runs at import time."""

    target: str
    line: int
    in_function: bool


@dataclass
class Module:
    """A first-party module: its file, its first-party imports and the third-party roots it imports at
    module level."""

    name: str
    path: Path
    is_package: bool
    imports: list[Import] = field(default_factory=list)
    external_roots: set[str] = field(default_factory=set)


def first_party_packages(root: Path) -> list[str]:
    """The top-level packages named by pyproject's ``[tool.setuptools.packages.find] include``
    (``migrations``, Alembic's folder, has no ``__init__``: its modules count all the same)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["packages"]["find"]["include"]
    names = {pattern.split(".")[0].rstrip("*") for pattern in patterns}
    return sorted(name for name in names if (root / name).is_dir())


def discover(root: Path, packages: list[str]) -> dict[str, Module]:
    """Every module of ``packages`` under ``root``, with its imports resolved to first-party modules."""
    modules: dict[str, Module] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            modules[name] = Module(name, path, is_package)
    for module in modules.values():
        _read_imports(module, modules)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(body: list[ast.stmt], in_function: bool) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement under ``body`` with whether it sits in a function, ``if TYPE_CHECKING:`` skipped."""
    for node in body:
        yield node, in_function
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _statements(node.orelse, in_function)
            continue
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                yield from _statements([child], inner)
            elif isinstance(child, ast.excepthandler | ast.match_case):
                yield from _statements(child.body, inner)


def _resolve(name: str, modules: dict[str, Module]) -> str | None:
    """``name`` or its longest prefix that is a first-party module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _read_imports(module: Module, modules: dict[str, Module]) -> None:
    tree = ast.parse(module.path.read_text(), filename=str(module.path))
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for node, in_function in _statements(tree.body, False):
        targets: list[str] = []
        absolute = True
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            absolute = node.level == 0
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.append(submodule if submodule in modules else source)
        else:
            continue
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is not None:
                module.imports.append(Import(resolved, node.lineno, in_function))
            elif absolute and not in_function:
                module.external_roots.add(target.split(".")[0])


def _import_graph(modules: dict[str, Module]) -> dict[str, list[str]]:
    return {name: sorted({i.target for i in m.imports if i.target != name}) for name, m in modules.items()}


def find_cycles(modules: dict[str, Module]) -> list[list[str]]:
    """One cycle (closed: first == last) per strongly connected component of the import graph."""
    graph = _import_graph(modules)
    return [_cycle_in(component, graph) for component in import_knots(modules)]


def import_knots(modules: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components of more than one module (sorted), by Tarjan's algorithm."""
    graph = _import_graph(modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):  # iteratively: work holds (module, index of its next import to visit)
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, k = work.pop()
            if k == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if k < len(graph[node]):
                work.append((node, k + 1))
                nxt = graph[node][k]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return components


def _cycle_in(component: list[str], graph: dict[str, list[str]]) -> list[str]:
    """A shortest cycle through the component's first module, by breadth-first search inside it."""
    members = set(component)
    start = component[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in graph[node]:
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if nxt in members and nxt not in parent:
                    parent[nxt] = node
                    following.append(nxt)
        frontier = following
    return [*component, component[0]]


def heavy_modules(modules: dict[str, Module]) -> set[str]:
    """The modules that import a heavy optional dependency at module level, directly or through
    their module-level first-party imports."""
    heavy = {name for name, m in modules.items() if m.external_roots & HEAVY}
    importers: dict[str, set[str]] = {name: set() for name in modules}
    for name, m in modules.items():
        for i in m.imports:
            if not i.in_function:
                importers[i.target].add(name)
    frontier = list(heavy)
    while frontier:
        for importer in importers[frontier.pop()]:
            if importer not in heavy:
                heavy.add(importer)
                frontier.append(importer)
    return heavy


def deferred_light_imports(modules: dict[str, Module], root: Path) -> list[str]:
    """``path:line module`` for each first-party import inside a function that defers nothing heavy."""
    heavy = heavy_modules(modules)
    offenders = (f"{m.path.relative_to(root)}:{i.line} {i.target}"
                 for m in modules.values() for i in m.imports
                 if i.in_function and i.target not in heavy and i.target != m.name)
    return list(dict.fromkeys(offenders))


@cache
def _project() -> dict[str, Module]:
    return discover(ROOT, first_party_packages(ROOT))


def test_no_import_cycle() -> None:
    modules = _project()
    graph = _import_graph(modules)
    knots = import_knots(modules)
    assert not knots, "import cycles (a cycle, then every module caught in it):\n" + "\n".join(
        f"{' -> '.join(_cycle_in(knot, graph))}  [{', '.join(knot)}]" for knot in knots)


def test_function_level_imports_only_defer_heavy_dependencies() -> None:
    offenders = deferred_light_imports(_project(), ROOT)
    assert not offenders, ("first-party imports inside functions that defer no heavy optional dependency "
                           "(move them to the top of the module):\n" + "\n".join(offenders))


def _tree(root: Path, files: dict[str, str]) -> dict[str, Module]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return discover(root, ["pkg"])


def test_a_cycle_through_a_function_level_import_and_a_parent_package_is_found(tmp_path: Path) -> None:
    modules = _tree(tmp_path, {
        "pkg/__init__.py": "from pkg.a import thing\n",
        "pkg/a.py": "def thing():\n    from .b import other\n    return other\n",
        "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n"
                    "from pkg import VALUE\n",
        "pkg/c.py": "from pkg.b import other\n",
    })
    assert find_cycles(modules) == [["pkg", "pkg.a", "pkg.b", "pkg"]]
    assert deferred_light_imports(modules, tmp_path) == ["pkg/a.py:2 pkg.b"]


def test_from_package_import_submodule_is_the_submodule(tmp_path: Path) -> None:
    modules = _tree(tmp_path, {
        "pkg/__init__.py": "from pkg import a\n",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "X = 1\n",
    })
    assert find_cycles(modules) == []
    assert [i.target for i in modules["pkg.a"].imports] == ["pkg.b"]


def test_a_function_level_import_deferring_torch_is_allowed(tmp_path: Path) -> None:
    modules = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/runtime.py": "import torch.nn\n",
        "pkg/model.py": "from pkg.runtime import *\n",
        "pkg/lazy.py": "try:\n    import redis\nexcept ImportError:\n    pass\n",
        "pkg/cli.py": "def main():\n    from pkg import model\n    from pkg.lazy import x\n"
                      "    from pkg.plain import y\n    return model, x, y\n",
        "pkg/plain.py": "def f():\n    import torch\n",
    })
    assert heavy_modules(modules) == {"pkg.runtime", "pkg.model", "pkg.lazy"}
    assert deferred_light_imports(modules, tmp_path) == ["pkg/cli.py:4 pkg.plain"]
