"""Synthetic gate training data with a known answer, for tests and scripts/gpu_check.sh: the reference is right on
half the episodes (shifted: the base is off, the image-OOD score high) and the base on the others."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gating.data import FORMAT, FORMAT_VERSION, save_gate_data
from r2a.wrapper.learned_gate import GateLayout
from r2a_core.types import OSC_POSE_DELTA


def synthetic_gate_data(path: str | Path, episodes: int = 12, rows_per_episode: int = 20, seed: int = 0) -> Path:
    """An ``r2a.gate.data`` file at ``path`` of ``episodes`` × ``rows_per_episode`` rows (held-out seeds 20000…)."""
    rng = np.random.default_rng(seed)
    n = episodes * rows_per_episode
    expert = rng.normal(size=(n, 8, 7)).astype(np.float32) * 0.3
    shifted = np.repeat(np.arange(episodes) % 2 == 0, rows_per_episode)
    noise = rng.normal(size=(n, 8, 7)).astype(np.float32) * 0.3
    base = np.where(shifted[:, None, None], expert + noise, expert + 0.1 * noise)
    reference = np.where(shifted[:, None, None], expert + 0.1 * noise, expert + noise)
    arrays = {"base": base, "reference": reference, "expert": expert,
              "retrieval": rng.random((n, 4)).astype(np.float32), "ee_pos": rng.normal(size=(n, 3)).astype(np.float32),
              "gripper": rng.random(n).astype(np.float32), "step": rng.integers(0, 200, n).astype(np.int32),
              "disagreement": np.abs(base - reference).mean(1).astype(np.float32), "has_plan": np.ones(n, bool),
              "image_score": np.where(shifted, 50.0, 1.0).astype(np.float32), "has_image": np.ones(n, bool),
              "episode": np.repeat(np.arange(episodes), rows_per_episode).astype(np.int32),
              "seed": np.repeat(20000 + np.arange(episodes), rows_per_episode).astype(np.int64),
              "scale": np.ones((n, 8), np.float32)}
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "layout": GateLayout().to_dict(),
            "action_space": {"kind": OSC_POSE_DELTA.kind, "dim": 7},
            "condition": ["light:3" if s else "clean" for s in shifted], "kind": ["demo"] * n, "sources": ["synthetic"],
            "seeds": sorted(set(arrays["seed"].tolist())), "shift_settings": ["light:3"], "skipped": {}}
    return save_gate_data({"arrays": arrays, "meta": meta}, path)


__all__ = ["synthetic_gate_data"]
