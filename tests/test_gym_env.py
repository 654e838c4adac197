"""The built-in tasks as gymnasium environments: registration, spaces, the 5-tuple, and the same first
observation as the benchmark's own rollout loop for the same seed and shift."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("robosuite")

import sim  # noqa: E402,F401  (registers the ids)
from r2a_core.errors import R2AInputError  # noqa: E402
from sim.gym_env import ENV_IDS, parse_shift  # noqa: E402

SEED = 100003


@pytest.fixture(scope="module")
def stack_env():
    env = gym.make("r2a/Stack-v0", shift="camera:2", seed=SEED, image_size=32)
    yield env
    env.close()


def test_every_task_is_registered_on_import():
    assert set(ENV_IDS.values()) <= set(gym.registry)
    builtin = {"Lift": "r2a/Lift-v0", "Stack": "r2a/Stack-v0", "PickPlaceCan": "r2a/PickPlaceCan-v0",
               "StackThree": "r2a/StackThree-v0"}
    assert {task: ENV_IDS[task] for task in builtin} == builtin
    assert ENV_IDS["libero_spatial/0"] == "r2a/libero_spatial-0-v0" and len(ENV_IDS) == len(builtin) + 20


def test_spaces_reset_and_the_standard_step_tuple(stack_env):
    env = stack_env
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (7,), np.float32)
    assert set(env.observation_space.spaces) == {"images/agentview", "images/wrist", "state/ee_pos",
                                                 "state/ee_quat", "state/gripper", "state/joint_pos",
                                                 "state/step", "prompt"}
    obs, info = env.reset()
    assert info["seed"] == SEED and info["shift_params"]["factor"] == "camera" and info["steps"] == 0
    assert obs in env.observation_space and obs["prompt"] == "stack the red cube on the green cube"
    obs, reward, terminated, truncated, info = env.step(np.zeros(7, np.float32))
    assert obs in env.observation_space and obs["state/step"] == 1
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert list(info["stages"]) == ["reached", "grasped", "lifted", "stacked"] and info["success"] is False
    _, info = env.reset()
    assert info["seed"] == SEED + 1  # without a seed: the next one


def test_the_first_observation_matches_the_benchmark_loop(stack_env):
    from demos.rollout import run_episode
    from sim.envs.robosuite_env import SimConfig, SimEnv
    from sim.shifts import ShiftHooks

    gym_obs, _ = stack_env.reset(seed=SEED)
    seen = []

    class Still:
        def reset(self):
            pass

        def infer(self, obs):
            return {"actions": np.zeros((1, 7), np.float32)}

    bench_sim = SimEnv(SimConfig(task="Stack", image_size=32))
    try:
        run_episode(bench_sim, Still(), SEED, record=False, max_steps=1, hooks=ShiftHooks("camera", 2),
                    observer=lambda step: seen.append(step.obs))
    finally:
        bench_sim.close()
    (bench_obs,) = seen
    assert set(gym_obs) == set(bench_obs)
    for key, value in bench_obs.items():
        np.testing.assert_array_equal(gym_obs[key], value, err_msg=key)
    clean_env = gym.make("r2a/Stack-v0", image_size=32)
    try:
        clean, _ = clean_env.reset(seed=SEED)
    finally:
        clean_env.close()
    assert not np.array_equal(clean["images/agentview"], gym_obs["images/agentview"])  # the shift is applied


def test_shift_strings():
    assert parse_shift(None) == (None, 0) and parse_shift("clean") == (None, 0)
    assert parse_shift("camera:2") == ("camera", 2)
    with pytest.raises(R2AInputError, match="unknown shift factor 'camra' \\(did you mean 'camera'\\?\\)"):
        parse_shift("camra:2")
    with pytest.raises(R2AInputError, match="expected 1, 2 or 3"):
        parse_shift("camera:7")
    with pytest.raises(R2AInputError, match="expected FACTOR:LEVEL"):
        parse_shift("camera")


def test_import_sim_without_gymnasium_neither_fails_nor_imports_it():
    code = ("import sys; sys.modules['gymnasium'] = None; import sim, sim.envs.tasks; "
            "assert 'sim.gym_env' not in sys.modules; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
