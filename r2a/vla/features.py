"""Feature definitions shared by training and inference, so the two can never disagree."""

from __future__ import annotations

import numpy as np

from r2a_core.rotations import quat_to_rot6d

PROPRIO_DIM = 10
#: elapsed control steps are divided by this before entering the network
TIME_SCALE = 200.0
#: the auxiliary head predicts object offsets in decimetres (metres × this), a well-scaled regression target
AUX_SCALE = 10.0


def proprio_vector(ee_pos: np.ndarray, ee_quat: np.ndarray, gripper: np.ndarray) -> np.ndarray:
    """EE position (3), EE rotation as 6-D (6), gripper opening (1) → ``(..., 10)`` float32."""
    gripper = np.asarray(gripper, np.float64)[..., None]
    return np.concatenate([np.asarray(ee_pos, np.float64), quat_to_rot6d(np.asarray(ee_quat, np.float64)), gripper],
                          axis=-1).astype(np.float32)


def time_feature(step: np.ndarray | int) -> np.ndarray:
    return np.asarray(np.minimum(np.asarray(step, np.float64) / TIME_SCALE, 2.0), np.float32)
