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


class ImageDrivenPolicy:
    """A chunked policy whose actions follow its camera images: a wrong image would change the trajectory."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def reset(self) -> None:
        self.seen = []

    def infer(self, obs):
        image = obs["images/agentview"]
        self.seen.append(image.copy())
        drift = (image.mean(axis=(0, 1)) / 255.0 - 0.5)[:3]
        chunk = np.zeros((4, 7), np.float32)
        chunk[:, :3] = np.clip(drift * 4.0, -1, 1)
        chunk[:, 6] = -1.0
        return {"actions": chunk}


def rollout_rendering(sim, render_unseen: bool, seed: int = 3, steps: int = 14):
    """(summary, images the policy saw, render calls after the reset) of one rollout of :class:`ImageDrivenPolicy`."""
    from demos.rollout import run_episode

    renders = []
    render = sim.sim.render
    sim.sim.render = lambda *a, **k: renders.append(1) or render(*a, **k)
    try:
        sim.reset(seed)
        in_reset = len(renders)  # LIBERO's reset steps the scene to rest, rendering each step
        renders.clear()
        policy = ImageDrivenPolicy()
        _, summary = run_episode(sim, policy, seed, record=False, n_action_steps=3, max_steps=steps,
                                 render_unseen=render_unseen)
    finally:
        del sim.sim.render
    return summary, policy.seen, len(renders) - in_reset


def assert_skipped_renders_change_nothing(sim, steps: int = 14) -> None:
    """Rendering only the queried observations gives the same episode: trajectory, and every image the policy
    saw, bit for bit, with about a third of the renders (a query every 3 steps)."""
    eager, eager_seen, eager_renders = rollout_rendering(sim, True, steps=steps)
    lazy, lazy_seen, lazy_renders = rollout_rendering(sim, False, steps=steps)
    assert eager["steps"] == lazy["steps"] == steps and len(eager_seen) == len(lazy_seen) == -(-steps // 3)
    for key in eager["trace"]:
        np.testing.assert_array_equal(eager["trace"][key], lazy["trace"][key])
    for a, b in zip(eager_seen, lazy_seen):
        np.testing.assert_array_equal(a, b)
    cameras = len(sim.config.cameras)
    assert eager_renders >= cameras * steps and lazy_renders <= cameras * len(lazy_seen)


def test_rendering_only_the_queried_observations_changes_nothing(lift):
    assert_skipped_renders_change_nothing(lift)
    with pytest.raises(ValueError, match="record=False"):
        from demos.rollout import run_episode

        run_episode(lift, ImageDrivenPolicy(), 0, record=True, render_unseen=False)


def test_a_frame_strip_needs_no_unseen_renders(lift):
    """The benchmark's failure strips show only queried observations, so they come out the same, byte for byte,
    when the steps between queries are not rendered (``r2a bench run --save-frames`` at the unrendered speed)."""
    from demos.rollout import run_episode
    from eval.frames import FrameStrip

    strips = []
    for render_unseen in (True, False):
        strip = FrameStrip()
        run_episode(lift, ImageDrivenPolicy(), 3, record=False, n_action_steps=3, max_steps=14, observer=strip,
                    render_unseen=render_unseen)
        strips.append((strip.steps, strip.png()))
    assert strips[0] == strips[1] and strips[0][0] == [0, 3, 6, 9, 12]


def test_robosuite_import_warnings_are_not_printed():
    """robosuite prints five warnings on import (a private macro file, robosuite_models, mink IK) in every
    simulator process; r2a drops exactly those, and robosuite's logger still reports errors."""
    code = ("import logging; from sim.envs.robosuite_env import _import_robosuite; _import_robosuite(); "
            "logging.getLogger('robosuite_logs').error('a real robosuite error')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert "a real robosuite error" in line
