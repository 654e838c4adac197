"""Dependencies point one way (README, "Architecture"); this test reads every import, lazy ones included."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: unit → units it may import (besides itself)
ALLOWED = {
    "r2a_core": set(),
    "eval.envs": {"r2a_core"},
    "demos": {"r2a_core", "eval.envs"},
    "graph_builder": {"r2a_core", "demos"},
    "r2a": {"r2a_core", "demos", "graph_builder"},
    "gating": {"r2a_core", "demos", "graph_builder", "r2a"},
    "eval": {"r2a_core", "eval.envs", "demos", "graph_builder", "r2a", "gating"},
}


def _unit(module: str) -> str | None:
    top = module.split(".")[0]
    if module == "eval.envs" or module.startswith("eval.envs."):
        return "eval.envs"
    return top if top in ALLOWED else None


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_no_package_imports_against_the_arrows():
    violations = []
    for unit, allowed in ALLOWED.items():
        folder = ROOT / unit.replace(".", "/")
        for path in folder.rglob("*.py"):
            if unit == "eval" and "envs" in path.relative_to(folder).parts:
                continue
            if path.relative_to(ROOT).as_posix() == "r2a/cli.py":
                continue  # the command reaches every group, lazily by module name
            for module in _imports(path):
                target = _unit(module)
                if target is not None and target != unit and target not in allowed:
                    violations.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not violations, "\n".join(violations)
