"""Convert the published runs under docs/results/ in place into the form ``r2a bench publish`` writes (eval/publish.py):
records gzipped, frame strips as WebP named from their records, the summary without what the records hold, and no
committed viewer (``make viewers`` rebuilds each one, git-ignored) — then check that nothing was lost.

    .venv/bin/python scripts/compact_results.py --dry-run          # per run directory: MB now → MB once converted
    .venv/bin/python scripts/compact_results.py                    # convert, check, print the same table
    .venv/bin/python scripts/compact_results.py --root /tmp/results_copy

A run directory is a folder holding run.json. The records of a merged run name strips in the run directories it was
merged from (``../../../runs/...``), which a checkout does not hold; the strips its committed viewer copied
(``viewer/frames/``, named in ``viewer/index.html``) are the only copies here, and each is published under its
record. Idempotent: a directory already published is only checked again.

The checks, per directory: the records read back line for line as before, equal but for ``frames`` paths, each of
which names a published strip that decodes, and every strip the old viewer had is published; the summary reads as
``r2a bench view`` and ``choose`` read it and holds everything it held but ``eval.publish.DROPPED`` (what
scripts/readme_row.py reads included); the summary rebuilt from the published records (``r2a bench report``'s, in
memory) equals the published one in every field it holds — but ``versions``, the packages that built it — so the
published summary is what its records give, and where it predates ``built_from`` it gets it (the digest ``r2a bench
choose`` compares; eval/runner.py: records_digest); the viewer rebuilt from the published directory shows the same
pairs, with a strip on every side that had one. A failed check stops with exit status 1, naming the directory and
the check.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from eval.publish import DROPPED, STRIPS, apply_publication, plan_publication
from eval.report import load_records
from eval.schema import RESULTS, RESULTS_GZ, SUMMARY, results_file
from r2a_core.files import to_json_safe, write_text_atomic

ROOT = Path(__file__).resolve().parents[1] / "docs" / "results"
VIEWER = "viewer"
_DATA = re.compile(r'<script type="application/json" id="view-data">(.*?)</script>', re.S)


class CheckFailed(Exception):
    pass


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json") if VIEWER not in p.relative_to(root).parts)


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def old_viewer(run_dir: Path) -> dict[str, Any] | None:
    """The data a committed viewer inlined (eval/view.py), or None."""
    index = run_dir / VIEWER / "index.html"
    if not index.is_file():
        return None
    found = _DATA.search(index.read_text(encoding="utf-8"))
    if not found:
        raise CheckFailed(f"{index}: no inlined data; not a page of 'r2a bench view'")
    return json.loads(found.group(1))


def _sides(data: dict[str, Any]):
    """(job key, side) of every side of every pair of a viewer's data."""
    for pair in data["pairs"]:
        for side in (pair["a"], pair["b"]):
            yield (side["policy"], pair["task"], pair["factor"], pair["level"], pair["episode"]), side


def viewer_strips(run_dir: Path, data: dict[str, Any] | None) -> dict[tuple, Path]:
    """Job key → the strip the viewer copied for it."""
    strips = {key: run_dir / VIEWER / side["frames"] for key, side in _sides(data or {"pairs": []}) if side["frames"]}
    missing = sorted(str(p) for p in strips.values() if not p.is_file())
    if missing:
        raise CheckFailed(f"{run_dir}: its viewer names strips it does not hold: {missing[:3]}")
    return strips


def published(run_dir: Path) -> bool:
    return (run_dir / RESULTS_GZ).is_file() and not (run_dir / RESULTS).exists() and not (run_dir / VIEWER).exists()


def convert(run_dir: Path, dry_run: bool) -> tuple[int, int, str]:
    """Convert one run directory (unless ``dry_run``) and check it; its size before and after, and a note."""
    before = size(run_dir)
    if published(run_dir):
        check(run_dir, None, None, None)
        return before, before, "already published"
    plain = run_dir / RESULTS
    records = load_records(plain if plain.is_file() else results_file(run_dir), dedupe=False)
    summary = json.loads((run_dir / SUMMARY).read_text(encoding="utf-8"))
    data = old_viewer(run_dir)
    sources = viewer_strips(run_dir, data)
    publication = plan_publication(run_dir, sources=sources)
    after = publication.size_after(without=run_dir / VIEWER)
    counts = publication.counts
    note = (f"{len(records)} records, {len(sources)} viewer strips; strips: {counts['strips_converted']} converted, "
            f"{counts['strips_copied_in']} copied in, {counts['strips_kept']} kept, "
            f"{counts['strips_left_outside'] + counts['strips_missing']} stay with the runs that saved them")
    if dry_run:
        return before, after, note
    apply_publication(publication)
    shutil.rmtree(run_dir / VIEWER, ignore_errors=True)  # rebuilt by `make viewers`; its strips are published
    check(run_dir, records, summary, data, sources)
    return before, size(run_dir), note


def check(run_dir: Path, records: list[dict] | None, summary: dict | None, data: dict | None,
          sources: dict[tuple, Path] | None = None) -> None:
    """What the module docstring lists; ``records``, ``summary`` and ``data`` as they were before (None: only what
    a published directory must satisfy on its own)."""
    from PIL import Image

    from eval.report import job_key
    from eval.runner import summary_from_dir
    from eval.view import read_run, write_view

    if not published(run_dir):
        raise CheckFailed(f"{run_dir}: not in the published form ({RESULTS_GZ}, no {RESULTS}, no {VIEWER}/)")
    now, new_summary = read_run(run_dir)  # the reader of r2a bench view and choose (results.jsonl.gz, summary.json)
    lines = load_records(results_file(run_dir), dedupe=False)
    for i, rec in enumerate(lines):
        path = rec.get("frames")
        if isinstance(path, str) and path.startswith(STRIPS + "/"):  # else a strip its run keeps (../../../runs/)
            if not (run_dir / path).is_file():
                raise CheckFailed(f"{run_dir}: record {i + 1}'s strip {path} is not there")
            with Image.open(run_dir / path) as image:
                image.load()
    if records is not None:
        if len(lines) != len(records):
            raise CheckFailed(f"{run_dir}: {len(records)} records before, {len(lines)} after")
        for i, (old, new) in enumerate(zip(records, lines)):
            if {k: v for k, v in old.items() if k != "frames"} != {k: v for k, v in new.items() if k != "frames"}:
                raise CheckFailed(f"{run_dir}: record {i + 1} changed beyond its frames path")
    if sources:
        by_job = {job_key(rec): rec for rec in lines}
        lost = [key for key in sources if not (run_dir / str(by_job[key].get("frames"))).is_file()]
        if lost:
            raise CheckFailed(f"{run_dir}: strips of the old viewer not published: {lost[:3]}")
    if summary is not None:
        dropped = {name for name in DROPPED if "." not in name}
        for key, value in summary.items():
            if key in dropped or key == "built_from":
                continue
            if key == "config":
                value = {k: v for k, v in value.items() if k != "expected_jobs"}
            if new_summary.get(key) != value:
                raise CheckFailed(f"{run_dir}: summary field {key!r} changed")
    rebuilt = json.loads(json.dumps(to_json_safe(summary_from_dir(run_dir, [dict(r) for r in now]))))
    differ = [path for key, value in new_summary.items() if key not in ("versions", "published", "built_from")
              for path in _differences(value, rebuilt.get(key), key)]
    if differ:
        raise CheckFailed(f"{run_dir}: the summary rebuilt from the published records differs in {differ[:5]}")
    if "built_from" not in new_summary:  # vouched for now: it is what these records give
        new_summary["built_from"] = rebuilt["built_from"]
        write_text_atomic(run_dir / SUMMARY, json.dumps(new_summary, separators=(",", ":")) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        view = write_view(run_dir, Path(tmp) / VIEWER)
        if data is not None:
            _same_pairs(run_dir, data, old_viewer(Path(tmp)))
            if view["frames_copied"] != data["frames_copied"]:
                raise CheckFailed(f"{run_dir}: the viewer copied {data['frames_copied']} strips, now "
                                  f"{view['frames_copied']}")


def _differences(stored: Any, rebuilt: Any, path: str) -> list[str]:
    """Where ``stored`` (a published summary's field) is not what ``rebuilt`` holds: fields only the rebuilt one has
    (added to the summary since) are fine; numbers equal to 1e-9."""
    if isinstance(stored, dict) and isinstance(rebuilt, dict):
        return [p for key, value in stored.items()
                for p in _differences(value, rebuilt.get(key, _ABSENT), f"{path}.{key}")]
    if isinstance(stored, list) and isinstance(rebuilt, list) and len(stored) == len(rebuilt):
        return [p for i, (a, b) in enumerate(zip(stored, rebuilt)) for p in _differences(a, b, f"{path}[{i}]")]
    if isinstance(stored, float) and isinstance(rebuilt, (int, float)) and not isinstance(rebuilt, bool):
        return [] if math.isclose(stored, rebuilt, rel_tol=1e-9, abs_tol=1e-12) else [path]
    return [] if stored == rebuilt else [path]


_ABSENT = object()


def _same_pairs(run_dir: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    def plain(side: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in side.items() if k not in ("frames", "frames_note")}

    if len(old["pairs"]) != len(new["pairs"]):
        raise CheckFailed(f"{run_dir}: the viewer showed {len(old['pairs'])} pairs, now {len(new['pairs'])}")
    for (key, a), (_, b) in zip(_sides(old), _sides(new)):
        if plain(a) != plain(b) or bool(a["frames"]) != bool(b["frames"]):
            raise CheckFailed(f"{run_dir}: the viewer's side {key} differs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help=f"the published results (default: {ROOT})")
    parser.add_argument("--dry-run", action="store_true", help="print the sizes it would reach; change nothing")
    args = parser.parse_args(argv)
    dirs = run_dirs(args.root)
    if not dirs:
        print(f"{args.root}: no run directory (a folder holding run.json)", file=sys.stderr)
        return 2
    total_before = size(args.root)
    rows = []
    for run_dir in dirs:
        try:
            before, after, note = convert(run_dir, args.dry_run)
        except CheckFailed as failed:
            print(f"check failed: {failed}", file=sys.stderr)
            return 1
        rows.append((run_dir.relative_to(args.root), before, after))
        print(f"{str(run_dir.relative_to(args.root)):28s} {before / 1e6:7.2f} MB → {after / 1e6:6.2f} MB   {note}",
              flush=True)
    outside = total_before - sum(before for _, before, _ in rows)  # files beside the run directories
    total_after = outside + sum(after for _, _, after in rows)
    print(f"{'total (' + str(args.root) + ')':28s} {total_before / 1e6:7.2f} MB → {total_after / 1e6:6.2f} MB"
          + ("   (dry run: nothing changed)" if args.dry_run else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
