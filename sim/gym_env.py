"""The built-in tasks as gymnasium environments, for users who already have a gym loop:
``gymnasium.make("r2a/Stack-v0", shift="camera:2", seed=100000)``.

One id per task (``r2a/Lift-v0``, ``r2a/Stack-v0``, ``r2a/PickPlaceCan-v0``, ``r2a/StackThree-v0``), registered
when ``sim`` is imported and gymnasium is installed (gymnasium 1.x has no plugin entry points any more);
``gymnasium.make("sim.gym_env:r2a/Stack-v0")`` imports this module itself. gymnasium is optional:
``pip install 'r2a[gym]'``.

The environment is the benchmark's simulator and shift (sim.envs, sim.shifts) stepped the way
:func:`demos.rollout.run_episode` steps it, so a seed gives the observation the benchmark's policy sees
(the tests check the first one): observations are the r2a observation dict (``images/agentview``,
``images/wrist``, ``state/…``, ``state/step``, ``prompt``) with the shift applied, actions the 7-D OSC_POSE
deltas in [−1, 1]. ``reset(seed=)`` seeds the scene; without a seed the first reset uses the ``seed`` given to
``make`` (else a random one) and each later reset the previous seed + 1. An episode terminates on success
(reward 1, otherwise 0) and is truncated at the task's horizon; ``info`` carries the latched ``stages``,
``success`` and ``steps`` (and, after reset, the ``seed``, the state ``fingerprint`` and the ``shift_params``).
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np

try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError as err:  # pragma: no cover - depends on the install
    raise ImportError("the gymnasium environments need gymnasium: pip install 'r2a[gym]'") from err

from r2a_core.errors import R2AInputError
from r2a_core.types import (
    CAMERAS,
    PROMPT,
    STATE_EE_POS,
    STATE_EE_QUAT,
    STATE_GRIPPER,
    STATE_JOINT_POS,
    STATE_STEP,
    image_key,
)
from sim.envs.tasks import TASKS, get_task

#: gymnasium ids by task; a LIBERO task's "/" becomes "-" (``libero_spatial/0`` → ``r2a/libero_spatial-0-v0``)
ENV_IDS = {task: f"r2a/{task.replace('/', '-')}-v0" for task in TASKS}
#: characters an instruction may hold: printable ASCII, Latin-1 and common punctuation (language shifts)
PROMPT_CHARSET = "".join(sorted(set(string.printable) | {chr(c) for c in range(0xA0, 0x180)}
                                | {chr(c) for c in range(0x2010, 0x2027)}))


def register_envs() -> list[str]:
    """Register every task's id with gymnasium (idempotent); return the ids."""
    for task, env_id in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="sim.gym_env:R2AGymEnv", kwargs={"task": task})
    return list(ENV_IDS.values())


def parse_shift(shift: str | None) -> tuple[str | None, int]:
    """``"camera:2"`` → ``("camera", 2)``; None, ``""`` or ``"clean"`` → no shift."""
    from sim.shifts import get_factor
    from sim.shifts.base import check_level

    if shift is None or str(shift).strip() in ("", "clean"):
        return None, 0
    name, sep, level = str(shift).partition(":")
    if not sep or not level.strip().isdigit():
        raise R2AInputError(f"shift '{shift}': expected FACTOR:LEVEL, e.g. camera:2")
    get_factor(name.strip())
    return name.strip(), check_level(int(level))


class R2AGymEnv(gym.Env):
    """One built-in task, optionally under one shift factor at one level."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, task: str = "Lift", shift: str | None = None, seed: int | None = None,
                 image_size: int = 128, cameras: tuple[str, ...] = CAMERAS, horizon: int | None = None,
                 render_mode: str | None = None) -> None:
        from sim.envs.backends import make_sim
        from sim.envs.robosuite_env import SimConfig
        from sim.shifts import ShiftHooks

        if render_mode not in (None, "rgb_array"):
            raise R2AInputError(f"render_mode '{render_mode}': only 'rgb_array' is supported")
        self.task = get_task(task)
        self.factor, self.level = parse_shift(shift)
        self.render_mode = render_mode
        self.sim = make_sim(SimConfig(task=self.task.name, image_size=image_size, cameras=tuple(cameras),
                                      horizon=horizon))
        self._hooks = ShiftHooks(self.factor, self.level)
        self._first_seed, self._seed = seed, None
        self._steps, self._stages = 0, dict.fromkeys(self.task.stages, False)
        self._obs: dict[str, Any] = {}
        self.action_space = spaces.Box(-1.0, 1.0, (self.sim.action_space.dim,), np.float32)
        self.observation_space = self._observation_space(image_size, tuple(cameras))

    def _observation_space(self, size: int, cameras: tuple[str, ...]) -> spaces.Dict:
        unbounded = {STATE_EE_POS: 3, STATE_JOINT_POS: 7}
        fields: dict[str, spaces.Space] = {key: spaces.Box(-np.inf, np.inf, (n,), np.float32)
                                           for key, n in unbounded.items()}
        fields[STATE_EE_QUAT] = spaces.Box(-1.0, 1.0, (4,), np.float32)
        fields[STATE_GRIPPER] = spaces.Box(0.0, 1.0, (), np.float32)
        fields[STATE_STEP] = spaces.Discrete(self.sim.horizon + 1)
        fields[PROMPT] = spaces.Text(max_length=512, min_length=1, charset=PROMPT_CHARSET)
        for cam in cameras:
            fields[image_key(cam)] = spaces.Box(0, 255, (size, size, 3), np.uint8)
        return spaces.Dict(fields)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._hooks.close()  # the last episode's shift edits, before the scene resets
        if seed is None:
            seed = (self._seed + 1 if self._seed is not None else self._first_seed
                    if self._first_seed is not None else int(self.np_random.integers(0, 2**31 - 1)))
        self._seed = int(seed)
        obs = self.sim.reset(self._seed)
        fingerprint = self.sim.fingerprint()
        obs = self._hooks.after_reset(self.sim) or obs
        self._steps, self._stages = 0, dict.fromkeys(self.task.stages, False)
        self._obs = self._seen(obs)
        info = {"seed": self._seed, "fingerprint": fingerprint, "shift_params": self._hooks.params,
                "stages": dict(self._stages), "success": False, "steps": 0}
        return self._obs, info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self.sim.seed is None:
            raise R2AInputError("call reset() before step()")
        action = self.sim.action_space.clip(np.asarray(action, np.float32))
        obs = self.sim.step(action)
        self._steps += 1
        self._hooks.after_step(self.sim, action)
        flags, success = self.sim.evaluate()
        self._stages = {k: v or now for (k, v), now in zip(self._stages.items(), flags.values())}
        self._obs = self._seen(obs)
        truncated = self._steps >= self.sim.horizon and not success
        info = {"stages": dict(self._stages), "success": bool(success), "steps": self._steps}
        return self._obs, float(success), bool(success), bool(truncated), info

    def _seen(self, obs: dict[str, Any]) -> dict[str, Any]:
        """What the benchmark's policy would see now: the step count added, the shift's transform applied (the
        gripper opening as a 0-d array rather than a numpy scalar, as gymnasium's Box wants)."""
        seen = self._hooks.transform({**obs, STATE_STEP: self._steps})
        return {**seen, STATE_GRIPPER: np.asarray(seen[STATE_GRIPPER], np.float32)}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        key = next((image_key(c) for c in self.sim.config.cameras), None)
        return None if key is None else np.asarray(self._obs.get(key))

    def close(self) -> None:
        self._hooks.close()
        self.sim.close()
