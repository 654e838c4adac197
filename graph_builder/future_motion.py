"""Each node's future motion: what the demonstrator did next, relative to the node's start pose.

Conventions (written to the manifest): for ``j = 0..H-1`` the entry ``j`` describes frame ``start + 1 + j``, the
state reached after action ``start + j``.

* ``future_dpos[j] = p[start+1+j] - p[start]`` — world-frame translation, so the run-time reference is
  ``p_now + future_dpos`` (anchored at the current EE pose, docs/architecture.md, "The R2A core");
* ``future_drot6d[j]`` — rot6d of ``R[start+1+j] · R[start]ᵀ``, the world-frame rotation since the start, so the
  reference orientation is ``R_rel · R_now``;
* ``future_gripper[j]`` — the opening at that frame; ``future_actions[j]`` — the raw demo action ``start + j``;
* ``future_valid[j]`` — false past the demo's end, where every array repeats the demo's last frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2a_core.rotations import quat_to_matrix

#: nodes per chunk, bounding the temporary (chunk, H, 3, 3) rotation arrays
_CHUNK = 32768


@dataclass
class FutureMotion:
    dpos: np.ndarray  # (N, H, 3) float32
    drot6d: np.ndarray  # (N, H, 6) float32
    gripper: np.ndarray  # (N, H) float32
    actions: np.ndarray  # (N, H, A) float32
    valid: np.ndarray  # (N, H) bool


def compute_future_motion(ee_pos: np.ndarray, ee_quat: np.ndarray, gripper: np.ndarray, actions: np.ndarray,
                          g_start: np.ndarray, demo_last: np.ndarray, horizon: int) -> FutureMotion:
    """Future motion of nodes starting at global frames ``g_start`` whose demos end at ``demo_last``."""
    n, a = g_start.shape[0], actions.shape[1]
    out = FutureMotion(dpos=np.empty((n, horizon, 3), np.float32), drot6d=np.empty((n, horizon, 6), np.float32),
                       gripper=np.empty((n, horizon), np.float32), actions=np.empty((n, horizon, a), np.float32),
                       valid=np.empty((n, horizon), bool))
    rot = quat_to_matrix(ee_quat).astype(np.float32)
    steps = np.arange(horizon, dtype=np.int64)
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        s, last = g_start[lo:hi, None].astype(np.int64), demo_last[lo:hi, None].astype(np.int64)
        frame = s + 1 + steps
        out.valid[lo:hi] = frame <= last
        frame = np.minimum(frame, last)
        out.dpos[lo:hi] = ee_pos[frame] - ee_pos[s]
        out.drot6d[lo:hi] = _relative_rot6d(rot[frame], rot[s[:, 0]])
        out.gripper[lo:hi] = gripper[frame]
        out.actions[lo:hi] = actions[np.minimum(s + steps, last)]
    return out


def _relative_rot6d(r_t: np.ndarray, r_0: np.ndarray) -> np.ndarray:
    """rot6d (first two columns) of ``r_t · r_0ᵀ`` for ``r_t (n, H, 3, 3)`` and ``r_0 (n, 3, 3)``.

    Column c of ``r_t · r_0ᵀ`` is ``r_t`` applied to row c of ``r_0``; written elementwise because numpy's
    batched 3×3 matmul is several times slower on millions of tiny matrices.
    """
    cols = [(r_t * r_0[:, None, c, None, :]).sum(axis=-1) for c in (0, 1)]
    return np.concatenate(cols, axis=-1)
