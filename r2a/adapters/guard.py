"""The guard every external or learned policy is wrapped in: its replies are checked before they move a robot.

A reply of the wrong form (not a dict with ``"actions"``, not an ``(H, A)`` chunk for our action space) is a
configuration bug, so it raises :class:`~r2a_core.errors.R2AInputError` at once. Non-finite values are a
run-time failure of the model, so the robot holds still for that chunk (zero motion deltas, the last finite
gripper command), a rate-limited warning is logged and the reply is marked ``"fallback": True``; after
``max_consecutive_fallbacks`` non-finite chunks in a row the guard gives up with a RuntimeError, which the
benchmark records as a failed episode. Every chunk is clipped to the action bounds; NaN never leaves the guard.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy
from r2a_core.types import ActionSpace

log = logging.getLogger(__name__)

#: after the first non-finite chunk, warn again only every this many fallbacks
WARN_EVERY = 50


class GuardedPolicy:
    """Checks, clips and (for non-finite actions) replaces the chunks of ``inner``."""

    def __init__(self, inner: Policy, action_space: ActionSpace, max_consecutive_fallbacks: int = 10,
                 name: str | None = None) -> None:
        if max_consecutive_fallbacks < 1:
            raise ValueError(f"max_consecutive_fallbacks must be >= 1, got {max_consecutive_fallbacks}")
        self.inner, self.action_space = inner, action_space
        self.max_consecutive_fallbacks = int(max_consecutive_fallbacks)
        self.name = name or type(inner).__name__
        self.fallbacks = 0  # over the guard's lifetime (all episodes)
        self._consecutive = 0
        self._last_gripper = self._open_gripper()

    @property
    def n_action_steps(self) -> int | None:
        """The inner policy's preferred execution horizon (openpi's action_horizon), if it has one."""
        return getattr(self.inner, "n_action_steps", None)

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The inner policy's metadata, ``"artifacts"`` (what it loaded, r2a_core.provenance) included."""
        return getattr(self.inner, "metadata", None)

    def close(self) -> None:
        """Release what the inner policy holds (a server connection), if it has a ``close``."""
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    def reset(self) -> None:
        self.inner.reset()
        self._consecutive = 0
        self._last_gripper = self._open_gripper()

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        reply = self.inner.infer(obs)
        chunk = self._checked_chunk(reply)
        out = dict(reply)
        if np.isfinite(chunk).all():
            self._consecutive = 0
            out["actions"], out["fallback"] = self.action_space.clip(chunk), False
            self._last_gripper = out["actions"][-1, list(self.action_space.gripper_dims)]
            return out
        out["actions"], out["fallback"] = self._fallback(chunk), True
        return out

    def _checked_chunk(self, reply: Any) -> np.ndarray:
        """The reply's actions as float32 (H, A); a wrong form is a configuration error."""
        if not isinstance(reply, dict) or "actions" not in reply:
            got = f"a dict with keys {sorted(reply)}" if isinstance(reply, dict) else type(reply).__name__
            raise R2AInputError(f"policy '{self.name}' returned {got}; expected a dict with an 'actions' array")
        try:
            chunk = np.asarray(reply["actions"], dtype=np.float32)
        except (TypeError, ValueError):
            raise R2AInputError(f"policy '{self.name}' returned actions that are not a numeric array "
                                f"({type(reply['actions']).__name__})") from None
        dim = self.action_space.dim
        if chunk.ndim != 2 or chunk.shape[1] != dim or chunk.shape[0] == 0:
            raise R2AInputError(
                f"policy '{self.name}' returned actions of shape {chunk.shape}, expected (H, {dim}) with H >= 1 "
                f"({', '.join(self.action_space.names)}); check the adapter's action mapping")
        return chunk

    def _fallback(self, chunk: np.ndarray) -> np.ndarray:
        """Hold still for the length of the chunk, keeping the last finite gripper command."""
        self.fallbacks += 1
        self._consecutive += 1
        bad = int((~np.isfinite(chunk)).sum())
        if self.fallbacks == 1 or self.fallbacks % WARN_EVERY == 0:
            log.warning("policy '%s' returned %d non-finite of %d action values; holding still for %d steps "
                        "(fallback #%d)", self.name, bad, chunk.size, len(chunk), self.fallbacks)
        if self._consecutive > self.max_consecutive_fallbacks:
            raise RuntimeError(f"policy '{self.name}' returned non-finite actions {self._consecutive} times in a "
                               f"row (max_consecutive_fallbacks={self.max_consecutive_fallbacks}); giving up")
        if self.action_space.kind != "delta_ee":
            raise RuntimeError(f"policy '{self.name}' returned non-finite actions and there is no hold-still "
                               f"action for action space kind '{self.action_space.kind}'")
        hold = np.zeros_like(chunk)
        hold[:, list(self.action_space.gripper_dims)] = self._last_gripper
        return self.action_space.clip(hold)

    def _open_gripper(self) -> np.ndarray:
        """Before any finite chunk the gripper command is 'open' (the lower bound: -1 for OSC_POSE_DELTA)."""
        return np.asarray([self.action_space.low[d] for d in self.action_space.gripper_dims], dtype=np.float32)
