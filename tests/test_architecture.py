"""Dependencies point one way (docs/architecture.md, "The package rule"), and no two modules import each other.

Every import is read from the source, lazy (function-level) ones included, so a cycle cannot hide in a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: package → packages it may import (besides itself); r2a_core and sim are the leaves
ALLOWED = {
    "r2a_core": set(),
    "sim": {"r2a_core"},
    "demos": {"r2a_core", "sim"},
    "graph_builder": {"r2a_core", "demos"},
    "r2a": {"r2a_core", "demos", "graph_builder"},
    "gating": {"r2a_core", "sim", "demos", "graph_builder", "r2a"},
    "eval": {"r2a_core", "sim", "demos", "graph_builder", "r2a", "gating"},
}
#: the one module that may import anything: the command, which loads each subcommand group lazily by name
COMMAND = "r2a.cli"


def _modules() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name (a package is its ``__init__``)."""
    out = {}
    for package in ALLOWED:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an import name loads (its deepest existing prefix), or None for third-party code."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(module: str, *, runtime_only: bool = False) -> set[str]:
    """Project modules ``module`` imports; ``runtime_only`` skips ``if TYPE_CHECKING:`` blocks (never executed)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if runtime_only and _is_type_checking_block(node):
            for child in node.orelse:  # type: ignore[attr-defined]
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(filter(None, (_resolve(alias.name) for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                target = _resolve(f"{base}.{alias.name}") if f"{base}.{alias.name}" in MODULES else _resolve(base)
                if target:
                    found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    found.discard(module)
    return found


def _package(module: str) -> str:
    return module.split(".")[0]


def test_no_package_imports_against_the_arrows():
    violations = []
    for module in MODULES:
        if module == COMMAND:
            continue
        allowed = ALLOWED[_package(module)]
        for target in _imports(module):
            if _package(target) != _package(module) and _package(target) not in allowed:
                violations.append(f"{MODULES[module].relative_to(ROOT)} imports {target}")
    assert not violations, "\n".join(violations)


def test_only_the_command_imports_the_benchmark():
    importers = sorted(m for m in MODULES if _package(m) != "eval" and m != COMMAND
                       and any(_package(t) == "eval" for t in _imports(m)))
    assert not importers, f"these import eval (the benchmark): {importers}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
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


def test_no_import_cycle_between_modules():
    graph = {module: _imports(module, runtime_only=True) for module in MODULES}
    cycles = _cycles(graph)
    assert not cycles, "import cycles (lazy imports included): " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle_hidden_in_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_package_is_covered():
    folders = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"configs"}
    assert folders == set(ALLOWED), f"packages without a rule: {sorted(folders - set(ALLOWED))}"


def test_the_configs_package_is_data_only():  # configs/ installs as r2a_configs so the wheel carries the YAMLs
    assert [p.name for p in (ROOT / "configs").rglob("*.py")] == ["__init__.py"]
