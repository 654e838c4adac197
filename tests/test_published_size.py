"""The published results stay light (docs/architecture.md, "Benchmark results directory"): every run directory under
docs/results/ is in the form ``r2a bench publish`` writes (eval/publish.py) — its records gzipped, no plain
``results.jsonl``, a summary that says it is published, no committed viewer — and holds at most
:data:`MAX_RUN_BYTES`; docs/results/ as a whole holds at most :data:`MAX_TOTAL_BYTES`.

A run directory is a folder holding run.json. Its viewer (``viewer/``, git-ignored: ``make viewers`` writes it from
the records, summary and strips) is not counted. Over a limit: publish the directory (``r2a bench publish DIR``;
``scripts/compact_results.py`` converts all of them), or say here why the limit should move.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from eval.publish import PUBLISHED_FORMAT
from eval.schema import RESULTS, RESULTS_GZ, SUMMARY

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "docs" / "results"
#: the most one published run directory may hold: the largest (ablations: 11 policies' uplift tables and figures)
#: holds ≈ 7.5 MB
MAX_RUN_BYTES = 8 * 2**20
#: the most docs/results/ may hold, every run directory and the files beside them
MAX_TOTAL_BYTES = 60 * 10**6
VIEWER = "viewer"

RUN_DIRS = sorted(p.parent for p in RESULTS_DIR.rglob("run.json") if VIEWER not in p.relative_to(RESULTS_DIR).parts)


def _counted(root: Path) -> list[Path]:
    """The files under ``root`` a clone holds: all but the run directories' generated viewers."""
    return [p for p in root.rglob("*") if p.is_file() and VIEWER not in p.relative_to(RESULTS_DIR).parts]


def _name(run_dir: Path) -> str:
    return str(run_dir.relative_to(RESULTS_DIR))


def test_the_published_runs_are_found():
    assert len(RUN_DIRS) >= 10, f"found only {[_name(d) for d in RUN_DIRS]} under {RESULTS_DIR}"


@pytest.mark.parametrize("run_dir", RUN_DIRS, ids=_name)
def test_a_published_run_stores_its_records_compressed(run_dir):
    assert not (run_dir / RESULTS).exists() and (run_dir / RESULTS_GZ).is_file(), (
        f"{_name(run_dir)}: expected {RESULTS_GZ} and no {RESULTS}; publish it: r2a bench publish {run_dir}")
    summary = json.loads((run_dir / SUMMARY).read_text(encoding="utf-8"))
    assert (summary.get("published") or {}).get("format") == PUBLISHED_FORMAT, (
        f"{_name(run_dir)}/{SUMMARY}: not a published summary; r2a bench publish {run_dir}")


@pytest.mark.parametrize("run_dir", RUN_DIRS, ids=_name)
def test_a_published_run_is_within_its_size(run_dir):
    size = sum(p.stat().st_size for p in _counted(run_dir))
    biggest = sorted(_counted(run_dir), key=lambda p: -p.stat().st_size)[:3]
    assert size <= MAX_RUN_BYTES, (
        f"{_name(run_dir)}: {size / 1e6:.2f} MB > {MAX_RUN_BYTES / 1e6:.2f} MB; biggest: "
        + ", ".join(f"{p.relative_to(run_dir)} {p.stat().st_size / 1e6:.2f} MB" for p in biggest))


def test_the_published_results_are_within_their_total():
    size = sum(p.stat().st_size for p in _counted(RESULTS_DIR))
    assert size <= MAX_TOTAL_BYTES, f"docs/results/: {size / 1e6:.1f} MB > {MAX_TOTAL_BYTES / 1e6:.0f} MB"


def test_no_viewer_is_committed():
    """The viewers are rebuilt by ``make viewers`` (git-ignored); a committed one would be 1.4–4 MB of derived data."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run([git, "ls-files", "--", "docs/results"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    viewers = sorted({path.split(f"/{VIEWER}/")[0] for path in tracked if f"/{VIEWER}/" in path})
    assert not viewers, f"committed viewers (make viewers rebuilds them; git rm -r --cached them): {viewers}"
