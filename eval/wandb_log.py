"""Optional Weights & Biases logging of a benchmark summary (offline by default; wandb is an extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r2a_core.wandb_run import start_wandb_run


def log_summary(summary: dict[str, Any], config, mode: str = "offline", out_dir: str | Path = ".") -> None:
    """Log the per factor/level aggregates and uplift rows as wandb tables under ``out_dir/wandb``; the run's
    config carries the benchmark config and its provenance (commit, versions, machine, policy files)."""
    run = start_wandb_run("r2a-bench", config.name,
                          {**config.to_dict(), "provenance": summary.get("provenance")}, mode, out_dir)
    import wandb

    for key in ("aggregates", "uplift"):
        rows = summary.get(key) or []
        if rows:
            columns = sorted({c for row in rows for c in row if not isinstance(row[c], (dict, list))})
            run.log({key: wandb.Table(columns=columns, data=[[row.get(c) for c in columns] for row in rows])})
    run.summary.update({"integrity/" + k: v for k, v in summary.get("integrity", {}).items()
                        if isinstance(v, (int, float)) or v is None})
    run.finish()
