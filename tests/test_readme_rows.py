"""The README's table of bases is what scripts/readme_row.py prints from the published runs' summaries: a number in
the table that its run in docs/results/ does not give, or a row with no run named here, fails."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "readme_row.py"
#: the variant the screen chose around the LeRobot ACT (docs/results/act_screen, scripts/lerobot/act_results.sh)
ACT_NOBLEND = "r2a:runs/fit/act/r2a.yaml?gate.max_gate=0&gate.translation=0&gate.rotation=0"
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
    "ACT (LeRobot) → R2A without the blend (clean, 400)": ["docs/results/act_clean", "--candidate", ACT_NOBLEND],
    "ACT (LeRobot) → R2A without the blend (libero_standard, 840; clean 40)":
        ["docs/results/act_libero_standard", "--candidate", ACT_NOBLEND],
    "ACT (LeRobot) → R2A without the blend (libero_object_standard, 840; clean 40)":
        ["docs/results/act_libero_object", "--candidate", ACT_NOBLEND],
    "ACT (LeRobot) → R2A without the blend (LIBERO-Plus, 200; clean 53)":
        ["docs/results/act_liberoplus", "--candidate", ACT_NOBLEND],
}


#: rows of the table from no single published run (their source is said in the README beside them)
NOT_FROM_A_RUN = {"the R2A page's bases on LIBERO-Plus: GR00T N1.7, StableVLA, π0.5"}


def readme_rows() -> dict[str, str]:
    """The README table's rows by first cell, footnote marks (¹ ² ³) removed."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("| base → R2A (run, pairs) | clean | all shifts | camera | robot_init | language | light | "
                        "background | noise | layout | recovery |") + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        line = re.sub(r" [¹²³⁴⁵]", "", line)
        rows[line.split(" | ")[0][2:]] = line
    return rows


def test_every_row_of_the_table_of_bases_comes_from_a_run():
    unchecked = set(readme_rows()) - set(ROWS) - NOT_FROM_A_RUN
    assert not unchecked, f"README rows with no run to check them against (add them to ROWS): {sorted(unchecked)}"


@pytest.mark.parametrize("label", sorted(ROWS))
def test_a_readme_row_is_what_its_run_gives(label):
    rows = readme_rows()
    assert label in rows, f"README.md has no row '{label}' (rows: {sorted(rows)})"
    done = subprocess.run([sys.executable, str(SCRIPT), *ROWS[label], "--label", label], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == rows[label]


def test_the_script_names_the_candidates_when_a_run_has_several(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "docs/results/noharm/liberoplus", "--label", "x"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode != 0 and "r2a-libero, r2a-libero-noharm" in done.stderr
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--label", "x"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode != 0 and "summary.json" in done.stderr


def test_the_rounding_by_hand_worked_values():
    """The script's rounding, independent of any run: halves away from zero, a real minus, three decimals with a
    shared trailing zero dropped, bold only where the interval excludes zero."""
    import runpy

    script = runpy.run_path(str(SCRIPT))
    points, rates, bold_if = script["points"], script["rates"], script["bold_if"]
    assert [points(v) for v in (-0.0125, 0.0125, 0.0, 0.17142857, -0.108)] == ["−1.3", "+1.3", "+0.0", "+17.1",
                                                                                 "−10.8"]
    assert [rates(*pair) for pair in ((0.568, 0.67), (0.85, 0.85), (0.475, 0.625), (0.8775, 0.8375))] == [
        "0.568 → 0.670", "0.85 → 0.85", "0.475 → 0.625", "0.878 → 0.838"]
    assert [bold_if("x", ci) for ci in ((0.01, 0.2), (-0.2, -0.01), (0.0, 0.2), (-0.1, 0.1), (None, 0.2))] == [
        "**x**", "**x**", "x", "x", "x"]
