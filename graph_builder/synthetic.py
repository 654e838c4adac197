"""Synthetic pick/place-like demonstrations with known structure, for tests and the scale benchmark.

Each demo follows a task's waypoint plan (reach, grasp, lift, place, release, retreat) with smooth motion, a
random object/goal placement and a top-down gripper yawing toward the object. Gripper closes stop at a random
object width (0.4–0.7), as real grasps do. Actions are 7-D OSC_POSE-like deltas (gripper +1 close, −1 open).
"""

from __future__ import annotations

import math

import numpy as np

from r2a_core.types import OSC_POSE_DELTA, Episode

#: task → its instruction
SYNTHETIC_TASKS: dict[str, str] = {
    "lift": "lift the cube",
    "pick_place": "put the can in the bin",
    "stack": "stack the red cube on the green cube",
    "push": "push the block to the goal",
}

_TABLE_Z = 0.83


def synthetic_episodes(num_frames: int, seed: int = 0, num_tasks: int = 4, mean_length: int = 200,
                       failure_rate: float = 0.0) -> list[Episode]:
    """Demos totalling exactly ``num_frames`` frames (lengths ±25 % around ``mean_length``, at least 20)."""
    rng = np.random.default_rng(seed)
    tasks = list(SYNTHETIC_TASKS)[: max(1, min(num_tasks, len(SYNTHETIC_TASKS)))]
    episodes: list[Episode] = []
    remaining = int(num_frames)
    while remaining > 0:
        length = int(rng.integers(int(mean_length * 0.75), int(mean_length * 1.25) + 1))
        if remaining - length < 20:
            length = remaining
        task = tasks[len(episodes) % len(tasks)]
        ep = synthetic_demo(rng, task, max(length, 1))
        ep.success = bool(rng.random() >= failure_rate)
        ep.meta.update(demo_id=f"synthetic/{len(episodes)}", source="synthetic")
        episodes.append(ep)
        remaining -= len(ep)
    return episodes


def synthetic_demo(rng: np.random.Generator, task: str, length: int) -> Episode:
    """One demo of ``task`` with exactly ``length`` frames."""
    home = np.array([0.0, 0.0, 1.0]) + rng.normal(0.0, 0.03, 3)
    obj = np.array([rng.uniform(-0.12, 0.12), rng.uniform(-0.12, 0.12), _TABLE_Z])
    goal = np.array([rng.uniform(-0.12, 0.12), rng.uniform(0.1, 0.2), _TABLE_Z + 0.05])
    yaw0, yaw = rng.normal(0.0, 0.1), rng.uniform(-math.pi / 4, math.pi / 4)
    width = rng.uniform(0.4, 0.7)
    legs = _plan(task, home, obj, goal, yaw, width)
    pos, yaws, grip, closed = _rollout(legs, (home, yaw0, 1.0), length)
    pos = pos + rng.normal(0.0, 0.0005, pos.shape)
    quat = np.stack([np.zeros_like(yaws), np.cos(yaws / 2), np.sin(yaws / 2), np.zeros_like(yaws)], axis=1)
    actions = np.zeros((length, 7), dtype=np.float32)
    actions[:-1, :3] = np.clip(np.diff(pos, axis=0) / 0.05, -1, 1)
    actions[:-1, 5] = np.clip(np.diff(yaws) / 0.5, -1, 1)
    actions[:, 6] = np.where(closed, 1.0, -1.0)
    return Episode(task=task, instruction=SYNTHETIC_TASKS[task], actions=actions, ee_pos=pos, ee_quat=quat,
                   gripper=grip, meta={"action_space": OSC_POSE_DELTA.to_dict()})


def _plan(task: str, home, obj, goal, yaw, width) -> list[tuple[float, np.ndarray, float, float]]:
    """Legs as (relative duration, target position, target yaw, target gripper opening)."""
    up = np.array([0.0, 0.0, 0.12])
    grasp = [(3.0, obj + up, yaw, 1.0), (1.5, obj, yaw, 1.0), (0.6, obj, yaw, width)]
    if task == "lift":
        return grasp + [(2.0, obj + 2 * up, yaw, width), (1.0, obj + 2 * up, yaw, width)]
    if task == "push":
        behind = obj - np.array([0.0, 0.08, 0.0])
        return [(0.6, home, yaw, 0.0), (3.0, behind + up, 0.0, 0.0), (1.0, behind, 0.0, 0.0),
                (3.0, goal - up / 2, 0.0, 0.0)]
    place = goal if task == "pick_place" else goal + np.array([0.0, 0.0, 0.05])
    return grasp + [(1.5, obj + up, yaw, width), (3.0, place + up, 0.0, width), (1.0, place, 0.0, width),
                    (0.6, place, 0.0, 1.0), (1.5, place + up, 0.0, 1.0)]


def _rollout(legs, start, length: int):
    """Smooth-step interpolation through the legs → positions, yaws, openings and the closed flag per frame."""
    weights = np.array([w for w, *_ in legs])
    steps = np.maximum(np.floor(weights / weights.sum() * (length - 1)).astype(int), 0)
    steps[int(np.argmax(weights))] += (length - 1) - steps.sum()
    pos, yaw, grip, closed = [start[0][None]], [np.array([start[1]])], [np.array([start[2]])], [np.array([False])]
    prev = start
    for (_, p, y, g), n in zip(legs, steps):
        if n <= 0:
            continue
        s = np.arange(1, n + 1) / n
        s = s * s * (3 - 2 * s)
        pos.append(prev[0] + s[:, None] * (p - prev[0]))
        yaw.append(prev[1] + s * (y - prev[1]))
        grip.append(prev[2] + s * (g - prev[2]))
        closed.append(np.full(n, g < 1.0))
        prev = (p, y, g)
    closed_arr = np.concatenate(closed)
    closed_arr[:-1] = closed_arr[1:]  # the command at t produces the state at t+1
    return np.concatenate(pos), np.concatenate(yaw), np.concatenate(grip), closed_arr


def line_episode(length: int, task: str = "reach", instruction: str = "reach the target",
                 start: tuple[float, float, float] = (0.0, 0.0, 1.0), step: tuple[float, float, float] = (0.01, 0, 0),
                 gripper: np.ndarray | None = None, action_dim: int = 7, success: bool = True) -> Episode:
    """A straight-line demo at constant orientation with hand-set gripper openings (for exact unit checks)."""
    t = np.arange(length, dtype=np.float64)[:, None]
    pos = np.asarray(start, dtype=np.float64) + t * np.asarray(step, dtype=np.float64)
    quat = np.tile([1.0, 0.0, 0.0, 0.0], (length, 1))
    actions = np.tile(np.arange(action_dim, dtype=np.float32), (length, 1)) + t.astype(np.float32)
    grip = np.ones(length) if gripper is None else np.asarray(gripper, dtype=np.float64)
    return Episode(task=task, instruction=instruction, actions=actions, ee_pos=pos, ee_quat=quat, gripper=grip,
                   success=success)
