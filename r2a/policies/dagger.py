"""DAgger data: a learner drives the robot, the scripted expert labels every state the learner reaches.

A policy cloned from expert demonstrations fails in states the demonstrations never show: the built-in VLA
hovers a few centimetres off the tower it should stack on, and the expert never hovered there, so there is no
label saying "correct and lower now" (Ross et al., 2011, "DAgger"). Here a learner (any registered policy,
usually the current checkpoint) executes its own chunks while the expert, bound to the same simulator and in
relabel mode, computes its action for each state the learner reaches; that action is the recorded label.
With probability ``beta`` per learner chunk the expert executes instead (DAgger's mixture), so the later
stages of a task are reached and labelled too. Episodes carry ``meta["dagger"]``; training keeps them
whatever their outcome, because their labels are the expert's.

The collection itself is :func:`demos.collect.collect`; this module only injects the learner, so ``demos``
never depends on ``r2a``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.policy import ChunkBroker, Policy

#: the episode metadata key that marks an on-policy, expert-labelled episode
DAGGER_META_KEY = "dagger"

_LEARNERS: "weakref.WeakKeyDictionary[Any, dict[str, Policy]]" = weakref.WeakKeyDictionary()


def _check_beta(beta: float) -> None:
    if not 0.0 <= beta <= 1.0:
        raise R2AInputError(f"DAgger beta={beta}: expected the expert's share of chunks, 0 <= beta <= 1")


class LearnerControl:
    """One episode's executor: the learner's action is executed, the expert's action stays the label."""

    META_KEY = DAGGER_META_KEY

    def __init__(self, learner: Policy, action_dim: int, beta: float = 0.0, seed: int = 0,
                 n_action_steps: int | None = None, name: str = "learner") -> None:
        _check_beta(beta)
        self.beta, self.name = float(beta), name
        self._broker = ChunkBroker(learner, action_dim, n_action_steps)
        self._broker.reset()
        self._rng = np.random.default_rng([seed, 0xDA66E2])
        self._expert_chunk = False
        self.learner_steps = self.expert_steps = 0

    def __call__(self, action: np.ndarray, step: int, obs: dict[str, Any]) -> np.ndarray:
        """The action to execute: the learner's, or for a whole chunk (probability ``beta``) the expert's."""
        queries = self._broker.queries
        learner_action = self._broker.act(obs)  # queried every step, so its chunk timing never drifts
        if self._broker.queries != queries:
            self._expert_chunk = bool(self._rng.random() < self.beta)
        if self._expert_chunk:
            self.expert_steps += 1
            return np.asarray(action, dtype=np.float32)
        self.learner_steps += 1
        return learner_action

    def summary(self) -> dict[str, Any]:
        """What collection stores under ``meta["dagger"]``."""
        return {"learner": self.name, "beta": self.beta, "learner_steps": self.learner_steps,
                "expert_steps": self.expert_steps}


@dataclass(frozen=True)
class LearnerExecutor:
    """The picklable ``executor(sim, seed)`` handed to collection: one learner per simulator, reset per episode."""

    spec: str
    beta: float = 0.0

    def __post_init__(self) -> None:
        from r2a.policies.registry import parse_policy_spec

        parse_policy_spec(self.spec)  # an unknown name fails here, before any worker process starts
        _check_beta(self.beta)

    def __call__(self, sim: Any, seed: int) -> LearnerControl:
        learner = _learner(self.spec, sim)
        return LearnerControl(learner, sim.action_space.dim, self.beta, seed,
                              n_action_steps=getattr(learner, "n_action_steps", None), name=self.spec)


def _learner(spec: str, sim: Any) -> Policy:
    """The learner for ``sim``, built once (loading a checkpoint per episode would dominate short episodes)."""
    from r2a.policies.registry import make_policy

    built = _LEARNERS.setdefault(sim, {})
    if spec not in built:
        built[spec] = make_policy(spec, sim, seed=0)
    return built[spec]
