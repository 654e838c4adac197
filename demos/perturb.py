"""DART-style perturbed demonstrations: execute a disturbed action, record the expert's own action as the label.

A policy cloned from clean expert rollouts only sees states on the expert's path; its own small errors take it
off that path and, near a precise step such as putting one cube on another, it has never seen the correction
(Laskey et al., 2017, "DART"). Collecting with the expert in the loop but a disturbance on what is executed shows
the closed-loop expert correcting from nearby states. Two disturbances:

* a temporally correlated (AR(1)) offset on the position command, so the hand drifts a few millimetres to
  centimetres the way a chunked policy does between queries;
* occasionally a forced gripper opening while the expert holds something, which drops the object and makes the
  expert pick it up again — the recovery a clone otherwise never sees.

The labels stay the expert's actions, so the recorded ``actions`` are what a learner should imitate; the
disturbance and its parameters are written into the episode's metadata.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from r2a_core.errors import R2AInputError

GRIPPER = 6  # index of the gripper command in an OSC_POSE action (-1 open, +1 closed)


@dataclass(frozen=True)
class PerturbConfig:
    """How strongly executed actions are disturbed (all zero: no disturbance)."""

    #: stationary standard deviation of the position-command offset, in normalized action units (1 = 5 cm)
    noise: float = 0.0
    #: AR(1) coefficient of that offset per control step (0: white noise; 0.9: drifts over ~10 steps)
    correlation: float = 0.9
    #: probability that an episode contains one forced gripper opening while the expert holds an object
    drop_prob: float = 0.0
    #: control steps the gripper is forced open
    drop_steps: int = 6
    #: per-step chance of the drop once armed and the gripper has been closed for ``min_closed`` steps
    drop_hazard: float = 0.03
    min_closed: int = 15

    def __post_init__(self) -> None:
        if self.noise < 0 or not 0 <= self.correlation < 1 or not 0 <= self.drop_prob <= 1 \
                or self.drop_steps < 1 or not 0 < self.drop_hazard <= 1 or self.min_closed < 0:
            raise R2AInputError(f"perturbation {asdict(self)}: expected noise >= 0, 0 <= correlation < 1, "
                                "0 <= drop_prob <= 1, drop_steps >= 1, 0 < drop_hazard <= 1, min_closed >= 0")

    @property
    def active(self) -> bool:
        return self.noise > 0 or self.drop_prob > 0


class ActionPerturbation:
    """Turns the expert's action into the executed one; one instance per episode, seeded by the episode seed."""

    META_KEY = "perturbation"  # where collection stores :meth:`summary` in the episode's metadata

    def __init__(self, config: PerturbConfig, seed: int) -> None:
        self.config = config
        self._rng = np.random.default_rng([seed, 0xDA27])
        self._offset = np.zeros(3)
        self._drop_armed = bool(self._rng.random() < config.drop_prob)
        self._closed_for = 0
        self._open_left = 0
        self.drop_steps: list[int] = []

    def __call__(self, action: np.ndarray, step: int, obs: dict | None = None) -> np.ndarray:
        executed = np.array(action, dtype=np.float32, copy=True)
        executed[:3] += self._next_offset()
        self._maybe_drop(executed, step)
        return np.clip(executed, -1.0, 1.0)

    def _next_offset(self) -> np.ndarray:
        c = self.config
        if c.noise == 0:
            return self._offset
        innovation = self._rng.normal(0.0, c.noise * np.sqrt(1.0 - c.correlation**2), 3)
        self._offset = c.correlation * self._offset + innovation
        return self._offset

    def _maybe_drop(self, executed: np.ndarray, step: int) -> None:
        c = self.config
        closed = executed[GRIPPER] > 0
        self._closed_for = self._closed_for + 1 if closed else 0
        if self._drop_armed and closed and self._closed_for >= c.min_closed and self._rng.random() < c.drop_hazard:
            self._drop_armed, self._open_left = False, c.drop_steps
            self.drop_steps.append(step)
        if self._open_left > 0:
            executed[GRIPPER] = -1.0
            self._open_left -= 1

    def summary(self) -> dict:
        """What to store in the episode's metadata."""
        return {**asdict(self.config), "forced_drops_at": list(self.drop_steps)}
