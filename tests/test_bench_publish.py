"""``r2a bench publish``: a results directory in its published form (eval/publish.py) — gzipped records that every
reader opens, WebP strips the records name, a slim summary — with nothing lost, on the synthetic run of
tests/test_bench_view.py (its strips written by the benchmark's own writers)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from PIL import Image

from eval.export import export_run
from eval.frames import webp_available
from eval.merge import merge_runs
from eval.publish import DROPPED, STRIPS, plan_publication, publish_run, strip_name
from eval.report import load_records
from eval.runner import report_from_dir, summary_from_dir
from eval.schema import RESULTS, RESULTS_GZ, SUMMARY, results_file
from eval.view import read_run, view_pairs, write_view
from r2a_cli.main import main
from r2a_core.errors import R2AInputError
from tests.test_bench_view import make_run

needs_webp = pytest.mark.skipif(not webp_available(), reason="this Pillow has no WebP encoder")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """The synthetic run as the runner leaves it (PNG strips in run/frames/, results.jsonl); copy before changing."""
    return make_run(tmp_path_factory.mktemp("publish") / "run")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _without_frames(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in rec.items() if k != "frames"} for rec in records]


def test_every_reader_opens_gzipped_records_and_a_directory_holds_one_form(pristine, tmp_path):
    run = _copy(pristine, tmp_path / "run")
    plain = load_records(run / RESULTS)
    (run / RESULTS_GZ).write_bytes(gzip.compress((run / RESULTS).read_bytes()))
    assert load_records(run / RESULTS_GZ) == plain and load_records(run / RESULTS_GZ, dedupe=False)
    with pytest.raises(R2AInputError, match=f"holds both {RESULTS} and {RESULTS_GZ}.*r2a bench publish"):
        results_file(run)
    (run / RESULTS).unlink()
    assert results_file(run) == run / RESULTS_GZ
    records, summary = read_run(run)                                   # r2a bench view, choose
    assert records == plain and summary["policies"]
    assert export_run(run, json_path=tmp_path / "export.json")["episodes"] == len(plain)
    assert summary_from_dir(run)["integrity"]["jobs"] == len(plain)   # r2a bench report's summary
    assert main(["bench", "compare", str(run), str(pristine), "--policy-a", "builtin", "--policy-b", "builtin"]) == 0
    (run / RESULTS_GZ).write_bytes(gzip.compress((pristine / RESULTS).read_bytes())[:200])
    with pytest.raises(R2AInputError, match=f"{RESULTS_GZ}: not a complete gzip file"):
        load_records(run / RESULTS_GZ)
    (run / RESULTS_GZ).unlink()
    with pytest.raises(R2AInputError, match=f"{run / RESULTS}: no such file \\(nor {RESULTS_GZ}"):
        results_file(run)


@needs_webp
def test_a_run_published_in_place_loses_nothing(pristine, tmp_path, capsys):
    run = _copy(pristine, tmp_path / "run")
    before_records, before_summary = read_run(pristine)
    before_lines = load_records(pristine / RESULTS, dedupe=False)
    before_view = write_view(pristine, tmp_path / "view_before")
    assert main(["bench", "publish", str(run)]) == 0
    done = json.loads(capsys.readouterr().out)
    saved = [r for r in before_lines if r.get("frames")]
    assert done["strips_converted"] == len(saved) and done["bytes_after"] < done["bytes_before"]

    assert not (run / RESULTS).exists() and (run / RESULTS_GZ).is_file()
    assert (run / RESULTS_GZ).read_bytes()[4:8] == b"\0\0\0\0"      # no time in the gzip header: same bytes each time
    lines = load_records(run / RESULTS_GZ, dedupe=False)
    assert _without_frames(lines) == _without_frames(before_lines)     # the records, but for where their strips are
    for old, new in zip(before_lines, lines):
        if old.get("frames"):
            assert new["frames"] == strip_name(new, ".webp") == old["frames"].removesuffix(".png") + ".webp"
            with Image.open(run / new["frames"]) as strip, Image.open(pristine / old["frames"]) as png:
                assert strip.format == "WEBP" and strip.size == png.size
    assert not list((run / STRIPS).rglob("*.png"))                      # no PNG strip stays; the report's figures do
    figures = {p.name: p.read_bytes() for p in pristine.glob("*.png")}
    assert figures and {p.name: p.read_bytes() for p in run.glob("*.png")} == figures

    summary = json.loads((run / SUMMARY).read_text())
    assert "failure_frames" not in summary and "expected_jobs" not in summary["config"]
    assert summary["published"]["dropped"] == sorted(DROPPED) and summary["published"]["format_version"] == 1
    assert {k: v for k, v in summary.items() if k not in ("published", "built_from", "config")} == {
        k: v for k, v in before_summary.items() if k not in ("failure_frames", "built_from", "config")}
    assert summary["built_from"]["records"] == before_summary["built_from"]["records"]
    assert (run / SUMMARY).read_text().count("\n") == 1               # no indentation
    records, _ = read_run(run)
    assert _without_frames(records) == _without_frames(before_records)

    after_view = write_view(run, tmp_path / "view_after")              # the viewer rebuilt from the published form
    assert (after_view["pairs"], after_view["frames_copied"]) == (before_view["pairs"], before_view["frames_copied"])
    assert sorted(p.suffix for p in (tmp_path / "view_after" / "frames").iterdir()) == [".webp"] * after_view[
        "frames_copied"]
    full = report_from_dir(run)                                        # the full summary and report, from the records
    assert full["failure_frames"] and all(r["frames"].endswith(".webp") for r in full["failure_frames"])
    assert "](frames/" in (run / "report.md").read_text()             # a published strip embeds in the report


@needs_webp
def test_publishing_again_changes_nothing_and_finishes_an_interrupted_publish(pristine, tmp_path):
    run = _copy(pristine, tmp_path / "run")
    publish_run(run)
    once = _files(run)
    again = publish_run(run)
    assert _files(run) == once and again["strips_kept"] == again["records"] and not again["strips_converted"]
    interrupted = _copy(pristine, tmp_path / "interrupted")            # stopped after the records, before the rest
    publication = plan_publication(interrupted)
    (interrupted / RESULTS_GZ).write_bytes(publication.records_gz)
    with pytest.raises(R2AInputError, match="holds both"):
        read_run(interrupted)
    publish_run(interrupted)
    assert _files(interrupted) == once


@needs_webp
def test_a_merged_run_gets_the_strips_its_viewer_shows_and_keeps_the_paths_of_the_rest(pristine, tmp_path):
    """A merge's records name the strips of its runs (``../run/frames/...``): ``changed`` copies in those of the pairs
    whose outcome differs, ``all`` every one; the runs' own files are never touched."""
    source = _copy(pristine, tmp_path / "runs" / "both")
    merged = tmp_path / "docs" / "results" / "both"
    merged.mkdir(parents=True)
    shutil.copy(source / "run.json", merged / "run.json")
    records = [json.loads(line) for line in (source / RESULTS).read_text().splitlines()]
    for rec in records:
        if rec.get("frames"):
            rec["frames"] = os.path.relpath(source / rec["frames"], merged)
    (merged / RESULTS).write_text("".join(json.dumps(rec) + "\n" for rec in records))
    report_from_dir(merged)
    untouched = _files(source)
    summary = json.loads((source / SUMMARY).read_text())
    changed = {(p[side], p["task"], p["factor"], p["level"], p["episode"]) for p in view_pairs(records, summary)
               if p["outcome"] in ("S->F", "F->S") for side in ("baseline", "candidate")}
    expected = sum(bool(r.get("frames")) and (r["policy"], r["task"], r["factor"], r["level"], r["episode"]) in changed
                   for r in records)
    all_copy = _copy(merged, tmp_path / "docs" / "results" / "all")

    done = publish_run(merged)
    assert done["strips_copied_in"] == expected > 0
    assert done["strips_left_outside"] == sum(bool(r.get("frames")) for r in records) - expected
    published = load_records(merged / RESULTS_GZ, dedupe=False)
    inside = [r["frames"] for r in published if r.get("frames", "").startswith(STRIPS + "/")]
    assert len(inside) == expected and all((merged / path).is_file() for path in inside)
    assert all((merged / r["frames"]).resolve().is_file() for r in published if r.get("frames"))
    assert _files(source) == untouched
    assert publish_run(all_copy, frames="all")["strips_copied_in"] == sum(bool(r.get("frames")) for r in records)


def test_strip_names_check_out_everywhere():
    rec = {"policy": "r2a:runs/fit/act/r2a.yaml?gate.max_gate=0&gate.rotation=0", "task": "libero_object/3",
           "factor": "liberoplus:camera", "level": 2, "episode": 12}
    assert strip_name(rec, ".webp") == ("frames/r2a-runs_fit_act_r2a.yaml_gate.max_gate_0_gate.rotation_0__"
                                        "libero_object/3__liberoplus_camera2__12.webp")


def test_a_stale_summary_or_a_torn_record_is_refused(pristine, tmp_path):
    stale = _copy(pristine, tmp_path / "stale")
    with open(stale / RESULTS, "a") as sink:
        sink.write((stale / RESULTS).read_text().splitlines()[0] + "\n")  # one job recorded again since the report
    summary = json.loads((stale / SUMMARY).read_text())
    summary["built_from"]["sha256"] = "0" * 64
    (stale / SUMMARY).write_text(json.dumps(summary))
    with pytest.raises(R2AInputError, match="built from other records.*r2a bench report"):
        publish_run(stale)
    torn = _copy(pristine, tmp_path / "torn")
    with open(torn / RESULTS, "a") as sink:
        sink.write('{"schema": "r2a.bench.epi')
    with pytest.raises(R2AInputError, match="cut short"):
        publish_run(torn)
    assert (torn / RESULTS).is_file() and not (torn / RESULTS_GZ).exists()


def test_a_published_directory_is_never_resumed_and_a_merge_replaces_its_records(pristine, tmp_path):
    from eval.bench_config import BenchConfig
    from eval.runner import run_benchmark
    from tests.test_bench_merge import _run_dir

    run = _copy(pristine, tmp_path / "run")
    publish_run(run, frames="none")
    config = BenchConfig.from_dict(json.loads((run / "run.json").read_text())["config"])
    with pytest.raises(R2AInputError, match="a published results directory.*never resumes"):
        run_benchmark(config, ["builtin"], run, progress=False)
    assert not (run / RESULTS).exists()
    base = _run_dir(tmp_path / "base", "base", [False, False, True, True])
    r2a = _run_dir(tmp_path / "r2a", "r2a", [True, True, True, False])
    both = tmp_path / "both"
    merge_runs(both, [base, r2a])
    publish_run(both)
    merge_runs(both, [base, r2a])                                      # the merge redone: its records replace these
    assert (both / RESULTS).is_file() and not (both / RESULTS_GZ).exists()
    assert results_file(both) == both / RESULTS
