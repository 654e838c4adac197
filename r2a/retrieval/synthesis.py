"""From retrieved nodes to a reference chunk in the base policy's action space.

1. **Fuse**: the softmax-weighted mean of the nodes' future motion — translation since the node's start, and the
   relative rotation (weighted rot6d, re-orthonormalized) — resampled onto the executed chunk's steps.
2. **Anchor**: the fused motion is applied to the *current* EE pose (``p_now + Δp``, ``R_rel · R_now``), so the
   reference says "move the way the demonstrations moved from here", wherever "here" is.
3. **Convert** into the base policy's action space, chosen by comparing action-space descriptors:

   * ``actions`` — when the graph's demos were recorded in the base's own action space (same kind and dims), the
     fused *recorded* demo actions are the reference: delta-EE commands are relative, so what moved the demo from
     its node moves the robot the same way from here. Driving the simulator with the reference of a demo's own
     node from that demo's own state retraces the demo exactly (``tests/test_retrieval_sim.py``).
   * ``response`` — otherwise (or on request), the anchored trajectory's per-step displacements become delta-EE
     actions by inverting the controller's fitted response (:mod:`r2a.retrieval.motion`) from the robot's current
     motion. Open loop over a chunk this retraces a demo within a few millimetres (measured on the built-in Stack
     demos: mean 3.6 mm over 8 steps, 7.4 mm at the last step), so it is the fallback, not the default.

   The gripper column is left to the caller: the base policy's gripper passes through.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2a.retrieval.history import HistoryWindow
from r2a.retrieval.motion import ResponseModel
from r2a_core.rotations import matrix_to_axis_angle, quat_to_matrix, rot6d_to_matrix, step_rotations
from r2a_core.types import ActionSpace


@dataclass(frozen=True)
class Reference:
    """An anchored reference over ``steps`` control steps."""

    dpos: np.ndarray  # (n, 3) translation since now, metres (world frame)
    rel_rot: np.ndarray  # (n, 3, 3) rotation since now, R_j R_nowᵀ (world frame)
    positions: np.ndarray  # (n, 3) absolute waypoints p_now + dpos
    valid: float  # share of the fused frames that lay inside the demos (the rest held the demo's end)


def fuse(arrays: dict[str, np.ndarray], nodes: np.ndarray, weights: np.ndarray, now_pos: np.ndarray,
         steps: int, time_scale: float = 1.0) -> Reference:
    """Weighted future motion of ``nodes`` anchored at ``now_pos``, on ``steps`` control steps.

    ``time_scale`` is demo frames per control step (1 when demos were recorded at the control rate); entry ``j``
    is the motion after ``j + 1`` control steps, read from the demo's future by linear interpolation.
    """
    w = np.asarray(weights, np.float64)
    w = w / w.sum()
    dpos = np.einsum("k,kjd->jd", w, arrays["future_dpos"][nodes].astype(np.float64))
    rot6 = np.einsum("k,kjd->jd", w, arrays["future_drot6d"][nodes].astype(np.float64))
    valid = float(np.einsum("k,kj->", w, arrays["future_valid"][nodes].astype(np.float64)) / dpos.shape[0])
    times = (np.arange(steps) + 1) * time_scale - 1.0
    dpos, rot6 = _resample(dpos, times), _resample(rot6, times)
    rel_rot = rot6d_to_matrix(rot6)
    return Reference(dpos=dpos, rel_rot=rel_rot, positions=np.asarray(now_pos, np.float64) + dpos, valid=valid)


def _resample(track: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``track`` (H, D) sampled at fractional frame ``times``; frame -1 is the start (no motion: zero
    translation, identity rotation for a rot6d track)."""
    start = np.array([1, 0, 0, 0, 1, 0], np.float64) if track.shape[1] == 6 else np.zeros(track.shape[1])
    full = np.concatenate([start[None], track])
    t = np.clip(times + 1.0, 0.0, len(full) - 1)
    lo = np.floor(t).astype(int)
    hi = np.minimum(lo + 1, len(full) - 1)
    frac = (t - lo)[:, None]
    return full[lo] * (1 - frac) + full[hi] * frac


def fused_actions(arrays: dict[str, np.ndarray], nodes: np.ndarray, weights: np.ndarray, steps: int,
                  time_scale: float = 1.0) -> np.ndarray:
    """The weighted mean of the nodes' recorded demo actions over ``steps`` control steps ``(n, A)``."""
    w = np.asarray(weights, np.float64)
    acts = np.einsum("k,kjd->jd", w / w.sum(), arrays["future_actions"][nodes].astype(np.float64))
    times = np.arange(steps) * time_scale
    t = np.clip(times, 0, len(acts) - 1)
    lo = np.floor(t).astype(int)
    hi = np.minimum(lo + 1, len(acts) - 1)
    frac = (t - lo)[:, None]
    return acts[lo] * (1 - frac) + acts[hi] * frac


def to_delta_ee(reference: Reference, window: HistoryWindow, response: ResponseModel,
                action_space: ActionSpace) -> np.ndarray:
    """Delta-EE actions ``(n, A)`` that make the controller follow ``reference`` from the current motion.

    Translation and rotation invert the fitted response (clipped to the action bounds); the gripper column (and any
    dim past the six motion dims) is 0 here — the caller fills it from the base policy.
    """
    n = len(reference.dpos)
    positions = np.concatenate([window.ee_pos, window.now_pos[None]])
    v_past = np.diff(positions, axis=0)
    rot_hist = quat_to_matrix(np.concatenate([window.ee_quat, window.now_quat[None]]))
    w_past = matrix_to_axis_angle(rot_hist[1:] @ np.swapaxes(rot_hist[:-1], -1, -2))
    a_past = window.actions
    steps_pos = np.diff(np.concatenate([np.zeros((1, 3)), reference.dpos]), axis=0)
    steps_rot = step_rotations(reference.rel_rot)
    bound = float(np.min(np.abs([action_space.low[:6], action_space.high[:6]])))
    actions = np.zeros((n, action_space.dim))
    actions[:, 0:3] = response.translation.inverse(steps_pos, v_past[-response.translation.past_steps:],
                                                   a_past[-response.translation.past_actions:, 0:3]
                                                   if response.translation.past_actions else a_past[:0, 0:3], bound)
    actions[:, 3:6] = response.rotation.inverse(steps_rot, w_past[-response.rotation.past_steps:],
                                                a_past[-response.rotation.past_actions:, 3:6]
                                                if response.rotation.past_actions else a_past[:0, 3:6], bound)
    return actions


def reference_chunk(arrays: dict[str, np.ndarray], nodes: np.ndarray, weights: np.ndarray, window: HistoryWindow,
                    steps: int, conversion: str, response: ResponseModel, action_space: ActionSpace) -> np.ndarray:
    """The reference ``(steps, A)`` in the base's action space by ``conversion`` (``actions`` or ``response``);
    dims past the graph's (and the gripper, for ``response``) are 0 — the caller takes the gripper from the base."""
    if conversion == "actions":
        ref = fused_actions(arrays, nodes, weights, steps)
    elif conversion == "response":
        ref = to_delta_ee(fuse(arrays, nodes, weights, window.now_pos, steps), window, response, action_space)
    else:
        raise ValueError(f"unknown conversion {conversion!r}; valid: actions, response")
    out = np.zeros((steps, action_space.dim))
    width = min(ref.shape[1], action_space.dim)
    out[:, :width] = ref[:, :width]
    return out


def anchored_quat_error(reference: Reference, reached_quat: np.ndarray, now_quat: np.ndarray) -> np.ndarray:
    """Angle (radians) between the reference orientation ``R_rel R_now`` and reached orientations ``(n, 4)``."""
    target = reference.rel_rot @ quat_to_matrix(now_quat)
    reached = quat_to_matrix(reached_quat)
    return np.linalg.norm(matrix_to_axis_angle(reached @ np.swapaxes(target, -1, -2)), axis=-1)


__all__ = ["Reference", "anchored_quat_error", "fuse", "fused_actions", "reference_chunk", "to_delta_ee"]
