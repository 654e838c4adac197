"""Rotation conversions in one place (quaternions are wxyz, see :mod:`r2a_core.types`)."""

from __future__ import annotations

import numpy as np


def xyzw_to_wxyz(q: np.ndarray) -> np.ndarray:
    return np.concatenate([q[..., 3:4], q[..., :3]], axis=-1)


def wxyz_to_xyzw(q: np.ndarray) -> np.ndarray:
    return np.concatenate([q[..., 1:4], q[..., 0:1]], axis=-1)


def canonical_quat(q: np.ndarray) -> np.ndarray:
    """Unit quaternion with non-negative w (q and -q are the same rotation)."""
    q = np.asarray(q, dtype=np.float64)
    q = q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), 1e-12)
    return np.where(q[..., :1] < 0, -q, q)


def quat_to_axis_angle(q: np.ndarray) -> np.ndarray:
    """wxyz quaternion(s) → axis-angle vector(s) (LIBERO's ``ee_ori``)."""
    q = canonical_quat(q)
    w = np.clip(q[..., 0], -1.0, 1.0)
    angle = 2.0 * np.arccos(w)
    s = np.sqrt(np.maximum(1.0 - w * w, 0.0))
    scale = np.where(s > 1e-8, angle / np.maximum(s, 1e-12), 2.0)
    return q[..., 1:] * scale[..., None]


def axis_angle_to_quat(v: np.ndarray) -> np.ndarray:
    """Axis-angle vector(s) → wxyz quaternion(s)."""
    v = np.asarray(v, dtype=np.float64)
    angle = np.linalg.norm(v, axis=-1, keepdims=True)
    half = angle / 2.0
    axis = np.where(angle > 1e-12, v / np.maximum(angle, 1e-12), 0.0)
    return canonical_quat(np.concatenate([np.cos(half), axis * np.sin(half)], axis=-1))


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """wxyz quaternion(s) → rotation matrices (..., 3, 3)."""
    w, x, y, z = np.moveaxis(canonical_quat(q), -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def quat_to_rot6d(q: np.ndarray) -> np.ndarray:
    """wxyz quaternion(s) → the continuous 6-D rotation representation (first two matrix columns)."""
    m = quat_to_matrix(q)
    return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)
