"""The policy contract (openpi's): ``infer(obs) -> {"actions": (H, A) float32, ...}`` and ``reset()``.

Everything that acts implements it: scripted experts, base VLA adapters, the R2A wrapper, recorders.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Policy(Protocol):
    """A policy maps an observation dict to a result dict holding an action chunk under ``"actions"``."""

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        """Return at least ``{"actions": np.ndarray of shape (H, A), dtype float32}``."""
        ...

    def reset(self) -> None:
        """Forget any per-episode state; called before every episode."""
        ...
