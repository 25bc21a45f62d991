"""Every module under planner/ imports on its own, and the module import graph has no cycle.

The graph is read from the source (ast): ``import a.b`` and ``from a.b import c`` are edges to
``a.b`` (or to the module ``a.b.c``) and to the packages above it whose ``__init__`` the import
runs, except the importer's own packages (already running). Imports under ``if TYPE_CHECKING``
are not edges. Imports inside functions run later, when the graph is loaded, so a cycle through
one does not fail at import time; they are edges too, except the lazy ones listed in
:data:`LAZY_EDGES`, each of which closes a cycle its module breaks on purpose.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "planner"

# (importer, imported): imports inside a function that close a cycle, kept lazy on purpose
LAZY_EDGES = {
    # the one-line error names a field's valid range, read from the specs that raise it
    ("planner.errors", "planner.specs.base"),
    # the search reads the default profile from the public API, which re-exports the search
    ("planner.search", "planner"),
    # a schedule's op order is run by the shared runner, which takes schedules
    ("planner.schedules.base", "planner.schedules.run"),
    # the Optuna search spawns worker processes that run the Optuna search
    ("planner.search.optuna_search", "planner.search.optuna_workers"),
    # --model config.json: the model loader imports a HuggingFace config with the importer,
    # which builds its specs
    ("planner.specs.loading", "planner.hf_import"),
}


def module_names() -> dict[str, Path]:
    """Dotted name -> file of every module under planner/."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _packages(name: str) -> list[str]:
    """'a.b.c' -> ['a', 'a.b']."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test or node)


def _imports(tree: ast.AST, in_function: bool = False):
    """(dotted targets, inside a function) of every import statement under ``tree``."""
    for node in ast.iter_child_nodes(tree):
        if _is_type_checking(node):
            continue
        nested = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        if isinstance(node, ast.Import):
            yield [a.name for a in node.names], nested
        elif isinstance(node, ast.ImportFrom):
            yield [node.module, *(f"{node.module}.{a.name}" for a in node.names)], nested
        else:
            yield from _imports(node, nested)


def import_graph(include_functions: bool) -> dict[str, set[str]]:
    """Module -> the planner modules its import statements run."""
    names = module_names()
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        own = set(_packages(name))  # packages whose __init__ is running or has run
        edges: set[str] = set()
        for targets, nested in _imports(ast.parse(path.read_text())):
            if nested and not include_functions:
                continue
            # "from a import b": the module a.b if there is one, else a (b is a name in a)
            found = [t for t in targets[1:] if t in names] or targets[:1]
            for target in (t for t in found if t in names):
                if nested and (name, target) in LAZY_EDGES:
                    continue
                edges.add(target)
                edges |= {p for p in _packages(target) if p in names and p not in own}
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as [a, b, ..., a], or [] when it is acyclic."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_graph_covers_the_command_package() -> None:
    graph = import_graph(include_functions=False)
    assert "planner.cli.simulate" in graph["planner.cli"]
    assert "planner.cli.inputs" in graph["planner.cli.simulate"]
    assert "planner.specs" in graph["planner.cli.fields"] or graph["planner.cli.fields"] == set()


def test_find_cycle_reports_the_path() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_module_level_imports_are_acyclic() -> None:
    cycle = find_cycle(import_graph(include_functions=False))
    assert not cycle, " -> ".join(cycle)


def test_imports_inside_functions_close_no_cycle_but_the_listed_ones() -> None:
    cycle = find_cycle(import_graph(include_functions=True))
    assert not cycle, " -> ".join(cycle) + " (make it acyclic, or list the lazy edge)"


def test_no_module_imports_the_command_line_but_the_command_line() -> None:
    graph = import_graph(include_functions=True)
    users = {m for m, edges in graph.items() for t in edges if t.startswith("planner.cli")}
    assert {m for m in users if not m.startswith("planner.cli")} == set()


@pytest.mark.slow
def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    """Each module imported first, with the others unloaded: an import cycle that a lucky
    import order hides fails here."""
    code = (
        "import importlib, sys\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    for key in [k for k in sys.modules if k == 'planner' or k.startswith('planner.')]:\n"
        "        del sys.modules[key]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "print('\\n'.join(failed))\n"
    )
    names = [n for n in module_names() if not n.endswith("__main__")]
    res = subprocess.run(
        [sys.executable, "-c", code, *names], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == ""
