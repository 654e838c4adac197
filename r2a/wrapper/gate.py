"""The gate: per action dimension and per chunk, how far the base policy's chunk moves toward the reference.

``A_exec = A_base + S ⊙ (A_ref − A_base)`` with ``S`` in ``[0, max_gate]``; the gripper always passes through from
the base (``S = 0`` there). A gate is anything with ``__call__(GateInputs) -> S (n, A)`` and ``reset()``. This
module has the protocol and the constant gate (the R2A page's logged values: ≈ 0.25 on translation, ≈ 0.05 on
rotation); the learned gate plugs in through the same protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from r2a_core.types import ActionSpace


@dataclass(frozen=True)
class GateInputs:
    """Everything a gate may look at for one chunk (a learned gate reads more of it than the constant one)."""

    base: np.ndarray  # (n, A) the executed part of the base chunk
    reference: np.ndarray  # (n, A) the reference in the same action space
    base_chunk: np.ndarray  # (C, A) the whole predicted chunk
    previous_plan: np.ndarray | None  # (n, A) what the previous chunk planned for these steps, when known
    retrieval: dict[str, float]  # entropy, top_weight, seed_distance, progress
    proprio: dict[str, np.ndarray]  # ee_pos, ee_quat, gripper
    step: int
    observation: dict[str, Any] = field(default_factory=dict, repr=False)  # images reach the gate, never retrieval


class Gate(Protocol):
    def __call__(self, inputs: GateInputs) -> np.ndarray:
        """S ``(n, A)`` in ``[0, max_gate]``."""
        ...

    def reset(self) -> None:
        ...


def bound_gate(s: np.ndarray, action_space: ActionSpace, max_gate: float) -> np.ndarray:
    """``s`` clipped to ``[0, max_gate]``, non-finite entries 0, and 0 on the gripper dims."""
    s = np.asarray(s, np.float64)
    if not np.isfinite(s).all():  # checked first: nan_to_num is a per-query cost the usual, finite S does not need
        s = np.nan_to_num(s, nan=0.0, posinf=0.0, neginf=0.0)
    s = np.clip(s, 0.0, max_gate)
    s[..., list(action_space.gripper_dims)] = 0.0
    return s


def holding_rule(base: np.ndarray, action_space: ActionSpace, holding_scale: float) -> np.ndarray:
    """The per-step factor ``(n,)`` the wrapper multiplies S by: ``holding_scale`` on the steps where the base chunk
    ``(n, A)`` commands the gripper closed (carrying, placing), 1 elsewhere."""
    scale = np.ones(len(base))
    grip = list(action_space.gripper_dims)
    if holding_scale != 1.0 and grip:
        scale[(np.asarray(base)[:, grip] > 0).any(axis=1)] = holding_scale
    return scale


def closest_gate(base: np.ndarray, reference: np.ndarray, target: np.ndarray, scale: np.ndarray,
                 max_gate: float) -> np.ndarray:
    """Per dimension, the S in ``[0, max_gate]`` whose blend ``base + scale·S·(reference − base)`` is closest to
    ``target`` in least squares over the steps: chunks ``(..., n, A)``, ``scale`` ``(..., n)`` → S ``(..., A)``.

    The error is a parabola in S, so the minimizer ``Σ c·d·(target − base) / Σ (c·d)²`` (``d = reference − base``,
    ``c`` the step's ``scale``) clipped to the bounds is the best S inside them; 0 where S moves nothing (the
    reference equals the base, or every step's scale is 0). The diagnostic oracle gate runs it per query (then
    :func:`bound_gate` zeroes the gripper); gate training (``target: oracle_s``) uses it as the per-row target.
    """
    base = np.asarray(base, np.float64)
    lever = np.asarray(scale, np.float64)[..., None] * (np.asarray(reference, np.float64) - base)
    num = (lever * (np.asarray(target, np.float64) - base)).sum(axis=-2)
    den = (lever ** 2).sum(axis=-2)
    s = np.divide(num, den, out=np.zeros_like(num), where=den > 1e-12)
    return np.clip(s, 0.0, max_gate)


class ConstantGate:
    """The same ``S`` for every chunk: ``translation`` on dx dy dz, ``rotation`` on drx dry drz, 0 on the gripper."""

    def __init__(self, action_space: ActionSpace, translation: float = 0.25, rotation: float = 0.05,
                 max_gate: float = 0.5) -> None:
        self.action_space, self.max_gate = action_space, max_gate
        s = np.zeros(action_space.dim)
        s[0:3], s[3:6] = translation, rotation
        self.values = bound_gate(s, action_space, max_gate)

    def __call__(self, inputs: GateInputs) -> np.ndarray:
        return np.broadcast_to(self.values, inputs.base.shape).copy()

    def reset(self) -> None:
        return None


class ReplayGate(ConstantGate):
    """``S = 1`` on the motion dims: execute the reference itself (the ``r2a-nogate`` ablation)."""

    def __init__(self, action_space: ActionSpace) -> None:
        super().__init__(action_space, 1.0, 1.0, max_gate=1.0)


__all__ = ["ConstantGate", "Gate", "GateInputs", "ReplayGate", "bound_gate", "closest_gate", "holding_rule"]
