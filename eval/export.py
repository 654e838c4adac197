"""``r2a bench export RUN_DIR --csv DIR --json FILE``: a results directory as flat tables for other tools.

Two tables, every column documented in :data:`EPISODE_COLUMNS` and :data:`CELL_COLUMNS` (the JSON carries the
docs; ``r2a bench export --help`` prints them):

* ``episodes`` — one row per episode record (the last record of each job): the result vector LIBERO-Plus users
  ask for, one 0/1 per (policy, task, factor, level, episode), with the LIBERO-Plus variant's name where the run
  had one, and what R2A did in the episode;
* ``cells`` — one row per (policy, factor, level): episodes, successes, the success rate pooled over the cell's
  episodes with its Wilson 95 % interval and the macro rate over every task of the cell (the report's tables keep
  only the tasks the base is competent on clean); plus, per (policy, factor), a row with level ``all`` — the
  per-category table.

Records of errored episodes are exported with ``error`` set and left out of the cells (as the report does).
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from eval.report import load_records
from eval.schema import results_file
from eval.stats import wilson_interval
from r2a_core.errors import R2AInputError
from r2a_core.files import write_json_atomic, write_text_atomic

EXPORT_FORMAT, EXPORT_VERSION = "r2a.bench.export", 1
#: the level of a cell row that pools every level of its factor (the per-category row)
ALL_LEVELS = "all"

EPISODE_COLUMNS: dict[str, str] = {
    "policy": "the policy spec as the run named it",
    "task": "task name (LIBERO: suite/index)",
    "factor": "shift factor (clean; LIBERO-Plus families as liberoplus:<family>)",
    "level": "severity level (0 clean, 1-3; LIBERO-Plus levels 1-5)",
    "episode": "episode index within the task; equal indexes of one task are paired across factors and policies",
    "env_seed": "the simulator's seed (test seeds start at 100000)",
    "variant": "the LIBERO-Plus task this episode ran (empty elsewhere)",
    "success": "1 if the task's success check held before the step limit, else 0",
    "steps": "control steps run",
    "horizon": "the step limit",
    "progress": "share of the task's stages reached (0-1)",
    "first_incomplete_stage": "the first stage not reached (empty on success)",
    "instruction": "the instruction the policy was given",
    "fingerprint": "hash of the simulator state after reset, before the shift (pairs share it)",
    "error": "the error's first line when the episode raised (then success is 0 and the cells leave it out)",
    "r2a_queries": "base queries R2A made (empty for a policy without R2A)",
    "r2a_fallback_share": "share of R2A's queries that left the base chunk unchanged",
    "r2a_mean_seed_distance": "R2A's mean seed distance (graph key units)",
    "r2a_recovery_steps": "control steps of start-pose recovery",
    "harmonized_share": "share of queries whose images were harmonized (any camera)",
    "wall_s": "wall-clock seconds of the episode",
}
CELL_COLUMNS: dict[str, str] = {
    "policy": "the policy spec",
    "factor": "shift factor",
    "level": f"severity level, or '{ALL_LEVELS}': every level of the factor pooled (the per-category row)",
    "tasks": "tasks with episodes in the cell",
    "episodes": "episodes in the cell (errored ones left out)",
    "successes": "successful episodes",
    "sr": "success rate pooled over the cell's episodes",
    "sr_lo": "Wilson 95 % interval, lower bound",
    "sr_hi": "Wilson 95 % interval, upper bound",
    "sr_macro": "mean over the cell's tasks of each task's success rate, every task in the run counted (the report's "
                "tables average over the tasks the base is competent on clean; filter the episode rows to match)",
}


def export_run(run_dir: str | Path, csv_dir: str | Path | None = None,
               json_path: str | Path | None = None) -> dict[str, Any]:
    """Write the run's tables as ``csv_dir/episodes.csv`` and ``csv_dir/cells.csv`` and/or one JSON file."""
    if csv_dir is None and json_path is None:
        raise R2AInputError("give --csv DIR and/or --json FILE")
    records = load_records(results_file(run_dir))
    episodes = [episode_row(rec) for rec in records]
    cells = cell_rows(records)
    if csv_dir is not None:
        folder = Path(csv_dir)
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / "episodes.csv", _csv(episodes, EPISODE_COLUMNS))
        write_text_atomic(folder / "cells.csv", _csv(cells, CELL_COLUMNS))
    if json_path is not None:
        write_json_atomic(json_path, {"format": EXPORT_FORMAT, "format_version": EXPORT_VERSION,
                                      "run": str(run_dir), "columns": {"episodes": EPISODE_COLUMNS,
                                                                        "cells": CELL_COLUMNS},
                                      "episodes": episodes, "cells": cells})
    return {"episodes": len(episodes), "cells": len(cells), "csv": str(csv_dir) if csv_dir else None,
            "json": str(json_path) if json_path else None}


def episode_row(rec: Mapping[str, Any]) -> dict[str, Any]:
    """One record as a flat row of :data:`EPISODE_COLUMNS`."""
    r2a, harmonize = rec.get("r2a") or {}, rec.get("harmonize") or {}
    error = rec.get("error")
    return {"policy": rec["policy"], "task": rec["task"], "factor": rec["factor"], "level": int(rec["level"]),
            "episode": int(rec["episode"]), "env_seed": rec.get("env_seed"),
            "variant": (rec.get("shift_params") or {}).get("liberoplus_task", ""),
            "success": int(bool(rec.get("success")) and error is None), "steps": rec.get("steps"),
            "horizon": rec.get("horizon"), "progress": rec.get("progress"),
            "first_incomplete_stage": rec.get("first_incomplete_stage") or "",
            "instruction": rec.get("instruction") or "", "fingerprint": rec.get("fingerprint") or "",
            "error": str(error).strip().splitlines()[-1] if error else "",
            "r2a_queries": r2a.get("queries"), "r2a_fallback_share": r2a.get("fallback_share"),
            "r2a_mean_seed_distance": r2a.get("mean_seed_distance"),
            "r2a_recovery_steps": r2a.get("recovery_steps"),
            "harmonized_share": harmonize.get("any_active_share"), "wall_s": rec.get("wall_s")}


def cell_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (policy, factor, level), then per (policy, factor) over every level, in the run's order."""
    cells: dict[tuple[str, str, Any], list[Mapping[str, Any]]] = defaultdict(list)
    for rec in records:
        if rec.get("error") is None:
            cells[(rec["policy"], rec["factor"], int(rec["level"]))].append(rec)
            cells[(rec["policy"], rec["factor"], ALL_LEVELS)].append(rec)
    order = sorted(cells, key=lambda k: (k[0], k[1] != "clean", k[1], k[2] == ALL_LEVELS,
                                         k[2] if k[2] != ALL_LEVELS else 0))
    rows = [_cell(key, cells[key]) for key in order]
    by_factor = defaultdict(set)
    for policy, factor, level in cells:
        by_factor[(policy, factor)].add(level)
    # a factor with one level (clean) needs no pooled row: it would repeat the level's
    return [r for r in rows if r["level"] != ALL_LEVELS or len(by_factor[(r["policy"], r["factor"])]) > 2]


def _cell(key: tuple[str, str, Any], records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    policy, factor, level = key
    by_task: dict[str, list[bool]] = defaultdict(list)
    for rec in records:
        by_task[rec["task"]].append(bool(rec["success"]))
    ok = [s for outcomes in by_task.values() for s in outcomes]
    lo, hi = wilson_interval(sum(ok), len(ok))
    return {"policy": policy, "factor": factor, "level": level, "tasks": len(by_task), "episodes": len(ok),
            "successes": int(sum(ok)), "sr": round(sum(ok) / len(ok), 4), "sr_lo": round(lo, 4),
            "sr_hi": round(hi, 4), "sr_macro": round(float(np.mean([np.mean(v) for v in by_task.values()])), 4)}


def _csv(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if row.get(k) is None else row.get(k)) for k in columns} for row in rows)
    return buffer.getvalue()


def columns_help() -> str:
    """The columns of both tables, one per line (the ``--help`` epilog)."""
    lines = ["episodes.csv (one row per episode):"] + [f"  {k:<24} {v}" for k, v in EPISODE_COLUMNS.items()]
    lines += ["cells.csv (one row per policy, factor, level):"] + [f"  {k:<24} {v}" for k, v in CELL_COLUMNS.items()]
    return "\n".join(lines)


__all__ = ["CELL_COLUMNS", "EPISODE_COLUMNS", "EXPORT_FORMAT", "EXPORT_VERSION", "cell_rows", "columns_help",
           "episode_row", "export_run"]
