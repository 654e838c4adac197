"""``r2a bench view RUN_DIR --out DIR``: a results directory as one static HTML page that opens from disk.

The page (:mod:`eval.view_page`) shows the report's headline and uplift tables, then every episode that the base
policy and another policy both ran — the pairs of the report's headline (:func:`eval.report.shown_pairs`: the
summary's ``base_policy`` against each other policy) — filtered by task, factor, level and outcome (S→F: the
baseline succeeded and the candidate failed; F→S; both failed; both succeeded), each side by side: the frame
strip of both episodes where the run saved one (``r2a bench run --save-frames failures``), the stage timeline,
and what the wrapper did in the episode (the records' per-episode ``r2a`` and ``harmonize`` summaries).

``DIR`` gets ``index.html`` (data inlined as JSON, vanilla JS, nothing fetched) and ``frames/``, copies of the
strips of the pairs whose outcome differs (``frames="changed"``), of every pair (``"all"``) or of none. RUN_DIR
is a ``r2a bench run`` or ``r2a bench merge`` directory with its ``summary.json``.
"""

from __future__ import annotations

import html
import json
import logging
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.report import headline_md, job_key, load_records, shown_pairs, uplift_md
from eval.schema import CLEAN, SUMMARY, SUMMARY_SCHEMA, SUMMARY_SCHEMA_VERSION, results_file
from eval.stats import transitions
from eval.view_page import render_page
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_dir, to_json_safe
from r2a_core.types import OSC_POSE_DELTA

log = logging.getLogger(__name__)

#: the page's data (inlined in index.html)
VIEW_FORMAT, VIEW_FORMAT_VERSION = "r2a.bench.view", 1
INDEX, FRAMES = "index.html", "frames"
#: ``--frames`` choices: the strips of the pairs whose outcome differs, of every pair, or none
FRAME_CHOICES = ("changed", "all", "none")
#: pair outcomes, baseline → candidate (the keys of :func:`eval.stats.transitions`), in the filter's order
OUTCOMES = ("S->F", "F->S", "F->F", "S->S")
#: the outcomes whose frames ``changed`` copies
CHANGED = OUTCOMES[:2]
#: outcomes the page's filter starts with (both succeeded is one click away)
INITIAL_OUTCOMES = ("S->F", "F->S", "F->F")
#: what each side of a pair shows, as the record has it
SIDE_FIELDS = ("policy", "success", "steps", "horizon", "instruction", "stage_names", "stages",
               "first_incomplete_stage", "progress", "frame_steps", "r2a", "harmonize")


def write_view(run_dir: str | Path, out_dir: str | Path, frames: str = "changed") -> dict[str, Any]:
    """Write the viewer of ``run_dir`` into ``out_dir`` (replacing an earlier viewer there); return what it holds."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if frames not in FRAME_CHOICES:
        raise R2AInputError(f"--frames {frames}: expected one of {', '.join(FRAME_CHOICES)}")
    records, summary = read_run(run_dir)
    _refuse_replacing(run_dir, out_dir)
    pairs = view_pairs(records, summary)
    saved = any(rec.get("frames") for rec in records)
    with atomic_dir(out_dir) as tmp:
        copied = _copy_frames(run_dir, pairs, frames, saved, tmp)
        data = {"format": VIEW_FORMAT, "format_version": VIEW_FORMAT_VERSION, "run": str(run_dir),
                "config_name": (summary.get("config") or {}).get("name"), "policies": summary["policies"],
                "frames": frames, "frames_saved": saved, "frames_copied": copied,
                "gate_names": list(OSC_POSE_DELTA.names), "outcomes": list(OUTCOMES),
                "initial_outcomes": list(INITIAL_OUTCOMES), "pairs": pairs}
        headline = _markdown_html(headline_md(summary.get("headline") or []))
        uplift = _markdown_html(uplift_md(summary["uplift"], summary["settings"].get("base_policy")))
        page = render_page(to_json_safe(data), headline, uplift, title=f"r2a bench view: {run_dir}")
        (tmp / INDEX).write_text(page, encoding="utf-8")
    size = sum(f.stat().st_size for f in out_dir.rglob("*") if f.is_file())
    log.info("%s: %d pairs, %d frame strips, %.1f MB", out_dir / INDEX, len(pairs), copied, size / 1e6)
    return {"out": str(out_dir / INDEX), "pairs": len(pairs), "frames_copied": copied, "bytes": size}


def read_run(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The records and summary of a results directory; a missing or unreadable file is a one-line error."""
    results, summary_file = results_file(run_dir), run_dir / SUMMARY
    if not summary_file.is_file():
        raise R2AInputError(f"{summary_file}: no such file; 'r2a bench report {run_dir}' writes it")
    try:
        records = load_records(results)
        summary = json.loads(summary_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise R2AInputError(f"{getattr(exc, 'filename', None) or results}: cannot read it ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise R2AInputError(f"{summary_file}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    if not isinstance(summary, dict) or (summary.get("schema"), summary.get("schema_version")) != (
            SUMMARY_SCHEMA, SUMMARY_SCHEMA_VERSION):
        found = (summary.get("schema"), summary.get("schema_version")) if isinstance(summary, dict) else None
        raise R2AInputError(f"{summary_file}: expected {SUMMARY_SCHEMA} v{SUMMARY_SCHEMA_VERSION}, found {found}; "
                            f"'r2a bench report {run_dir}' rebuilds it")
    return records, summary


def _refuse_replacing(run_dir: Path, out_dir: Path) -> None:
    """OUT is replaced as a whole: it may be new, empty or an earlier viewer — never the run or anything else."""
    if out_dir.resolve() in (run_dir.resolve(), *run_dir.resolve().parents):
        raise R2AInputError(f"{out_dir}: the viewer must go into a directory of its own, not the run's or above it")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not _is_viewer(out_dir / INDEX):
        raise R2AInputError(f"{out_dir}: exists and is not an earlier 'r2a bench view' output; give a new directory")
    if out_dir.exists() and not out_dir.is_dir():
        raise R2AInputError(f"{out_dir}: exists and is not a directory")


def _is_viewer(index: Path) -> bool:
    try:
        return f'content="{VIEW_FORMAT}' in index.read_text(encoding="utf-8")[:2000]
    except (OSError, UnicodeDecodeError):
        return False


def view_pairs(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each valid job run by both policies of a headline pair, with its outcome (baseline → candidate)."""
    valid = {job_key(rec): rec for rec in records if rec.get("error") is None}
    order = {factor: i for i, factor in enumerate([CLEAN, *summary.get("factors", [])])}
    pairs = []
    for baseline, candidate in shown_pairs(summary["policies"], summary["settings"].get("base_policy")):
        shared = [key[1:] for key in valid if key[0] == baseline and (candidate, *key[1:]) in valid]
        for task, factor, level, episode in sorted(shared, key=lambda k: (k[0], order.get(k[1], len(order)), *k[1:])):
            a, b = valid[(baseline, task, factor, level, episode)], valid[(candidate, task, factor, level, episode)]
            outcome = next(k for k, n in transitions([bool(a["success"])], [bool(b["success"])]).items() if n)
            pairs.append({"id": len(pairs), "baseline": baseline, "candidate": candidate, "task": task,
                          "factor": factor, "level": level, "episode": episode, "outcome": outcome,
                          "shift_params": a.get("shift_params"), "a": _side(a), "b": _side(b)})
    return pairs


def _side(rec: Mapping[str, Any]) -> dict[str, Any]:
    events = {name: n for name, n in (rec.get("events") or {}).items() if n}
    return {**{f: rec.get(f) for f in SIDE_FIELDS}, "events": events, "saved_frames": rec.get("frames"),
            "frames": None, "frames_note": None}


def _copy_frames(run_dir: Path, pairs: Sequence[dict[str, Any]], mode: str, saved: bool, out: Path) -> int:
    """Copy the strips of the pairs ``mode`` selects into ``out/frames/``; say on each side why it has none."""
    copied: dict[Path, str] = {}
    for pair in pairs:
        chosen = mode == "all" or (mode == "changed" and pair["outcome"] in CHANGED)
        for side in (pair["a"], pair["b"]):
            source = side.pop("saved_frames")
            if not source:  # the page says once when the run saved no frames at all
                side["frames_note"] = None if not saved else (
                    "no frames: the run saved those of failed episodes and clean runs only" if side["success"]
                    else "no frames saved for this episode")
            elif not chosen:
                side["frames_note"] = f"frames not copied (--frames {mode})"
            elif not (path := (run_dir / source).resolve()).is_file():
                side["frames_note"] = f"frames missing: {run_dir / source}"
                log.warning("%s: frame strip not found", run_dir / source)
            else:
                if path not in copied:
                    name = path.name if path.name not in copied.values() else f"{len(copied)}_{path.name}"
                    (out / FRAMES).mkdir(exist_ok=True)
                    shutil.copyfile(path, out / FRAMES / name)
                    copied[path] = name
                side["frames"] = f"{FRAMES}/{copied[path]}"
    return len(copied)


def _markdown_html(lines: Sequence[str]) -> str:
    """The report's Markdown sections (headings, paragraphs, pipe tables) as HTML."""
    out: list[str] = []
    table: list[list[str]] = []
    for line in [*"\n".join(lines).splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if not all(re.fullmatch(r"-+", c) for c in "".join(cells).split("|")):
                table.append(cells)
            continue
        if table:
            head, *body = table
            out.append("<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr></thead>"
                       "<tbody>" + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>"
                                           for row in body) + "</tbody></table>")
            table = []
        if line.startswith("#"):
            depth = len(line) - len(line.lstrip("#"))
            out.append(f"<h{depth}>{_inline(line[depth:].strip())}</h{depth}>")
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    return "\n".join(out)


def _inline(text: str) -> str:
    text = html.escape(text.replace("\\|", "|"), quote=False)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)
