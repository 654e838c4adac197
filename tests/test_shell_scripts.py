"""The shell scripts in scripts/ and experiments/ parse (``bash -n``): most of them run for hours, and a syntax error
found after the first hour's step costs that hour. The probes in experiments/ at least start (``--help``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for folder in ("scripts", "experiments") for p in (ROOT / folder).rglob("*.sh"))
#: the probes behind docs/experiments/ (experiments/README.md)
PROBES = sorted((ROOT / "experiments").glob("*.py"))


def test_there_are_scripts_to_check():
    assert len(SCRIPTS) >= 5


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_parses(script: Path):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_experiments_readme_names_every_probe_and_the_page_it_fed():
    readme = (ROOT / "experiments" / "README.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in readme.splitlines() if line.startswith("| `")}
    assert sorted(rows) == [p.name for p in PROBES + sorted((ROOT / "experiments").glob("*.sh"))]
    for name, row in rows.items():
        pages = re.findall(r"\(\.\./(docs/experiments/[\w.]+\.md)\)", row)
        assert pages and all((ROOT / page).is_file() for page in pages), f"{name}: no page of docs/experiments/"


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.name)
def test_a_probe_starts_from_its_folder(probe: Path):
    """``--help`` from the repository root: its imports resolve from experiments/, and it runs nothing."""
    proc = subprocess.run([sys.executable, str(probe.relative_to(ROOT)), "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
