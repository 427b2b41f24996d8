"""No import cycles between the project's modules, a package's `__init__` included.

The graph is read from the source (every `import`, at the top of a module or inside a function:
a lazy import hides a cycle from Python but not from a reader), plus one edge from each module to
its package's `__init__`, which Python runs first. A cycle makes the order of initialisation
matter and hides which part depends on which; docs/architecture.md draws the intended layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

from common.paths import REPO_ROOT

PACKAGES = ("common", "compiler", "phobos", "pod", "scheduler", "schemas")



def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((REPO_ROOT / pkg).rglob("*.py"))}


def _imported(name: str, modules: dict[str, Path]) -> set[str]:
    """The project modules an import of `name` runs: each package on the way, and the module."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules.keys()


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    edges |= _imported(alias.name, modules)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                edges |= _imported(node.module, modules)
                for alias in node.names:  # `from pkg import module`
                    edges |= _imported(f"{node.module}.{alias.name}", modules)
        package = name.rpartition(".")[0]
        if package in modules:
            edges.add(package)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    bad = cycles(import_graph())
    assert not bad, "import cycles: " + "; ".join(" <-> ".join(c) for c in bad)


def test_the_checker_sees_a_cycle_through_a_package_init():
    graph = {"a": {"a.b"}, "a.b": {"a"}, "c": {"a.b"}}
    assert cycles(graph) == [["a", "a.b"]]
    assert cycles({"a": set(), "a.b": {"a"}}) == []


def test_the_graph_holds_lazy_imports_and_package_edges():
    graph = import_graph()
    assert "compiler.cluster" in graph["compiler.cluster.build"]  # its package runs first
    assert "compiler.cluster.build" in graph["scheduler.jobs.prepare"]  # imported inside a function


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_the_pod_does_not_reach_the_test_oracle():
    """compiler/cluster/sequential.py is the reference the runtime is tested against; a pod that
    ran leaves through it would be tested against itself."""
    graph = import_graph()
    for module in (m for m in graph if m == "pod" or m.startswith("pod.")):
        assert "compiler.cluster.sequential" not in _reachable(graph, module), module


# Each top-level package may import only the ones below it (docs/architecture.md): imports run
# compiler -> schemas -> common, never back; the scheduler and the pods meet only on the wire.
MAY_IMPORT = {
    "common": {"common"},
    "schemas": {"schemas", "common"},
    "compiler": {"compiler", "schemas", "common"},
    "pod": {"pod", "compiler", "schemas", "common"},
    "scheduler": {"scheduler", "compiler", "schemas", "common"},  # it starts local pods as processes
    "phobos": {"phobos", "scheduler", "compiler", "common"},  # the public API only names the others'
}


def test_imports_run_down_the_layers():
    graph = import_graph()
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if target.split(".")[0] not in MAY_IMPORT[module.split(".")[0]]
    )
    assert not wrong, "imports against the layers: " + ", ".join(wrong)
