"""The training toolkit every trainer shares (the built-in VLA, the retriever, the gate): where training runs,
the learning-rate schedule, and where a Weights & Biases run keeps its files.

Torch and wandb are imported inside the functions, so configs and ``--help`` stay light.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from r2a_core.errors import R2AInputError


def training_device(name: str, local_rank: int | None = None) -> Any:
    """``auto`` → the first CUDA device when torch sees one, else the CPU; anything else as torch spells it.

    Under DDP (``local_rank`` given and ``torch.distributed`` initialized) a CUDA device is the process's own,
    ``cuda:local_rank``, made the current one.
    """
    import torch

    if name == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            device = torch.device(name)
        except RuntimeError as err:
            raise R2AInputError(f"device {name!r} is not a torch device ({err})") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise R2AInputError(f"device {name!r}: this torch ({torch.__version__}) sees no CUDA device")
    if local_rank is not None and device.type == "cuda" and torch.distributed.is_initialized():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    return device


def schedule_progress(step: int, warmup_steps: int, total_steps: int, elapsed_s: float = 0.0,
                      time_limit_s: float = 0.0) -> float:
    """Fraction in [0, 1] of the post-warm-up schedule done at ``step``: by steps, or by wall-clock time when a
    ``time_limit_s`` (> 0) is further along."""
    by_steps = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    by_time = elapsed_s / time_limit_s if time_limit_s > 0 else 0.0
    return min(1.0, max(by_steps, by_time))


def warmup_cosine_lr(peak: float, step: int, warmup_steps: int, progress: float, floor: float = 0.0) -> float:
    """Linear warm-up to ``peak`` over ``warmup_steps``, then a cosine from ``peak`` down to ``floor`` as
    ``progress`` (:func:`schedule_progress`) goes from 0 to 1."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def training_wandb_run(project: str, out: str | Path, config: dict[str, Any], mode: str | None) -> Any:
    """A wandb run for the training that writes checkpoint ``out``, or None when ``mode`` is unset or
    ``disabled``.

    One rule for every trainer: the run is named after the checkpoint and its files go to ``wandb/`` *beside*
    the checkpoint (in ``out``'s parent), never inside it — a checkpoint directory is replaced whole at every save.
    """
    if not mode or mode == "disabled":
        return None
    from r2a_core.wandb_run import start_wandb_run

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return start_wandb_run(project, out.name, config, mode, out.parent)


__all__ = ["schedule_progress", "training_device", "training_wandb_run", "warmup_cosine_lr"]
