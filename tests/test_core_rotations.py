"""Rotation helpers (r2a_core.rotations): the one home of every conversion the retriever, the experts and the
shift factors use."""

from __future__ import annotations

import numpy as np
import pytest

from r2a_core import rotations as rot


def _random_rotations(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, 4))
    return rot.quat_to_matrix(q / np.linalg.norm(q, axis=1, keepdims=True))


def _angles(m: np.ndarray) -> np.ndarray:
    return np.arccos(np.clip((np.trace(m, axis1=-2, axis2=-1) - 1) / 2, -1, 1))


def test_values_are_the_ones_of_the_copies_they_replace():
    """Pinned from r2a/retrieval/motion.py's copies before they moved here (bit for bit)."""
    m = rot.axis_angle_to_matrix(np.array([0.3, -0.2, 0.5]))
    assert m.tolist() == [[0.8595338985586632, -0.497991537002922, -0.11491695393636675],
                          [0.43986763295823095, 0.8353156052067086, -0.3297943376922551],
                          [0.26022671404809444, 0.23292116428443663, 0.937032437284918]]
    assert rot.matrix_to_axis_angle(m).tolist() == [0.3, -0.19999999999999998, 0.49999999999999994]
    assert rot.matrix_to_axis_angle(rot.axis_angle_to_matrix(np.array([0.0, 0.0, 1e-8]))).tolist() == [0.0, 0.0, 1e-08]
    near_pi = rot.axis_angle_to_matrix(np.array([np.pi - 1e-4, 0.0, 0.0]))
    assert rot.matrix_to_axis_angle(near_pi).tolist() == [3.1414926535900554, 0.0, 0.0]
    assert rot.rot6d_to_matrix(np.array([1.0, 0.2, -0.1, 0.1, 0.9, 0.3])).tolist() == [
        [0.9759000729485331, -0.14974337706232888, 0.1587323805813319],
        [0.19518001458970663, 0.9242780860054097, -0.3280469198680859],
        [-0.09759000729485331, 0.35112240138752987, 0.9312299660771471]]


def test_axis_angle_round_trips_including_tiny_angles_and_half_turns():
    mats = _random_rotations(2000)
    extra = [rot.axis_angle_to_matrix(axis * angle) for axis in np.eye(3)
             for angle in (0.0, 1e-9, 1e-6, 1.0, np.pi - 1e-2, np.pi)]
    mats = np.concatenate([mats, np.array(extra)])
    back = rot.axis_angle_to_matrix(rot.matrix_to_axis_angle(mats))
    regular = _angles(mats) < np.pi - 1e-3
    assert np.abs(back[regular] - mats[regular]).max() < 1e-9
    # within 1e-3 rad of a half turn the axis comes from the symmetric part: right up to the angle's last 1e-3
    assert np.abs(back[~regular] - mats[~regular]).max() < 5e-3
    assert np.allclose(np.linalg.norm(rot.matrix_to_axis_angle(mats), axis=-1), _angles(mats), atol=1e-6)
    # one matrix or a batch: the same numbers
    assert np.array_equal(rot.matrix_to_axis_angle(mats[7]), rot.matrix_to_axis_angle(mats)[7])


def test_rotation_about_rot_z_and_yaw_agree_with_axis_angle():
    rng = np.random.default_rng(1)
    for axis, angle in zip(rng.normal(size=(50, 3)), rng.uniform(-4, 4, 50)):
        expected = rot.axis_angle_to_matrix(axis / np.linalg.norm(axis) * angle)
        assert np.allclose(rot.rotation_about(3.0 * axis, angle), expected, atol=1e-12)
    for yaw in rng.uniform(-3.1, 3.1, 50):
        assert np.allclose(rot.rot_z(yaw), rot.rotation_about(np.array([0.0, 0.0, 1.0]), yaw), atol=1e-12)
        assert rot.matrix_to_yaw(rot.rot_z(yaw)) == pytest.approx(yaw, abs=1e-12)
        q = rot.axis_angle_to_quat(np.array([0.0, 0.0, yaw]))
        assert float(rot.quat_to_yaw(q)) == pytest.approx(yaw, abs=1e-12)
    # a tilted hand keeps the heading of its x axis
    tilted = rot.rot_z(0.7) @ rot.rotation_about(np.array([0.0, 1.0, 0.0]), 0.3)
    assert float(rot.matrix_to_yaw(tilted)) == pytest.approx(0.7, abs=1e-12)


def test_matrix_to_quat_inverts_quat_to_matrix_up_to_sign():
    mats = _random_rotations(2000, seed=2)
    q = rot.matrix_to_quat(mats)
    assert np.allclose(np.linalg.norm(q, axis=-1), 1.0, atol=1e-12)
    assert np.abs(rot.quat_to_matrix(q) - mats).max() < 1e-12
    assert np.array_equal(rot.matrix_to_quat(mats[3]), q[3])


def test_matrix_and_quat_conversions_match_mujoco():
    """The shift factors used MuJoCo's ``mju_mat2Quat``/``mju_quat2Mat``: the same rotations, mat2Quat bit for bit."""
    mujoco = pytest.importorskip("mujoco")
    mats = _random_rotations(3000, seed=3)
    mats = np.concatenate([mats, mats.astype(np.float32).astype(np.float64),  # not quite orthonormal
                           np.array([np.eye(3), np.diag([1.0, -1, -1]), np.diag([-1.0, 1, -1]),
                                     np.diag([-1.0, -1, 1])])])
    expected = np.zeros((len(mats), 4))
    for i, m in enumerate(mats):
        mujoco.mju_mat2Quat(expected[i], m.reshape(-1))
    assert np.array_equal(rot.matrix_to_quat(mats), expected)
    quats = expected[:3000]
    mj_mats = np.zeros((len(quats), 9))
    for i, q in enumerate(quats):
        mujoco.mju_quat2Mat(mj_mats[i], q)
    assert np.abs(rot.quat_to_matrix(quats) - mj_mats.reshape(-1, 3, 3)).max() < 1e-15


def test_rot6d_and_step_rotations():
    mats = _random_rotations(500, seed=4)
    assert np.allclose(rot.rot6d_to_matrix(rot.matrix_to_rot6d(mats)), mats, atol=1e-12)
    q = rot.matrix_to_quat(mats)
    assert np.array_equal(rot.quat_to_rot6d(q), rot.matrix_to_rot6d(rot.quat_to_matrix(q)))
    # steps of a constant rotation about z: relative rotations R_j = rot_z((j + 1) * 0.1), each step 0.1 about z
    rel = np.stack([rot.rot_z((j + 1) * 0.1) for j in range(6)])
    steps = rot.step_rotations(rel)
    assert np.allclose(steps, np.tile([0.0, 0.0, 0.1], (6, 1)), atol=1e-12)
    assert rot.step_rotations(np.stack([rel, rel])).shape == (2, 6, 3)
