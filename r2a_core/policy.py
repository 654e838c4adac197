"""The policy contract (openpi's): ``infer(obs) -> {"actions": (H, A) float32, ...}`` and ``reset()``.

Everything that acts implements it: scripted experts, base VLA adapters, the R2A wrapper, recorders.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Policy(Protocol):
    """A policy maps an observation dict to a result dict holding an action chunk under ``"actions"``."""

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        """Return at least ``{"actions": np.ndarray of shape (H, A), dtype float32}``."""
        ...

    def reset(self) -> None:
        """Forget any per-episode state; called before every episode."""
        ...


class ChunkBroker:
    """Executes ``n_action_steps`` actions of each chunk before querying the policy again (ACT/openpi style).

    All of the chunk is executed when ``n_action_steps`` is None. The broker owns the action queue, so the
    rollout loop only asks for "the next action" and the policy is queried exactly when the queue runs dry.
    """

    def __init__(self, policy: Policy, action_dim: int, n_action_steps: int | None = None) -> None:
        if n_action_steps is not None and n_action_steps < 1:
            raise ValueError(f"n_action_steps must be >= 1, got {n_action_steps}")
        self.policy, self.action_dim, self.n_action_steps = policy, int(action_dim), n_action_steps
        self._queue: list[np.ndarray] = []
        self.queries = 0
        #: the policy's whole result dict of the last query (its diagnostics travel here), and whether the last
        #: ``act`` call made that query
        self.last_reply: dict[str, Any] | None = None
        self.queried = False

    def reset(self) -> None:
        self._queue.clear()
        self.queries = 0
        self.last_reply, self.queried = None, False
        self.policy.reset()

    @property
    def will_query(self) -> bool:
        """Whether the next :meth:`act` queries the policy (the queue is empty): only then is its observation seen."""
        return not self._queue

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        """The next action: from the queue, or from a fresh chunk when the queue is empty."""
        self.queried = not self._queue
        if self.queried:
            self.last_reply = self.policy.infer(obs)
            actions = np.asarray(self.last_reply["actions"], dtype=np.float32)
            if actions.ndim == 1:
                actions = actions[None]
            if actions.ndim != 2 or actions.shape[1] != self.action_dim or len(actions) == 0:
                raise ValueError(f"policy returned actions of shape {actions.shape}, "
                                 f"expected (H, {self.action_dim}) with H >= 1")
            self._queue = list(actions[: self.n_action_steps or len(actions)])
            self.queries += 1
        return self._queue.pop(0)
