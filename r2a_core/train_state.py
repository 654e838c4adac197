"""A training run's resumable state next to its checkpoint: the optimizer (safetensors) and the step (JSON).

Shared by every trainer that resumes (the retriever, the gate). No pickle: tensors go to
``optimizer.safetensors``, everything else (step, rng state, param groups) to ``train_state.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OPTIMIZER, TRAIN_STATE = "optimizer.safetensors", "train_state.json"


def save_train_state(directory: str | Path, optimizer: Any, state: dict[str, Any] | None = None) -> None:
    """Write ``optimizer``'s tensors and ``state`` (JSON-serializable) into ``directory`` (a checkpoint being
    written, e.g. inside :func:`r2a_core.files.atomic_dir`)."""
    import torch
    from safetensors.torch import save_file

    directory = Path(directory)
    full = optimizer.state_dict()
    tensors = {f"{index}.{name}": value.detach().contiguous().cpu() if torch.is_tensor(value) else torch.tensor(value)
               for index, entry in full["state"].items() for name, value in entry.items()}
    save_file(tensors, str(directory / OPTIMIZER))
    (directory / TRAIN_STATE).write_text(json.dumps({**(state or {}), "param_groups": full["param_groups"]}))


def load_train_state(directory: str | Path, optimizer: Any) -> dict[str, Any] | None:
    """Restore ``optimizer`` from a checkpoint that was still training; its saved state (step, ...) or None."""
    from safetensors.torch import load_file

    directory = Path(directory)
    if not (directory / TRAIN_STATE).is_file() or not (directory / OPTIMIZER).is_file():
        return None
    meta = json.loads((directory / TRAIN_STATE).read_text())
    tensors = load_file(str(directory / OPTIMIZER))
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta.pop("param_groups")})
    return meta




def save_model_dir(directory: str | Path, net: Any, manifest: dict[str, Any], manifest_name: str = "manifest.json",
                   weights_name: str = "model.safetensors", optimizer: Any = None,
                   state: dict[str, Any] | None = None) -> None:
    """Fill a checkpoint directory being written: the weights (safetensors), the manifest (JSON), and — while
    training — the optimizer and step."""
    from safetensors.torch import save_file

    directory = Path(directory)
    save_file({k: v.detach().contiguous().cpu() for k, v in net.state_dict().items()}, str(directory / weights_name))
    (directory / manifest_name).write_text(json.dumps(manifest, indent=1))
    if optimizer is not None:
        save_train_state(directory, optimizer, state)


def load_model_weights(net: Any, path: str | Path, weights_name: str = "model.safetensors",
                       manifest_name: str = "manifest.json", device: str = "cpu") -> Any:
    """Load ``path/weights_name`` into ``net`` (eval mode); a missing or mismatched file is a one-line error."""
    from safetensors.torch import load_file

    from r2a_core.errors import R2AInputError

    path = Path(path)
    if not (path / weights_name).is_file():
        raise R2AInputError(f"{path}: {weights_name} is missing")
    try:
        net.load_state_dict(load_file(str(path / weights_name), device=device))
    except (RuntimeError, OSError) as err:
        raise R2AInputError(f"{path / weights_name}: does not match the network in {manifest_name} "
                            f"({str(err)[:200]})") from None
    return net.eval()


__all__ = ["OPTIMIZER", "TRAIN_STATE", "load_model_weights", "load_train_state", "save_model_dir", "save_train_state"]
