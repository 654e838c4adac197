"""Policies that wrap policies."""

from __future__ import annotations

from typing import Any

import numpy as np

from r2a_core.policy import Policy
from r2a_core.types import ActionSpace


class ActionNoisePolicy:
    """Adds seeded Gaussian noise to the non-gripper dimensions of another policy's chunk, then clips.

    A deliberately degraded policy with a known direction of effect, used to check that the benchmark's
    statistics move the right way.
    """

    def __init__(self, inner: Policy, sigma: float, action_space: ActionSpace, seed: int) -> None:
        self.inner, self.sigma, self.action_space, self.seed = inner, float(sigma), action_space, seed
        self._rng = np.random.default_rng(seed)

    def reset(self) -> None:
        self.inner.reset()
        self._rng = np.random.default_rng(self.seed)

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        out = dict(self.inner.infer(obs))
        actions = np.array(out["actions"], dtype=np.float32)
        noise = self._rng.normal(0.0, self.sigma, actions.shape).astype(np.float32)
        noise[:, list(self.action_space.gripper_dims)] = 0.0
        out["actions"] = self.action_space.clip(actions + noise)
        return out
