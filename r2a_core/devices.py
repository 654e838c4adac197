"""Where training runs: one rule for every trainer (the built-in VLA, the retriever, the gate)."""

from __future__ import annotations

from typing import Any

from r2a_core.errors import R2AInputError


def training_device(name: str) -> Any:
    """``auto`` → the first CUDA device when torch sees one, else the CPU; anything else as torch spells it."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise R2AInputError(f"device {name!r} is not a torch device ({err})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise R2AInputError(f"device {name!r}: this torch ({torch.__version__}) sees no CUDA device")
    return device


__all__ = ["training_device"]
