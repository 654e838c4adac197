"""Shared test fixtures: synthetic episodes and headless rendering defaults."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

from r2a_core.rotations import axis_angle_to_quat  # noqa: E402
from r2a_core.types import Episode, gripper_opening  # noqa: E402


def make_episode(length: int = 12, seed: int = 0, images: bool = True, task: str = "Lift",
                 size: int = 16) -> Episode:
    """A synthetic but internally consistent episode (random walk of the EE, a gripper close midway)."""
    rng = np.random.default_rng(seed)
    fingers = np.where(np.arange(length)[:, None] < length // 2, 0.04, 0.01) * np.array([1.0, -1.0])
    ep = Episode(
        task=task, instruction=f"do {task.lower()}",
        actions=rng.uniform(-1, 1, (length, 7)).astype(np.float32),
        ee_pos=np.cumsum(rng.normal(0, 0.01, (length, 3)), axis=0),
        ee_quat=axis_angle_to_quat(rng.normal(0, 0.3, (length, 3))),
        gripper=gripper_opening(fingers).astype(np.float32), gripper_qpos=fingers,
        joint_pos=rng.normal(0, 1, (length, 7)), sim_states=rng.normal(0, 1, (length, 20)),
        robot_states=rng.normal(0, 1, (length, 9)), success=bool(seed % 2 == 0), meta={"seed": seed})
    if images:
        ep.images = {cam: rng.integers(0, 256, (length, size, size, 3), dtype=np.uint8)
                     for cam in ("agentview", "wrist")}
    return ep


@pytest.fixture
def episodes() -> list[Episode]:
    return [make_episode(length=10 + i, seed=i) for i in range(3)]
