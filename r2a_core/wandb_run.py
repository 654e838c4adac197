"""Optional Weights & Biases runs (wandb is an extra; offline by default, never required)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r2a_core.errors import R2AInputError


def start_wandb_run(project: str, name: str, config: dict[str, Any], mode: str = "offline",
                    out_dir: str | Path = "."):
    """``wandb.init`` with its files under ``out_dir/wandb``; a clear install hint when wandb is missing."""
    try:
        import wandb
    except ImportError:
        raise R2AInputError("--wandb needs Weights & Biases: pip install 'r2a[wandb]'") from None
    return wandb.init(project=project, name=name, mode=mode, dir=str(out_dir), config=config)
