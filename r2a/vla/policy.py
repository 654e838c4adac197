"""The built-in VLA as a policy: ``infer(obs) -> {"actions": (chunk, 7)}``, frozen weights, CPU inference."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from r2a.vla.checkpoint import MANIFEST, WEIGHTS, Checkpoint, load_checkpoint
from r2a.vla.features import AUX_SCALE, proprio_vector, time_feature
from r2a.vla.text import PromptEmbedder
from r2a_core.config import shipped_path
from r2a_core.errors import R2AInputError
from r2a_core.images import resize_image
from r2a_core.provenance import sha256_dir
from r2a_core.types import PROMPT, STATE_EE_POS, STATE_EE_QUAT, STATE_GRIPPER, STATE_STEP, ActionSpace, image_key

#: the checkpoint shipped with r2a (trained on the built-in scripted demos; see its manifest for provenance)
BUILTIN_CHECKPOINT = shipped_path("r2a/assets/builtin_vla")
#: the LIBERO base (registry name builtin-libero): the same network and recipe on libero_spatial + libero_object
BUILTIN_LIBERO_CHECKPOINT = shipped_path("r2a/assets/builtin_libero")
#: the strong LIBERO base (registry name builtin-libero-strong): the built-in recipe in full (spread arm
#: starts, DART, two DAgger rounds) on the same suites; r2a/assets/builtin_libero_strong/README.md
BUILTIN_LIBERO_STRONG_CHECKPOINT = shipped_path("r2a/assets/builtin_libero_strong")


class BuiltinVLAPolicy:
    """Frozen built-in VLA. Counts elapsed steps itself when the observation carries no ``state/step``.

    Two ways to execute its chunks: ``n_action_steps`` actions of each chunk (the checkpoint's setting by
    default), or ACT's temporal ensemble (``temporal_ensemble=k``): query every step and execute the average of
    all predictions made for this step, weighted ``exp(-k * age_rank)`` with the oldest prediction first.
    """

    def __init__(self, checkpoint: str | Path | None = None, threads: int | None = 1,
                 n_action_steps: int | None = None, temporal_ensemble: float | None = None) -> None:
        self.path = Path(checkpoint) if checkpoint else BUILTIN_CHECKPOINT
        ckpt = _frozen_checkpoint(self.path)
        self.model, self.stats = ckpt.model, ckpt.stats
        self.config = ckpt.model.config
        self.action_space = ActionSpace.from_dict(ckpt.action_space)
        self.temporal_ensemble = temporal_ensemble
        self.n_action_steps = 1 if temporal_ensemble is not None else (n_action_steps or ckpt.n_action_steps)
        if not 1 <= self.n_action_steps <= self.config.chunk:
            raise R2AInputError(f"n_action_steps={self.n_action_steps}: expected 1..{self.config.chunk} (the chunk)")
        self.embedder = PromptEmbedder(ckpt.prompts)
        self.metadata = {"policy": "builtin", "checkpoint": str(self.path), "chunk": self.config.chunk,
                         "action_modes": self.config.action_modes,
                         "n_action_steps": self.n_action_steps, "temporal_ensemble": temporal_ensemble,
                         "action_space": ckpt.action_space, "cameras": list(self.config.cameras),
                         "image_size": self.config.image_size,
                         "artifacts": {"base_checkpoint": {"path": str(self.path),
                                                           "sha256": _checkpoint_digest(self.path)}}}
        if threads:
            torch.set_num_threads(threads)
        self._steps = 0
        self._history: list[tuple[int, np.ndarray]] = []  # (step it was predicted at, chunk)

    def reset(self) -> None:
        self._steps = 0
        self._history.clear()

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        step = int(obs.get(STATE_STEP, self._steps))
        chunks, scores, _ = self.predict(obs)
        chunk = chunks[int(np.argmax(scores))]
        self._steps = step + self.n_action_steps
        if self.temporal_ensemble is None:
            return {"actions": chunk}
        return {"actions": self._ensembled(step, chunk)[None], "chunk": chunk}

    def predict(self, obs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Everything the network says about ``obs``, without advancing the policy's clock.

        Returns every hypothesis as a chunk in the action space, ``(K, chunk, A)`` clipped to the bounds (K = 1
        unless trained with ``action_modes``), their scores ``(K,)`` (``infer`` executes the best), and the
        auxiliary head's estimate of each task object's position relative to the gripper, ``(objects, 3)``
        metres — what the policy believes it sees, for probes and diagnostics (never an input).
        """
        step = int(obs.get(STATE_STEP, self._steps))
        with torch.inference_mode():
            chunks, scores, aux = self.model.hypotheses(*self._inputs(obs, step))
        actions = chunks[0].numpy() * self.stats["action_std"] + self.stats["action_mean"]
        return (self.action_space.clip(actions), scores[0].numpy().astype(np.float32),
                (aux[0].numpy().reshape(-1, 3) / AUX_SCALE).astype(np.float32))

    def _ensembled(self, step: int, chunk: np.ndarray) -> np.ndarray:
        """ACT's temporal ensemble of every stored chunk's prediction for ``step``."""
        horizon = self.config.chunk
        self._history = [(t, c) for t, c in self._history if step - t < horizon] + [(step, chunk)]
        predictions = np.stack([c[step - t] for t, c in self._history])  # oldest first
        weights = np.exp(-self.temporal_ensemble * np.arange(len(predictions)))
        return (weights[:, None] * predictions).sum(0) / weights.sum()

    def predict_batch(self, observations: list[dict[str, Any]]) -> np.ndarray:
        """The executed (best-scored) chunk for each of many observations at once, ``(n, chunk, A)``.

        For offline work on recorded frames (retriever training, offline error measurements): one forward pass
        per batch instead of one per frame; each observation's own ``state/step`` is its elapsed time.
        """
        if not observations:
            return np.zeros((0, self.config.chunk, self.action_space.dim), np.float32)
        parts = [self._inputs(obs, int(obs.get(STATE_STEP, 0))) for obs in observations]
        images = {cam: torch.cat([p[0][cam] for p in parts]) for cam in self.config.cameras}
        stacked = [torch.cat([p[i] for p in parts]) for i in (1, 2, 3)]
        with torch.inference_mode():
            chunks, scores, _ = self.model.hypotheses(images, *stacked)
        best = chunks[torch.arange(len(chunks)), scores.argmax(dim=1)].numpy()
        return self.action_space.clip(best * self.stats["action_std"] + self.stats["action_mean"])

    def _inputs(self, obs: dict[str, Any], step: int) -> tuple:
        images = {cam: _image_tensor(_require(obs, image_key(cam)), self.config.image_size)
                  for cam in self.config.cameras}
        proprio = proprio_vector(_require(obs, STATE_EE_POS), _require(obs, STATE_EE_QUAT),
                                 np.asarray(_require(obs, STATE_GRIPPER), np.float64).reshape(()))
        proprio = (proprio - self.stats["proprio_mean"]) / self.stats["proprio_std"]
        text = self.embedder(str(_require(obs, PROMPT)))
        return (images, torch.from_numpy(proprio[None].astype(np.float32)),
                torch.from_numpy(time_feature(np.array([[step]]))), torch.from_numpy(text[None]))


def _frozen_checkpoint(path: Path) -> Checkpoint:
    """The benchmark builds a policy per episode; the frozen weights are read once per process and file version."""
    return _load_cached(str(path.resolve()), _stamps(path))


def _stamps(path: Path) -> tuple[int, int]:
    """Modification times of the checkpoint's files: a rewritten checkpoint is read (and hashed) again."""
    return tuple(  # type: ignore[return-value]
        (path / name).stat().st_mtime_ns if (path / name).exists() else 0 for name in (MANIFEST, WEIGHTS))


@lru_cache(maxsize=4)
def _load_cached(path: str, stamps: tuple[int, int]) -> Checkpoint:
    return load_checkpoint(path)


def _checkpoint_digest(path: Path) -> str:
    """sha256 of the checkpoint directory (r2a_core.provenance.sha256_dir), hashed once per file version."""
    return _digest_cached(str(path.resolve()), _stamps(path))


@lru_cache(maxsize=4)
def _digest_cached(path: str, stamps: tuple[int, int]) -> str:
    return sha256_dir(path)


def _require(obs: dict[str, Any], key: str) -> Any:
    if key not in obs:
        raise R2AInputError(f"observation has no '{key}' (the built-in VLA needs it); keys present: {sorted(obs)}")
    return obs[key]


def _image_tensor(image: np.ndarray, size: int) -> torch.Tensor:
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[-1] != 3 or image.dtype != np.uint8:
        raise R2AInputError(f"camera image has shape {image.shape} dtype {image.dtype}, expected (H, W, 3) uint8")
    resized = np.ascontiguousarray(resize_image(image, (size, size)))
    return torch.from_numpy(resized).permute(2, 0, 1)[None].float() / 255.0
