"""Rotation conversions in one place (quaternions are wxyz, see :mod:`r2a_core.types`).

Every function takes batches (``(..., 4)`` quaternions, ``(..., 3, 3)`` matrices, ``(..., 3)`` axis-angle
vectors) unless its docstring says otherwise; numpy only, so run-time code, experts and shift factors share them.
"""

from __future__ import annotations

import numpy as np

# -------------------------------------------------------------------------------------------- quaternions

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


def matrix_to_quat(m: np.ndarray) -> np.ndarray:
    """Rotation matrices ``(..., 3, 3)`` → wxyz quaternions, bit for bit MuJoCo's ``mju_mat2Quat``.

    The largest of the four components is computed from the diagonal and the others from it; the sign is
    MuJoCo's (w ≥ 0 only when the trace is positive), and the result is normalized as ``mju_normalize4`` does.
    """
    m = np.asarray(m, dtype=np.float64)
    m00, m01, m02 = m[..., 0, 0], m[..., 0, 1], m[..., 0, 2]
    m10, m11, m12 = m[..., 1, 0], m[..., 1, 1], m[..., 1, 2]
    m20, m21, m22 = m[..., 2, 0], m[..., 2, 1], m[..., 2, 2]
    with np.errstate(divide="ignore", invalid="ignore"):  # each branch is computed everywhere, used where it is taken
        w = 0.5 * np.sqrt(np.maximum(1 + m00 + m11 + m22, 0.0))
        by_w = np.stack([w, 0.25 * (m21 - m12) / w, 0.25 * (m02 - m20) / w, 0.25 * (m10 - m01) / w], -1)
        x = 0.5 * np.sqrt(np.maximum(1 + m00 - m11 - m22, 0.0))
        by_x = np.stack([0.25 * (m21 - m12) / x, x, 0.25 * (m01 + m10) / x, 0.25 * (m02 + m20) / x], -1)
        y = 0.5 * np.sqrt(np.maximum(1 - m00 + m11 - m22, 0.0))
        by_y = np.stack([0.25 * (m02 - m20) / y, 0.25 * (m01 + m10) / y, y, 0.25 * (m12 + m21) / y], -1)
        z = 0.5 * np.sqrt(np.maximum(1 - m00 - m11 + m22, 0.0))
        by_z = np.stack([0.25 * (m10 - m01) / z, 0.25 * (m02 + m20) / z, 0.25 * (m12 + m21) / z, z], -1)
    q = np.where((m00 + m11 + m22 > 0)[..., None], by_w,
                 np.where(((m00 > m11) & (m00 > m22))[..., None], by_x, np.where((m11 > m22)[..., None], by_y, by_z)))
    norm = np.sqrt(q[..., 0] * q[..., 0] + q[..., 1] * q[..., 1] + q[..., 2] * q[..., 2] + q[..., 3] * q[..., 3])
    norm = norm[..., None]
    q = np.where(np.abs(norm - 1.0) > 1e-15, q * (1.0 / np.where(norm > 0, norm, 1.0)), q)
    return np.where(norm < 1e-15, np.array([1.0, 0.0, 0.0, 0.0]), q)


# ------------------------------------------------------------------------------- matrices and axis-angle

def _rodrigues(axis: np.ndarray, angle: np.ndarray | float) -> np.ndarray:
    """Rotation about unit ``axis`` (..., 3) by ``angle`` (broadcast against (..., 3, 3))."""
    kx, ky, kz = axis[..., 0], axis[..., 1], axis[..., 2]
    zero = np.zeros_like(kx)
    cross = np.stack([np.stack([zero, -kz, ky], -1), np.stack([kz, zero, -kx], -1),
                      np.stack([-ky, kx, zero], -1)], -2)
    return np.eye(3) + np.sin(angle) * cross + (1.0 - np.cos(angle)) * (cross @ cross)


def axis_angle_to_matrix(v: np.ndarray) -> np.ndarray:
    """Axis-angle vectors ``(..., 3)`` → rotation matrices (Rodrigues)."""
    v = np.asarray(v, dtype=np.float64)
    angle = np.linalg.norm(v, axis=-1, keepdims=True)
    return _rodrigues(v / np.maximum(angle, 1e-12), angle[..., None])


def rotation_about(axis: np.ndarray, angle: float) -> np.ndarray:
    """3×3 rotation matrix about one ``axis`` (any length) by ``angle`` radians (Rodrigues)."""
    axis = np.asarray(axis, dtype=np.float64)
    return _rodrigues(axis / np.linalg.norm(axis), angle)


def rot_z(yaw: float) -> np.ndarray:
    """3×3 rotation about the world z axis by ``yaw`` radians."""
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def matrix_to_axis_angle(m: np.ndarray) -> np.ndarray:
    """Rotation matrices ``(..., 3, 3)`` → axis-angle vectors ``(..., 3)`` (angle in [0, π])."""
    m = np.asarray(m, dtype=np.float64)
    cos = np.clip((np.trace(m, axis1=-2, axis2=-1) - 1.0) / 2.0, -1.0, 1.0)
    angle = np.arccos(cos)
    axis = np.stack([m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]], -1)
    sin = np.sin(angle)
    small = sin < 1e-6
    scale = np.where(small, 0.5, angle / (2.0 * np.where(small, 1.0, sin)))
    vec = axis * scale[..., None]
    # near π the antisymmetric part vanishes: take the axis from the symmetric part instead
    near_pi = (angle > np.pi - 1e-3)
    if np.any(near_pi):
        sym = (m[near_pi] + np.eye(3)) / 2.0
        col = np.argmax(np.diagonal(sym, axis1=-2, axis2=-1), axis=-1)
        ax = sym[np.arange(len(col)), :, col]
        ax = ax / np.maximum(np.linalg.norm(ax, axis=-1, keepdims=True), 1e-12)
        vec[near_pi] = ax * angle[near_pi][..., None]
    return vec


def step_rotations(rel: np.ndarray) -> np.ndarray:
    """Per-step world-frame rotation vectors from relative rotations ``R_j R_0ᵀ`` ``(..., T, 3, 3)``:
    step ``j`` is ``R_j R_{j-1}ᵀ`` (with ``R_{-1} = I``)."""
    prev = np.concatenate([np.broadcast_to(np.eye(3), rel[..., :1, :, :].shape), rel[..., :-1, :, :]], axis=-3)
    return matrix_to_axis_angle(rel @ np.swapaxes(prev, -1, -2))


def matrix_to_yaw(m: np.ndarray) -> np.ndarray:
    """Heading of rotation matrices ``(..., 3, 3)`` about world z: the angle of their x axis in the xy plane."""
    m = np.asarray(m, dtype=np.float64)
    return np.arctan2(m[..., 1, 0], m[..., 0, 0])


def quat_to_yaw(q: np.ndarray) -> np.ndarray:
    """Heading of wxyz quaternion(s) about world z (:func:`matrix_to_yaw` of their matrix)."""
    return matrix_to_yaw(quat_to_matrix(q))


# ------------------------------------------------------------------------------------------------- rot6d

def matrix_to_rot6d(m: np.ndarray) -> np.ndarray:
    """Rotation matrices → the continuous 6-D rotation representation (first two columns, ``(..., 6)``)."""
    return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)


def rot6d_to_matrix(r6: np.ndarray) -> np.ndarray:
    """rot6d (first two columns, ``(..., 6)``) → rotation matrices ``(..., 3, 3)`` by Gram-Schmidt."""
    r6 = np.asarray(r6, dtype=np.float64)
    a, b = r6[..., :3], r6[..., 3:]
    x = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
    b = b - np.sum(x * b, axis=-1, keepdims=True) * x
    y = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    z = np.cross(x, y)
    return np.stack([x, y, z], axis=-1)


def quat_to_rot6d(q: np.ndarray) -> np.ndarray:
    """wxyz quaternion(s) → the continuous 6-D rotation representation (first two matrix columns)."""
    return matrix_to_rot6d(quat_to_matrix(q))


__all__ = ["axis_angle_to_matrix", "axis_angle_to_quat", "canonical_quat", "matrix_to_axis_angle", "matrix_to_quat",
           "matrix_to_rot6d", "matrix_to_yaw", "quat_to_axis_angle", "quat_to_matrix", "quat_to_rot6d", "quat_to_yaw",
           "rot6d_to_matrix", "rot_z", "rotation_about", "step_rotations", "wxyz_to_xyzw", "xyzw_to_wxyz"]
