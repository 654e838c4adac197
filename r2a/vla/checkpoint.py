"""Checkpoint format of the built-in VLA (version 1): a directory with ``manifest.json`` + ``model.safetensors``.

The manifest carries the format name and version, the network config, the normalization statistics, the
embeddings of the training prompts (so deployment needs the sentence model only for unseen prompts), the
deployment settings (action space, chunk execution), the full training config and the provenance of the
training data. Writes are atomic (temporary directory, then rename); readers reject unknown versions.

A run still training also keeps ``train_model.safetensors`` (the raw weights; ``model.safetensors`` holds their
moving average), ``optimizer.safetensors`` and ``train_state.json`` (step, sampler state, history) so that
``r2a policy train`` resumes it where it stopped; the final save leaves them out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from r2a.vla.model import VLANet, VLANetConfig
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_dir, read_manifest_json
from r2a_core.train_state import TRAIN_STATE, save_train_state

FORMAT = "r2a.vla.checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS = "model.safetensors"
#: the raw (not averaged) weights of a run still training
TRAIN_WEIGHTS = "train_model.safetensors"


@dataclass
class TrainingState:
    """What a checkpoint of a run still training adds, to resume it exactly."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    state: dict[str, Any]  # step, sampler state, optimizing seconds (JSON)


@dataclass
class Checkpoint:
    model: VLANet
    stats: dict[str, np.ndarray]  # proprio_mean/std, action_mean/std
    prompts: dict[str, np.ndarray]  # training prompt → embedding
    action_space: dict[str, Any]
    n_action_steps: int
    train_config: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)


def save_checkpoint(ckpt: Checkpoint, out: str | Path, training: TrainingState | None = None) -> Path:
    """Write ``ckpt`` atomically to ``out``; with ``training``, also what resuming the run needs."""
    from safetensors.torch import save_file

    out = Path(out)
    with atomic_dir(out, overwrite=True) as tmp:
        state = {k: v.detach().contiguous().cpu() for k, v in ckpt.model.state_dict().items()}
        save_file(state, str(tmp / WEIGHTS))
        if training is not None:
            save_file({k: v.detach().contiguous().cpu() for k, v in training.model.state_dict().items()},
                      str(tmp / TRAIN_WEIGHTS))
            save_train_state(tmp, training.optimizer, training.state)
        manifest = {"format": FORMAT, "version": FORMAT_VERSION, "model": ckpt.model.config.to_dict(),
                    "stats": {k: np.asarray(v).tolist() for k, v in ckpt.stats.items()},
                    "prompts": {p: np.asarray(v).tolist() for p, v in ckpt.prompts.items()},
                    "action_space": ckpt.action_space, "n_action_steps": ckpt.n_action_steps,
                    "train_config": ckpt.train_config, "provenance": ckpt.provenance}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return out


def still_training(path: str | Path) -> bool:
    """Whether ``path`` holds a checkpoint of a run that stopped before its last step."""
    return (Path(path) / TRAIN_STATE).is_file() and (Path(path) / TRAIN_WEIGHTS).is_file()


def read_manifest(path: str | Path) -> dict[str, Any]:
    return read_manifest_json(path, MANIFEST, FORMAT, "version", (FORMAT_VERSION,), "a built-in VLA checkpoint")


def load_checkpoint(path: str | Path) -> Checkpoint:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    manifest = read_manifest(path)
    model = VLANet(VLANetConfig.from_dict(manifest["model"]))
    try:
        state = load_file(str(path / WEIGHTS))
        model.load_state_dict(state)
    except (FileNotFoundError, SafetensorError, RuntimeError) as err:
        raise R2AInputError(f"{path / WEIGHTS}: weights do not load into the network of {MANIFEST}: "
                            f"{str(err).splitlines()[0]}") from None
    model.eval()
    return Checkpoint(model=model, stats={k: np.asarray(v, np.float32) for k, v in manifest["stats"].items()},
                      prompts={p: np.asarray(v, np.float32) for p, v in manifest["prompts"].items()},
                      action_space=manifest["action_space"], n_action_steps=int(manifest["n_action_steps"]),
                      train_config=manifest.get("train_config", {}), provenance=manifest.get("provenance", {}))


def average_checkpoints(paths: Sequence[str | Path], out: str | Path) -> Path:
    """The uniform average of several checkpoints' weights (a "model soup", Wortsman et al. 2022).

    Meaningful only for checkpoints continued from one start, so the networks and the normalization must match.
    """
    if len(paths) < 2:
        raise R2AInputError(f"average: give at least two checkpoints (got {len(paths)})")
    ckpts = [load_checkpoint(path) for path in paths]
    first = ckpts[0]
    for path, ckpt in zip(paths[1:], ckpts[1:]):
        if ckpt.model.config != first.model.config:
            raise R2AInputError(f"{path}: its network {ckpt.model.config} differs from {paths[0]}'s")
        for key, value in first.stats.items():
            other = ckpt.stats.get(key)
            if other is None or other.shape != value.shape or not np.allclose(other, value):
                raise R2AInputError(f"{path}: normalization '{key}' differs from {paths[0]}'s; average only "
                                    f"checkpoints continued from one start (init_from)")
    states = [ckpt.model.state_dict() for ckpt in ckpts]
    first.model.load_state_dict({name: torch.stack([s[name] for s in states]).mean(0) if value.is_floating_point()
                                 else value for name, value in states[0].items()})
    prompts = {p: e for ckpt in reversed(ckpts) for p, e in ckpt.prompts.items()}
    provenance = {"averaged": [{"path": str(path), "provenance": ckpt.provenance} for path, ckpt in zip(paths, ckpts)]}
    return save_checkpoint(replace(first, prompts=prompts, provenance=provenance), out)
