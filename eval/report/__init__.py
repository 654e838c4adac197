"""Per-episode benchmark records → versioned JSON summary, Markdown report and PNG figures
(docs/architecture.md, "The shift benchmark").

The runner appends one ``r2a.bench.episode`` record per job to ``results.jsonl``; a job is keyed by
(policy, task, factor, level, episode) and the clean run is factor ``"clean"``, level 0. This package reads
those records (:func:`load_records`, :mod:`eval.report.records`), computes every statistic of the benchmark
from them (:func:`build_summary`, :mod:`eval.report.summary`; the integrity table in :mod:`eval.report.integrity`)
and writes ``summary.json``, ``report.md`` (:mod:`eval.report.markdown`) and the figures
(:mod:`eval.report.figures`) with :func:`write_report`.

Choices the design leaves open, written down here:

- Records with a non-null ``error`` are counted in the integrity table and left out of every statistic: an
  infrastructure failure is not the policy's failure. A runner that wants a simulator blow-up to count as a
  failed episode (robomimic's habit) records it with ``success: false`` and ``error: null``.
- Shifted runs are compared with the clean run of the same policy, task and episode; only such pairs enter
  ΔSR, transitions, McNemar and the S→F cohort. ``sr`` and its Wilson interval use all the condition's runs.
- Clean-competence screening uses ``config["base_policy"]``'s clean SR for every policy when the config names
  one (so that all policies' aggregates cover the same tasks), otherwise each policy's own clean SR.
- Uplift for an ordered policy pair (A, B) is SR(B) − SR(A) on the perturbed jobs both ran; per factor/level it
  is macro-averaged over tasks, and overall over (task, factor, level) cells, each with a paired bootstrap.
- Bootstraps all use the summary's ``seed`` (common random numbers), so the summary is a pure function of the
  records and the settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.report.figures import ALL_REACHED_LABEL, FIGURES, write_figures
from eval.report.markdown import MAX_ERRORS_LISTED, headline_md, render_markdown, uplift_md
from eval.report.records import REQUIRED_FIELDS, JobKey, Record, dedupe_records, job_key, load_records, validate_record
from eval.report.summary import build_summary, is_shown_pair, shown_pairs
from eval.schema import SUMMARY
from r2a_core.files import write_json_atomic, write_text_atomic


def write_report(out_dir: Path, summary: Mapping[str, Any]) -> list[Path]:
    """Write ``summary.json`` (atomically), ``report.md`` and the PNG figures into ``out_dir``; return the paths.

    Figures: ΔSR per factor/level with CIs, the task × condition SR heatmap, the failure-depth plot and, with
    two or more policies, the uplift plot. Needs matplotlib (drawn with the Agg canvas, no display).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [write_json_atomic(out_dir / SUMMARY, summary)]
    figures, omitted = write_figures(out_dir, summary)
    paths.append(write_text_atomic(out_dir / "report.md",
                                   render_markdown(summary, [p.name for p in figures], omitted)))
    return paths + figures


__all__ = ["ALL_REACHED_LABEL", "FIGURES", "MAX_ERRORS_LISTED", "REQUIRED_FIELDS", "JobKey", "Record", "build_summary",
           "dedupe_records", "headline_md", "is_shown_pair", "job_key", "load_records", "render_markdown",
           "shown_pairs", "uplift_md", "validate_record", "write_report"]
