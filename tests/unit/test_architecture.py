"""The house's shape, kept: coven_ls's import graph has no cycle, the core imports no front end
and no agent, and no module is over 800 lines.

The graph is read from the source with `ast`, never by importing it: an edge is every import a
module makes, at module level or inside a function, and those under `if TYPE_CHECKING:` too. A
cycle that only type checking closes is still a cycle for the reader: two files that name each
other cannot be understood, changed or moved apart, which is what this test is for; a record
or protocol the two share belongs in a module below both. An import names the module it
imports (`from . import pool` is an edge to `pool`, `from .hub import Hub` one to `hub`), not
the packages above it that Python loads on the way.

`python tests/unit/test_architecture.py [ROOT]` prints the graph's cycles, upward arrows and
large modules for the checkout at ROOT (this one by default), allowed or not.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "coven_ls"
MAX_LINES = 800

# The layers the core sits below: it serves them and must not know them. The agents are
# handed to the hub by the front ends (`core.agent_registry.AgentRegistry`).
ABOVE_CORE = ("agents", "lsp", "acp", "term", "doctor", "cli", "__main__")

# Known violations, each removed by a step that is planned (issue 29). This is the only
# allow-list: the test fails on any violation not listed here, and on a listed one that is gone
# (then its entry goes too), so the list only shrinks.
KNOWN_CYCLES: dict[frozenset[str], str] = {}
KNOWN_LARGE: dict[str, str] = {}


def module_files(root: Path) -> dict[str, Path]:
    """Every module of the package, by its dotted name (a package by its `__init__`'s)."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imported(path: Path, name: str, modules: dict[str, Path]) -> Iterator[str]:
    """The package's modules that the module `name` at `path` imports, anywhere in it."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                base = here[: len(here) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                # `from package import module` names the module; `from module import thing`
                # the module the thing is in.
                if f"{source}.{alias.name}" in modules:
                    yield f"{source}.{alias.name}"
                elif source in modules:
                    yield source


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = module_files(root)
    return {
        name: {m for m in _imported(path, name, modules) if m != name}
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan), each as one
    cycle through them, starting at its first module by name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted((_one_cycle(graph, c) for c in found), key=lambda c: c[0])


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, within it."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & component):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle in {component}")  # a component of 2+ always has one


def upward_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from the core into a layer above it."""
    above = tuple(f"{PACKAGE}.{layer}" for layer in ABOVE_CORE)
    return sorted(
        (source, target)
        for source, targets in graph.items()
        if source == f"{PACKAGE}.core" or source.startswith(f"{PACKAGE}.core.")
        for target in targets
        if target in above or target.startswith(tuple(f"{a}." for a in above))
    )


def large_modules(root: Path) -> dict[str, int]:
    return {
        path.relative_to(root).as_posix(): lines
        for path in module_files(root).values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }


def _cycle_text(cycle: list[str]) -> str:
    return " -> ".join(cycle)


# --- the tests -----------------------------------------------------------------------------------


def test_the_graph_is_read_from_every_module() -> None:
    """The graph the other tests judge is the real one: it has the package's modules and
    edges of every kind (a relative module import, a relative name import, a function-level
    import; a TYPE_CHECKING import, below)."""
    graph = import_graph(ROOT)
    assert len(graph) == len(list((ROOT / PACKAGE).rglob("*.py"))) > 50
    assert "coven_ls.core.workspace.worktrees" in graph["coven_ls.core.workspace.isolation"]
    assert "coven_ls.core.workspace.git" in graph["coven_ls.core.workspace.merge"]
    assert "coven_ls.lsp.transports" in graph["coven_ls.cli"]  # imported inside a function


def test_an_import_only_type_checking_makes_is_an_edge(tmp_path: Path) -> None:
    """No module of the package imports another under TYPE_CHECKING any more (the last ones
    went with the rooms): a package of two modules shows the reader still counts it."""
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "below.py").write_text("class Thing: ...\n")
    (package / "above.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .below import Thing\n"
    )
    assert import_graph(tmp_path)[f"{PACKAGE}.above"] == {f"{PACKAGE}.below"}


def test_no_import_cycles() -> None:
    found = {frozenset(c): c for c in cycles(import_graph(ROOT))}
    new = [_cycle_text(c) for key, c in found.items() if key not in KNOWN_CYCLES]
    assert not new, (
        "Import cycles (two modules that cannot be understood apart; move what they share into "
        "a module below both):\n  " + "\n  ".join(new)
    )
    gone = [f"{sorted(key)} ({why})" for key, why in KNOWN_CYCLES.items() if key not in found]
    assert not gone, (
        "These allowed cycles are gone (or changed): take them out of KNOWN_CYCLES in "
        "tests/unit/test_architecture.py:\n  " + "\n  ".join(gone)
    )


def test_the_core_imports_no_front_end_and_no_agent() -> None:
    wrong = [f"{source} imports {target}" for source, target in upward_arrows(import_graph(ROOT))]
    assert not wrong, (
        "The core imports a layer above it (the front ends hand it what it needs, such as the "
        "agents through core.agent_registry.AgentRegistry):\n  " + "\n  ".join(wrong)
    )


def test_no_module_over_800_lines() -> None:
    large = large_modules(ROOT)
    new = [
        f"{path}: {lines} lines" for path, lines in sorted(large.items()) if path not in KNOWN_LARGE
    ]
    assert not new, (
        f"Modules over {MAX_LINES} lines (split them along their jobs):\n  " + "\n  ".join(new)
    )
    gone = [f"{path} ({why})" for path, why in KNOWN_LARGE.items() if path not in large]
    assert not gone, (
        f"These allowed modules are no longer over {MAX_LINES} lines (or gone): take them out "
        "of KNOWN_LARGE in tests/unit/test_architecture.py:\n  " + "\n  ".join(gone)
    )


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c", "a"]]),
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b", "c"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b", "a"], ["c", "d", "c"]]),
    ],
)
def test_cycles_are_found_and_named(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(graph) == expected


def test_an_upward_arrow_is_found() -> None:
    graph = {
        "coven_ls.core.hub": {"coven_ls.agents", "coven_ls.core.store"},
        "coven_ls.core.store": set(),
        "coven_ls.agents": {"coven_ls.core.hub"},
        "coven_ls.lsp.server": {"coven_ls.agents", "coven_ls.core.hub"},
    }
    assert upward_arrows(graph) == [("coven_ls.core.hub", "coven_ls.agents")]


def main(root: Path) -> None:
    graph = import_graph(root)
    print(f"{root}: {len(graph)} modules, {sum(map(len, graph.values()))} imports")
    print("cycles:")
    for cycle in cycles(graph):
        known = KNOWN_CYCLES.get(frozenset(cycle))
        print(f"  {_cycle_text(cycle)}" + (f"   [allowed until: {known}]" if known else ""))
    print("upward arrows (core -> a layer above it):")
    for source, target in upward_arrows(graph):
        print(f"  {source} -> {target}")
    print(f"modules over {MAX_LINES} lines:")
    for path, lines in sorted(large_modules(root).items(), key=lambda item: -item[1]):
        known = KNOWN_LARGE.get(path)
        print(f"  {path}: {lines}" + (f"   [allowed until: {known}]" if known else ""))


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT)
