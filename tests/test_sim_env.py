"""The robosuite backend, for real: low-resolution cameras, determinism, state access, stage predicates."""

import functools
import subprocess
import sys

import numpy as np
import pytest

from r2a_core.errors import R2AInputError
from sim.envs.robosuite_env import SimConfig, SimEnv
from sim.envs.tasks import BUILTIN_TASKS, get_task

pytest.importorskip("robosuite")


@pytest.fixture(scope="module")
def lift():
    sim = SimEnv(SimConfig(task="Lift", image_size=32))
    yield sim
    sim.close()


def test_observation_keys_and_shapes(lift):
    obs = lift.reset(0)
    assert obs["images/agentview"].shape == (32, 32, 3) and obs["images/agentview"].dtype == np.uint8
    assert obs["images/wrist"].shape == (32, 32, 3)
    assert obs["state/ee_pos"].shape == (3,) and obs["state/ee_quat"].shape == (4,)
    assert 0.0 <= float(obs["state/gripper"]) <= 1.0
    assert obs["prompt"] == "pick up the red cube"
    np.testing.assert_allclose(np.linalg.norm(obs["state/ee_quat"]), 1.0, atol=1e-5)


def assert_culling_changes_no_pixel(sim, seeds: tuple[int, ...], steps: int) -> None:
    """Every camera's picture with frustum culling is the full render's, bit for bit, along random motions; and
    culling did leave geoms out (the wrist camera sees a small part of any scene)."""
    from sim.envs import rendering

    ctx = sim.render_context
    assert isinstance(ctx.render, functools.partial), "shadows and reflections are off: culling should be on"
    culled: list[int] = []
    count = rendering.cull_outside_frustum

    def counting(*args, **kwargs):
        culled.append(count(*args, **kwargs))
        return culled[-1]

    rng = np.random.default_rng(0)
    try:
        rendering.cull_outside_frustum = counting
        for seed in seeds:
            sim.reset(seed)
            for _ in range(steps):
                sim.step(rng.uniform(-1.0, 1.0, 7))
                rendering.set_frustum_culling(ctx, True)
                fast = sim.refresh_observation()
                rendering.set_frustum_culling(ctx, False)
                full = sim.refresh_observation()
                for cam in sim.config.cameras:
                    assert np.array_equal(fast[f"images/{cam}"], full[f"images/{cam}"]), (seed, cam)
    finally:
        rendering.cull_outside_frustum = count
        rendering.set_frustum_culling(ctx, True)
    assert max(culled) > 0


def test_frustum_culling_changes_no_pixel(lift):
    assert_culling_changes_no_pixel(lift, seeds=(0, 100000), steps=6)


def test_shadows_turn_culling_off():
    """A geom outside the view can cast a shadow into it: no culling when shadows (or reflections) are on."""
    sim = SimEnv(SimConfig(task="Lift", image_size=16, shadows=True))
    try:
        assert "render" not in sim.render_context.__dict__
    finally:
        sim.close()


def test_cameras_are_distinct_and_images_follow_the_scene(lift):
    """Guards the GL-context corruption bug (docs/architecture.md, "Platform notes"): two cameras must differ,
    images must change."""
    obs = lift.reset(0)
    assert not np.array_equal(obs["images/agentview"], obs["images/wrist"])
    before = obs["images/agentview"].copy()
    for _ in range(10):
        obs = lift.step(np.array([0.0, 0.0, 1.0, 0, 0, 0, -1.0]))
    assert np.abs(obs["images/agentview"].astype(int) - before).mean() > 0.1
    obs = lift.reset(0)
    np.testing.assert_array_equal(obs["images/agentview"], before)


def test_same_seed_same_state_different_seed_different_state(lift):
    lift.reset(3)
    a = lift.fingerprint()
    lift.reset(4)
    b = lift.fingerprint()
    lift.reset(3)
    assert lift.fingerprint() == a != b


def test_fingerprint_is_identical_across_processes(lift):
    code = ("from sim.envs.robosuite_env import SimEnv, SimConfig;"
            "s=SimEnv(SimConfig(task='Lift', cameras=())); s.reset(3); print(s.fingerprint())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lift.reset(3)
    assert out.strip().splitlines()[-1] == lift.fingerprint()


def test_get_and_set_state(lift):
    lift.reset(1)
    state = lift.get_state()
    for _ in range(5):
        lift.step(np.array([0.5, 0, 0, 0, 0, 0, 1.0]))
    assert lift.fingerprint() != SimEnvFingerprint(state)
    lift.set_state(state)
    np.testing.assert_array_equal(lift.get_state(), state)
    with pytest.raises(R2AInputError, match="simulator state has shape"):
        lift.set_state(state[:-1])


def SimEnvFingerprint(state):  # noqa: N802 - mirrors SimEnv.fingerprint for a raw state
    import hashlib

    return hashlib.sha256(state.tobytes()).hexdigest()[:16]


def test_bad_action_shape_and_unknown_task(lift):
    lift.reset(0)
    with pytest.raises(R2AInputError, match="expected \\(7,\\)"):
        lift.step(np.zeros(6))
    with pytest.raises(R2AInputError, match="valid tasks: Lift, Stack, PickPlaceCan, StackThree"):
        get_task("Lfit")
    with pytest.raises(R2AInputError, match="unknown camera"):
        SimConfig(cameras=("frontview",))


def test_stages_start_unreached_for_every_task():
    for name, task in BUILTIN_TASKS.items():
        sim = SimEnv(SimConfig(task=name, cameras=()))
        sim.reset(0)
        flags = sim.stage_flags()
        assert tuple(flags) == task.stages
        assert not any(flags.values()) and not sim.success(), name
        sim.close()


def test_several_simulators_in_one_process_render_their_own_scenes(lift):
    """A benchmark worker keeps one simulator per task: each must render its own scene, also after another
    one was created or closed (robosuite makes a GL context current only once, at creation)."""
    obs = lift.reset(0)
    before = obs["images/agentview"].copy()
    other = SimEnv(SimConfig(task="Stack", image_size=32))
    stack_image = other.reset(0)["images/agentview"]
    np.testing.assert_array_equal(lift.reset(0)["images/agentview"], before)
    assert not np.array_equal(stack_image, before)
    other.close()
    obs = lift.reset(0)
    np.testing.assert_array_equal(obs["images/agentview"], before)
    moved = lift.step(np.array([0.0, 0.0, 1.0, 0, 0, 0, -1.0]))["images/wrist"]
    assert np.abs(moved.astype(int) - obs["images/wrist"]).mean() > 0.1


def test_task_names_are_accepted_in_any_case():
    from eval.bench_config import BenchConfig
    from sim.envs.tasks import canonical_task_name

    assert get_task("lift") is BUILTIN_TASKS["Lift"] and canonical_task_name("STACKTHREE") == "StackThree"
    assert SimConfig(task="pickplacecan", cameras=()).task == "PickPlaceCan"
    assert BenchConfig.from_dict({"tasks": ["stack", "Lift"]}).tasks == ["Stack", "Lift"]
    with pytest.raises(R2AInputError, match="unknown task 'lfit' .did you mean 'Lift'"):
        get_task("lfit")


def test_the_rollout_observer_sees_every_step_before_it_runs():
    """``run_episode(observer=...)``: one call per step, in the state the action was chosen from, and the
    policy's reply exactly on the steps that started a chunk."""
    from demos.rollout import Step, run_episode

    class Chunked:
        def __init__(self) -> None:
            self.calls = 0

        def reset(self) -> None:
            self.calls = 0

        def infer(self, obs):
            self.calls += 1
            return {"actions": np.full((4, 7), 0.1 * self.calls, np.float32), "note": self.calls}

    sim = SimEnv(SimConfig(task="Lift", cameras=()))
    seen: list[Step] = []

    def observe(step: Step) -> None:
        np.testing.assert_allclose(step.obs["state/ee_pos"], sim.ee_pos(), atol=1e-6)  # not stepped yet
        seen.append(step)

    _, summary = run_episode(sim, Chunked(), 0, record=False, n_action_steps=3, max_steps=7, observer=observe)
    sim.close()
    assert [s.index for s in seen] == list(range(7)) == list(range(summary["steps"]))
    assert [s.reply["note"] if s.reply else None for s in seen] == [1, None, None, 2, None, None, 3]
    np.testing.assert_allclose(seen[4].action, np.full(7, 0.2))
    assert all(s.obs["state/step"] == s.index for s in seen)


def test_robosuite_import_warnings_are_not_printed():
    """robosuite prints five warnings on import (a private macro file, robosuite_models, mink IK) in every
    simulator process; r2a drops exactly those, and robosuite's logger still reports errors."""
    code = ("import logging; from sim.envs.robosuite_env import _import_robosuite; _import_robosuite(); "
            "logging.getLogger('robosuite_logs').error('a real robosuite error')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert "a real robosuite error" in line
