"""Dependencies point one way (docs/architecture.md, "The package rule"), and no two modules import each other.

Every import is read from the source, lazy (function-level) ones included, so a cycle cannot hide in a function;
no project module reaches another through ``importlib`` (an import map would not see that arrow), and the command
is no exception: ``r2a_cli`` imports each subcommand group with a plain ``from r2a_cli import ...``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: package → packages it may import (besides itself), floor by floor: r2a_core and sim are the leaves, r2a is the
#: run time, training and gating learn, eval measures, r2a_cli is the command. A package added above gating (the
#: ``fit/`` pipeline of a later issue) gets its row between gating and eval.
ALLOWED = {
    "r2a_core": set(),
    "sim": {"r2a_core"},
    "demos": {"r2a_core", "sim"},
    "graph_builder": {"r2a_core", "demos"},
    "r2a": {"r2a_core", "demos", "graph_builder"},
    "training": {"r2a_core", "sim", "demos", "graph_builder", "r2a"},
    "gating": {"r2a_core", "sim", "demos", "graph_builder", "r2a", "training"},
    "fit": {"r2a_core", "sim", "demos", "graph_builder", "r2a", "training", "gating"},
    "eval": {"r2a_core", "sim", "demos", "graph_builder", "r2a", "training", "gating", "fit"},
    "r2a_cli": {"r2a_core", "sim", "demos", "graph_builder", "r2a", "training", "gating", "fit", "eval"},
}
#: the learning floors: what a deployment never loads
LEARNING = ("training", "gating", "fit")
#: r2a/'s own floors, from the bottom: a subpackage may import those on the floors below its own, never a sibling on
#: its floor or one above (the parts; R2A, which composes retrieval and the observation wrappers; the registry that
#: builds any policy by name; the server and proxy around a built policy)
R2A_FLOORS = (
    ("adapters", "vla", "retrieval", "observation"),
    ("wrapper",),
    ("policies",),
    ("serve",),
)
#: modules that import a module named only at run time, and why that name is never a project module's
DYNAMIC_IMPORTS = {
    "r2a.adapters.callable_policy": "the user's own module of --policy callable:package.module:function",
    "eval.preflight": "the optional third-party package a flag needs (its OPTIONAL: ray, wandb)",
}


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
        allowed = ALLOWED[_package(module)]
        for target in _imports(module):
            if _package(target) != _package(module) and _package(target) not in allowed:
                violations.append(f"{MODULES[module].relative_to(ROOT)} imports {target}")
    assert not violations, "\n".join(violations)


def test_the_run_time_imports_no_learning_code():
    """A deployment imports r2a/ and never loads training code: no module of r2a imports training or gating."""
    importers = sorted(f"{m} imports {t}" for m in MODULES if _package(m) == "r2a"
                       for t in _imports(m) if _package(t) in LEARNING)
    assert not importers, "run-time modules import learning code (move it to training/):\n" + "\n".join(importers)


def _r2a_floor(module: str) -> int | None:
    """The floor of an r2a module's subpackage (None for ``r2a`` itself)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "r2a":
        return None
    return next(i for i, floor in enumerate(R2A_FLOORS) if parts[1] in floor)


def test_every_r2a_subpackage_has_a_floor():
    subpackages = {p.parent.name for p in (ROOT / "r2a").glob("*/__init__.py")}
    assert subpackages == {name for floor in R2A_FLOORS for name in floor}, \
        f"r2a subpackages without a floor in R2A_FLOORS: {sorted(subpackages - set().union(*R2A_FLOORS))}"
    loose = sorted(p.name for p in (ROOT / "r2a").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules at the root of r2a/ belong in a subpackage with a floor: {loose}"


def test_no_import_back_up_the_floors_of_r2a():
    violations = []
    for module in (m for m in MODULES if _package(m) == "r2a"):
        floor = _r2a_floor(module)
        inside = (t for t in _imports(module) if _package(t) == "r2a" and t.split(".")[:2] != module.split(".")[:2])
        for target in inside:
            if floor is None or _r2a_floor(target) is None or _r2a_floor(target) >= floor:
                violations.append(f"{MODULES[module].relative_to(ROOT)} imports {target}")
    assert not violations, "imports back up (or across) r2a's floors:\n" + "\n".join(violations)


def test_only_the_command_imports_the_benchmark():
    importers = sorted(m for m in MODULES if _package(m) not in ("eval", "r2a_cli")
                       and any(_package(t) == "eval" for t in _imports(m)))
    assert not importers, f"these import eval (the benchmark): {importers}"


def test_nothing_imports_the_command():
    importers = sorted(m for m in MODULES if _package(m) != "r2a_cli" and any(_package(t) == "r2a_cli"
                                                                              for t in _imports(m)))
    assert not importers, f"these import r2a_cli (the command, the top floor): {importers}"


#: calls that import a module by name (``find_spec`` only for a dotted name: it imports the parent packages)
_IMPORTING_CALLS = {"importlib.import_module", "importlib.__import__", "__import__", "importlib.reload",
                    "importlib.util.module_from_spec", "importlib.util.spec_from_file_location",
                    "importlib.resources.files", "importlib.resources.as_file", "runpy.run_module", "runpy.run_path"}
_FIND_SPEC = "importlib.util.find_spec"


def _qualified_names(tree: ast.AST) -> dict[str, str]:
    """Local name → the qualified name it stands for, from the module's imports (``import importlib.util as u``,
    ``from importlib import import_module``)."""
    names = {"__import__": "__import__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                names[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.AST, names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, names)
        return f"{base}.{node.attr}" if base else None
    return None


def hidden_imports(source: str, projects: set[str]) -> list[tuple[str, str | None]]:
    """(call, literal module name or None when computed) of each call in ``source`` that imports a module by name:
    a literal naming a module of ``projects``, or any computed name."""
    tree = ast.parse(source)
    names = _qualified_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        call = _dotted(node.func, names)
        if call not in _IMPORTING_CALLS and call != _FIND_SPEC:
            continue
        arg = node.args[0]
        literal = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
        if call == _FIND_SPEC:  # locates a top-level name without importing it; a dotted name imports its parents
            if literal is not None and "." in literal and literal.split(".")[0] in projects:
                found.append((call, literal))
        elif literal is None or literal.split(".")[0] in projects:
            found.append((call, literal))
    return found


def test_no_hidden_imports():
    """No module imports a project module through importlib (the import map and the tests above would not see the
    arrow); a name computed at run time only where DYNAMIC_IMPORTS says why it is never a project module."""
    violations = []
    for module, path in MODULES.items():
        for call, literal in hidden_imports(path.read_text(), set(ALLOWED) | {"r2a_configs"}):
            if literal is None and module in DYNAMIC_IMPORTS:
                continue
            violations.append(f"{path.relative_to(ROOT)}: {call}({literal or '<computed>'!s})")
    assert not violations, "imports through importlib (write a plain import):\n" + "\n".join(violations)


def test_the_dynamic_imports_name_no_project_module():
    from eval.preflight import OPTIONAL

    assert set(DYNAMIC_IMPORTS) <= set(MODULES)
    assert not set(OPTIONAL) & (set(ALLOWED) | {"r2a_configs"})


def test_the_hidden_import_check_finds_them():
    projects = {"r2a", "eval"}
    source = ("import importlib\nimport importlib.util as u\nfrom importlib import import_module as im\n"
              "def f(name):\n"
              "    importlib.import_module('eval.cli')\n    im(name)\n    __import__('r2a')\n"
              "    importlib.import_module('json')\n    u.find_spec('gymnasium')\n    u.find_spec('r2a.vla')\n")
    assert hidden_imports(source, projects) == [
        ("importlib.import_module", "eval.cli"), ("importlib.import_module", None), ("__import__", "r2a"),
        ("importlib.util.find_spec", "r2a.vla")]


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
    floors = list(ALLOWED)[3:]  # from graph_builder up, one package per floor
    assert all(ALLOWED[lower] | {lower} <= ALLOWED[upper] for lower, upper in zip(floors, floors[1:])), \
        "from graph_builder up, each floor may import what the floor below it may, and that floor"


def test_the_configs_package_is_data_only():  # configs/ installs as r2a_configs so the wheel carries the YAMLs
    assert [p.name for p in (ROOT / "configs").rglob("*.py")] == ["__init__.py"]
