"""``r2a bench publish DIR``: a finished results directory in the form docs/results/ stores it — compact, and nothing
lost that the directory held.

- **Records**: ``results.jsonl`` becomes ``results.jsonl.gz``, the same lines gzipped (level 9, no name or time in the
  header: the same records give the same bytes). Every reader opens either (:func:`eval.schema.results_file`,
  :func:`eval.report.load_records`); a run being written keeps appending to ``results.jsonl``, and never resumes a
  published directory.
- **Frame strips**: WebP (:func:`eval.frames.encode_strip`) in ``DIR/frames/``, named by their job
  (:func:`strip_name`), and the record's ``frames`` names the published file — a reference is rewritten, never
  guessed by a reader. Every strip inside DIR is kept (a PNG is converted, then removed). Of the strips outside it (a
  merge's records name their runs' strips, ``../../../runs/...``) those ``frames`` selects are copied in:
  ``changed`` (default) — both sides of the pairs whose outcome differs, what ``r2a bench view`` shows; ``all``;
  ``none``. A strip not copied keeps its record's path (its run still holds it).
- **Summary**: ``summary.json`` without what the records and ``run.json`` already hold (:data:`DROPPED`), written
  without indentation, with a ``published`` block (:data:`PUBLISHED_FORMAT`) saying what was left out. Its readers —
  ``r2a bench view`` and ``choose``, ``scripts/readme_row.py`` — need none of it; ``r2a bench report DIR`` rebuilds
  the full summary (and report.md) from the records.

Publishing a published directory again changes nothing; one interrupted midway (both records files present) is
finished by publishing it again, from ``results.jsonl``. The viewer is not published: ``make viewers`` rebuilds
``DIR/viewer/`` (git-ignored) from what is.
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.report.records import dedupe_records, job_key, load_records, read_records_text
from eval.schema import RESULTS, RESULTS_GZ, SUMMARY, SUMMARY_SCHEMA, SUMMARY_SCHEMA_VERSION, results_file
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_write, write_text_atomic

log = logging.getLogger(__name__)

#: the ``published`` block of a published ``summary.json``
PUBLISHED_FORMAT, PUBLISHED_FORMAT_VERSION = "r2a.bench.published", 1
#: the published strips' folder in DIR (a run's own strips are there already)
STRIPS = "frames"
#: summary fields a published summary leaves out, each held elsewhere: ``failure_frames`` lists every failed
#: episode's strip, steps and error beside its clean twin's strip and outcome — fields of the records;
#: ``config.expected_jobs`` is every planned job key, which run.json's config and policies give (``plan_jobs``;
#: the summary's ``integrity`` table keeps their count and the missing ones)
DROPPED = ("failure_frames", "config.expected_jobs")
#: which strips from outside DIR are copied in (the choices of ``r2a bench view --frames``)
FRAME_CHOICES = ("changed", "all", "none")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Publication:
    """What publishing a directory writes and removes (:func:`plan_publication`), before anything is touched."""

    run_dir: Path
    records_gz: bytes
    summary_text: str
    #: relative path → bytes of each strip to write (converted or copied in)
    strips: dict[str, bytes] = field(default_factory=dict)
    #: files publishing replaces: results.jsonl, PNG strips inside DIR now written as WebP
    remove: list[Path] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def size_before(self) -> int:
        return sum(f.stat().st_size for f in _files(self.run_dir))

    def size_after(self, without: Path | None = None) -> int:
        """Bytes of DIR once published (and the folder ``without`` inside it removed)."""
        replaced = {p.resolve() for p in (self.run_dir / RESULTS_GZ, self.run_dir / SUMMARY, *self.remove,
                                          *(self.run_dir / name for name in self.strips))}
        gone = without.resolve() if without is not None else None
        kept = sum(f.stat().st_size for f in _files(self.run_dir)
                   if f.resolve() not in replaced and (gone is None or gone not in f.resolve().parents))
        return kept + len(self.records_gz) + len(self.summary_text.encode()) + sum(map(len, self.strips.values()))


def publish_run(run_dir: str | Path, frames: str = "changed",
                sources: Mapping[tuple, str | Path] | None = None) -> dict[str, Any]:
    """Publish ``run_dir`` in place (see the module docstring) and return what was done: the counts of
    :func:`plan_publication` and the sizes before and after."""
    publication = plan_publication(run_dir, frames, sources)
    before = publication.size_before()
    apply_publication(publication)
    after = sum(f.stat().st_size for f in _files(publication.run_dir))
    log.info("%s: published (%.2f MB → %.2f MB; %s)", run_dir, before / 1e6, after / 1e6,
             ", ".join(f"{n} {what}" for what, n in publication.counts.items()))
    return {"dir": str(run_dir), **publication.counts, "bytes_before": before, "bytes_after": after}


def plan_publication(run_dir: str | Path, frames: str = "changed",
                     sources: Mapping[tuple, str | Path] | None = None) -> Publication:
    """Everything publishing ``run_dir`` would write, computed and encoded in memory; nothing is changed.

    ``sources`` (job key → file) names strips found elsewhere for records whose ``frames`` path does not resolve —
    the strips an earlier viewer copied (scripts/compact_results.py); each is published whatever ``frames`` says.
    """
    run_dir = Path(run_dir)
    if frames not in FRAME_CHOICES:
        raise R2AInputError(f"--frames {frames}: expected one of {', '.join(FRAME_CHOICES)}")
    plain = run_dir / RESULTS
    records_path = plain if plain.is_file() else results_file(run_dir)  # results.jsonl wins: the source of truth
    lines = read_records_text(records_path).splitlines()
    records = load_records(records_path, dedupe=False)
    if len(records) != sum(bool(line.strip()) for line in lines):
        raise R2AInputError(f"{records_path}: its last line is cut short (a run killed mid-write?); resume the run "
                            "(or delete that line) before publishing it")
    summary = _read_summary(run_dir, dedupe_records(records)[0])
    strips = _StripPlan(run_dir, _selected(frames, records, summary), sources or {})
    published: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        rec = json.loads(line)
        path = rec.get("frames")
        target = strips.publish(rec) if isinstance(path, str) and path else None
        published.append(line if target is None or target == path else json.dumps({**rec, "frames": target}))
    if strips.counts["strips_missing"]:
        log.info("%s: %d strips its records name are not on this machine (a merge's runs keep them); those records "
                 "keep their paths", run_dir, strips.counts["strips_missing"])
    text = "".join(line + "\n" for line in published)
    new_records = dedupe_records(json.loads(line) for line in published)[0]
    slim = published_summary(summary, new_records, frames)
    remove = [plain] if records_path == plain else []
    return Publication(run_dir, gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0),
                       json.dumps(slim, separators=(",", ":")) + "\n", strips.write,
                       remove + strips.replaced, strips.counts)


def apply_publication(publication: Publication) -> None:
    """Write what :func:`plan_publication` planned, each file atomically, then remove what it replaces: strips
    first, the records next (then the summary), the old files last — so an interruption leaves nothing a rerun
    cannot finish."""
    run_dir = publication.run_dir
    for name, data in sorted(publication.strips.items()):
        with atomic_write(run_dir / name, "wb") as sink:
            sink.write(data)
    with atomic_write(run_dir / RESULTS_GZ, "wb") as sink:
        sink.write(publication.records_gz)
    write_text_atomic(run_dir / SUMMARY, publication.summary_text)
    for path in publication.remove:
        path.unlink(missing_ok=True)
    folders = sorted((p for p in (run_dir / STRIPS).rglob("*") if p.is_dir()), reverse=True)
    for folder in folders:  # deepest first: those the converted strips left empty
        if not any(folder.iterdir()):
            folder.rmdir()


def published_summary(summary: Mapping[str, Any], records: Iterable[Mapping[str, Any]],
                      frames: str = "changed") -> dict[str, Any]:
    """``summary`` without :data:`DROPPED`, with its ``published`` block, and — where it says which records it was
    built from — that digest taken again over ``records``, the published ones (only their strip paths differ)."""
    from eval.runner import records_digest

    slim = copy.deepcopy(dict(summary))
    dropped = set((slim.get("published") or {}).get("dropped") or [])
    if slim.pop("failure_frames", None) is not None:
        dropped.add("failure_frames")
    config = slim.get("config")
    if isinstance(config, dict) and config.pop("expected_jobs", None) is not None:
        dropped.add("config.expected_jobs")
    if isinstance(slim.get("built_from"), Mapping):
        slim["built_from"] = records_digest(records)
    slim["published"] = {"format": PUBLISHED_FORMAT, "format_version": PUBLISHED_FORMAT_VERSION,
                         "dropped": sorted(dropped), "frames": frames,
                         "rebuild": "r2a bench report DIR (the full summary and report.md, from the records)"}
    return slim


def strip_name(rec: Mapping[str, Any], suffix: str) -> str:
    """The published path of a record's strip: ``frames/`` + its job's name as the runner names it
    (:meth:`eval.episode_job.Job.slug`), characters outside ``A-Za-z0-9._-`` made ``_`` (``?``, ``&`` and ``=`` of
    a policy's query string would not check out on Windows nor load as a URL), a task's ``/`` kept as a folder."""
    from eval.episode_job import Job

    policy, task, factor, level, episode = job_key(rec)
    slug = Job(task, episode, factor, level, policy).slug()
    return "/".join([STRIPS, *(_UNSAFE.sub("_", part) for part in slug.split("/"))]) + suffix


class _StripPlan:
    """Where each record's strip comes from and goes, and the bytes to write there."""

    def __init__(self, run_dir: Path, selected: set[tuple], sources: Mapping[tuple, str | Path]) -> None:
        self.run_dir, self.root, self.selected, self.sources = run_dir, run_dir.resolve(), selected, sources
        self.write: dict[str, bytes] = {}
        self.replaced: list[Path] = []
        self.owner: dict[str, tuple] = {}
        self.counts = {"records": 0, "strips_kept": 0, "strips_converted": 0, "strips_copied_in": 0,
                       "strips_left_outside": 0, "strips_missing": 0}

    def publish(self, rec: Mapping[str, Any]) -> str | None:
        """The published path of ``rec``'s strip, or None where its path stays as it is."""
        self.counts["records"] += 1
        key, path = job_key(rec), str(rec["frames"])
        source = self.run_dir / path
        inside = source.is_file() and self.root in source.resolve().parents
        if not source.is_file():
            source = Path(self.sources[key]) if key in self.sources else None
            inside = source is not None
        if source is None:  # an earlier publish of this job's strip (e.g. before the directory was merged again)
            found = [self.run_dir / strip_name(rec, s) for s in (".webp", ".png")]
            source = next((p for p in found if p.is_file()), None)
            inside = source is not None
        if source is None:  # a merge's: its run keeps it, on the machine that ran it
            self.counts["strips_missing"] += 1
            return None
        if not inside and key not in self.selected:
            self.counts["strips_left_outside"] += 1
            return None
        data, suffix = _strip_bytes(source)
        target = strip_name(rec, suffix)
        if self.owner.setdefault(target, key) != key:
            raise R2AInputError(f"{self.run_dir}: the strips of {self.owner[target]} and {key} would both be {target} "
                                "(policy names that differ only in characters a file name cannot hold); rename one")
        here = (self.run_dir / target).resolve() == source.resolve()
        if not here:
            self.write[target] = data
            if inside and self.root in source.resolve().parents and source.resolve() not in self.replaced:
                self.replaced.append(source.resolve())
        kind = "strips_kept" if here else "strips_copied_in" if not inside or key in self.sources else \
            "strips_converted"
        self.counts[kind] += 1
        return target


def _strip_bytes(source: Path) -> tuple[bytes, str]:
    """A strip file as published: WebP as it is, another image encoded by :func:`eval.frames.encode_strip`."""
    import numpy as np
    from PIL import Image

    from eval.frames import encode_strip, webp_available

    if source.suffix.lower() == ".webp" or not webp_available():
        return source.read_bytes(), source.suffix.lower()
    try:
        with Image.open(source) as image:
            pixels = np.asarray(image.convert("RGBA"))
    except OSError as exc:
        raise R2AInputError(f"{source}: not a readable image ({exc}); a frame strip cannot be published from it") \
            from exc
    return encode_strip(pixels)


def _selected(frames: str, records: list[dict[str, Any]], summary: Mapping[str, Any]) -> set[tuple]:
    """The jobs whose strips from outside DIR are copied in: ``changed`` — both sides of every pair the viewer shows
    whose outcome differs (:func:`eval.view.view_pairs`) — every job (``all``) or none."""
    if frames == "none":
        return set()
    if frames == "all":
        return {job_key(rec) for rec in records}
    from eval.view import CHANGED, view_pairs

    unique = dedupe_records(records)[0]
    return {(pair[side], pair["task"], pair["factor"], pair["level"], pair["episode"])
            for pair in view_pairs(unique, summary) if pair["outcome"] in CHANGED
            for side in ("baseline", "candidate")}


def _read_summary(run_dir: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """DIR's summary, refused where it does not describe ``records`` (by its digest, else its count of jobs)."""
    from eval.runner import records_digest

    path = run_dir / SUMMARY
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise R2AInputError(f"{path}: no such file; 'r2a bench report {run_dir}' writes it, then publish") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise R2AInputError(f"{path}: cannot read it as JSON ({exc}); 'r2a bench report {run_dir}' rebuilds it") \
            from exc
    found = (summary.get("schema"), summary.get("schema_version")) if isinstance(summary, dict) else None
    if found != (SUMMARY_SCHEMA, SUMMARY_SCHEMA_VERSION):
        raise R2AInputError(f"{path}: expected {SUMMARY_SCHEMA} v{SUMMARY_SCHEMA_VERSION}, found {found}; "
                            f"'r2a bench report {run_dir}' rebuilds it")
    built, jobs = summary.get("built_from"), (summary.get("integrity") or {}).get("jobs")
    if isinstance(built, Mapping) and built.get("sha256"):
        stale = built["sha256"] != records_digest(records)["sha256"]
    else:
        stale = isinstance(jobs, int) and jobs != len(records)
    if stale:
        raise R2AInputError(f"{path}: built from other records than the directory holds; 'r2a bench report "
                            f"{run_dir}' first, then publish")
    return summary


def _files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file())


__all__ = ["DROPPED", "FRAME_CHOICES", "PUBLISHED_FORMAT", "PUBLISHED_FORMAT_VERSION", "STRIPS", "Publication",
           "apply_publication", "plan_publication", "publish_run", "published_summary", "strip_name"]
