import numpy as np
import pytest

from r2a_core.errors import R2AInputError
from r2a_core.rotations import (
    axis_angle_to_quat,
    quat_to_axis_angle,
    quat_to_matrix,
    quat_to_rot6d,
    wxyz_to_xyzw,
    xyzw_to_wxyz,
)
from r2a_core.types import OSC_POSE_DELTA, ActionSpace, gripper_opening
from tests.conftest import make_episode


def test_axis_angle_round_trip_is_the_same_rotation():
    rng = np.random.default_rng(0)
    vectors = rng.normal(0, 1, (100, 3))
    vectors *= (np.pi * 0.99 / np.maximum(np.linalg.norm(vectors, axis=1), np.pi * 0.99))[:, None]
    back = quat_to_axis_angle(axis_angle_to_quat(vectors))
    np.testing.assert_allclose(back, vectors, atol=1e-9)


def test_quaternion_conventions_and_matrix():
    q = axis_angle_to_quat(np.array([0.0, 0.0, np.pi / 2]))  # 90° about z
    np.testing.assert_allclose(quat_to_matrix(q) @ np.array([1.0, 0, 0]), [0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(xyzw_to_wxyz(wxyz_to_xyzw(q)), q)
    r6 = quat_to_rot6d(q)
    assert r6.shape == (6,)
    np.testing.assert_allclose(r6[:3], [0, 1, 0], atol=1e-12)


def test_gripper_opening_is_normalized():
    np.testing.assert_allclose(gripper_opening(np.array([[0.04, -0.04], [0.0, 0.0], [0.02, -0.02]])),
                               [1.0, 0.0, 0.5])


def test_action_space_clip_never_emits_nan_or_out_of_bounds():
    out = OSC_POSE_DELTA.clip(np.array([np.nan, np.inf, -np.inf, 3.0, -3.0, 0.5, 0.2]))
    assert np.all(np.isfinite(out)) and out.max() <= 1.0 and out.min() >= -1.0
    assert ActionSpace.from_dict(OSC_POSE_DELTA.to_dict()) == OSC_POSE_DELTA


def test_episode_validate_names_the_field():
    ep = make_episode(8)
    ep.validate()
    ep.ee_pos = ep.ee_pos[:, :2]
    with pytest.raises(R2AInputError, match="ee_pos.*expected \\(T, 3\\)"):
        ep.validate()
    ep = make_episode(8)
    ep.images["wrist"] = ep.images["wrist"][:5]
    with pytest.raises(R2AInputError, match="images/wrist"):
        ep.validate()
