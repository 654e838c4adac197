"""The rollout loop, read top to bottom: reset, observe, act, step, record, stop.

Shared by demonstration collection and the benchmark so both execute policies identically. A policy's chunk
is executed ``n_action_steps`` steps at a time (all of it by default) before the policy is queried again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from r2a_core.policy import Policy
from r2a_core.types import CAMERAS, Episode, gripper_opening, image_key

log = logging.getLogger(__name__)


@dataclass
class EpisodeRecorder:
    """Accumulates per-step arrays; ``to_episode`` stacks them."""

    cameras: tuple[str, ...]
    rows: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(self, **arrays: np.ndarray) -> None:
        for key, value in arrays.items():
            self.rows.setdefault(key, []).append(np.asarray(value))

    def to_episode(self, task: str, instruction: str, success: bool, meta: dict[str, Any]) -> Episode:
        stacked = {k: np.stack(v) for k, v in self.rows.items()}
        return Episode(
            task=task, instruction=instruction, actions=stacked["actions"].astype(np.float32),
            ee_pos=stacked["ee_pos"], ee_quat=stacked["ee_quat"],
            gripper=gripper_opening(stacked["gripper_qpos"]).astype(np.float32),
            joint_pos=stacked["joint_pos"], gripper_qpos=stacked["gripper_qpos"],
            images={cam: stacked[f"image_{cam}"] for cam in self.cameras},
            sim_states=stacked["states"], robot_states=stacked["robot_states"], success=success, meta=meta)


def run_episode(sim, policy: Policy, seed: int, record: bool = True, n_action_steps: int | None = None,
                max_steps: int | None = None) -> tuple[Episode | None, dict[str, Any]]:
    """Roll ``policy`` out in ``sim`` from ``reset(seed)`` until success or the horizon.

    Returns the recorded episode (None when ``record`` is False) and a summary: success, steps, latched
    stages, the fingerprint of the initial state.
    """
    obs = sim.reset(seed)
    policy.reset()
    fingerprint = sim.fingerprint()
    recorder = EpisodeRecorder(tuple(c for c in CAMERAS if image_key(c) in obs))
    stages = dict.fromkeys(sim.task.stages, False)
    chunk: list[np.ndarray] = []
    success, steps, limit = False, 0, max_steps or sim.horizon
    while steps < limit and not success:
        if not chunk:
            actions = np.asarray(policy.infer(obs)["actions"], dtype=np.float32).reshape(-1, sim.action_space.dim)
            chunk = list(actions[: n_action_steps or len(actions)])
        action = chunk.pop(0)
        if record:
            _record_step(recorder, sim, obs, action)
        obs = sim.step(action)
        steps += 1
        stages = {k: v or now for (k, v), now in zip(stages.items(), sim.stage_flags().values())}
        success = sim.success()
    summary = {"success": success, "steps": steps, "stages": stages, "seed": seed, "fingerprint": fingerprint}
    if not record:
        return None, summary
    meta = {"seed": seed, "fingerprint": fingerprint, "stages": stages, "steps": steps}
    return recorder.to_episode(sim.task.name, sim.instruction, success, meta), summary


def _record_step(recorder: EpisodeRecorder, sim, obs: dict[str, Any], action: np.ndarray) -> None:
    images = {f"image_{cam}": obs[image_key(cam)] for cam in recorder.cameras}
    recorder.add(actions=action, ee_pos=sim.ee_pos(), ee_quat=sim.ee_quat(), gripper_qpos=sim.gripper_qpos(),
                 joint_pos=sim.joint_pos(), states=sim.get_state(), robot_states=sim.robot_state(), **images)
