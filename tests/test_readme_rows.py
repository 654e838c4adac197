"""The README's table of bases is what scripts/readme_row.py prints from the published runs' summaries: a number in
the table that no run in docs/results/ gives fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "readme_row.py"
#: each row's first cell → the script's arguments that rebuild it (rows from runs not in docs/results are left out)
ROWS = {
    "`builtin` → `r2a-noharm` (standard, 840; clean 200)":
        ["docs/results/noharm/standard", "--clean-run", "docs/results/noharm/clean"],
    "`builtin-libero` → `r2a-libero` (libero_standard, 840; clean 40)": ["docs/results/libero"],
    "`builtin-libero` → `r2a-libero` (LIBERO-Plus, 200; clean 53)":
        ["docs/results/noharm/liberoplus", "--candidate", "r2a-libero"],
    "`builtin-libero-strong` → `r2a-libero-strong-noharm` (clean, 400)":
        ["docs/results/libero_strong_clean", "--candidate", "r2a-libero-strong-noharm"],
    "`builtin-libero-strong` → `r2a-libero-strong-noharm` (libero_standard, 840; clean 40)":
        ["docs/results/libero_strong"],
    "`builtin-libero-strong` → `r2a-libero-strong-noharm` (libero_object_standard, 840; clean 40)":
        ["docs/results/libero_strong_object"],
    "`builtin-libero-strong` → `r2a-libero-strong-noharm` (LIBERO-Plus, 200; clean 53)":
        ["docs/results/liberoplus_strong"],
    "`builtin-libero-strong` → `r2a-libero-strong` (clean, 400)":
        ["docs/results/libero_strong_clean", "--candidate", "r2a-libero-strong"],
}


def readme_rows() -> dict[str, str]:
    """The README table's rows by first cell, footnote marks (¹ ² ³) removed."""
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("| `"):
            line = re.sub(r" [¹²³⁴⁵]", "", line)
            rows[line.split(" | ")[0][2:]] = line
    return rows


@pytest.mark.parametrize("label", sorted(ROWS))
def test_a_readme_row_is_what_its_run_gives(label):
    rows = readme_rows()
    assert label in rows, f"README.md has no row '{label}' (rows: {sorted(rows)})"
    done = subprocess.run([sys.executable, str(SCRIPT), *ROWS[label], "--label", label], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == rows[label]


def test_the_script_names_the_candidates_when_a_run_has_several(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "docs/results/noharm/liberoplus", "--label", "x"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode != 0 and "r2a-libero, r2a-libero-noharm" in done.stderr
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--label", "x"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode != 0 and "summary.json" in done.stderr
