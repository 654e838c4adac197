"""Shift factors in the real simulator (Lift, 48 px): what they change, what they must leave alone, and undo."""

import numpy as np
import pytest

from demos.experts.scripted import make_expert
from sim.envs.robosuite_env import SimConfig, SimEnv
from sim.envs.tasks import BUILTIN_TASKS
from sim.shifts import FACTOR_NAMES, ShiftHooks, apply_shift, get_factor
from sim.shifts.layout import REGIONS

pytest.importorskip("robosuite")
mujoco = pytest.importorskip("mujoco")

SEED = 3
OBS_ONLY = [n for n in FACTOR_NAMES if not get_factor(n).modifies_state]
AGENT, WRIST = "images/agentview", "images/wrist"


@pytest.fixture(scope="module")
def lift():
    sim = SimEnv(SimConfig(task="Lift", image_size=48))
    yield sim
    sim.close()


def model_arrays(sim) -> dict[str, np.ndarray]:
    """Every array of the MuJoCo model, the headlight, and the offscreen scene flags."""
    model = sim.mj_model
    out = {}
    for name in dir(model):
        value = getattr(model, name, None) if not name.startswith("_") else None
        if isinstance(value, np.ndarray):
            out[name] = value.copy()
    for key in ("ambient", "diffuse", "specular", "active"):
        out[f"headlight.{key}"] = np.array(getattr(model.vis.headlight, key)).copy()
    out["scene.flags"] = np.array(sim.render_context.scn.flags).copy()
    return out


def rollout(sim, hooks: ShiftHooks, steps: int = 25):
    """Scripted expert through the hooks: EE trajectory, raw (pre-transform) and seen agentview images."""
    obs = sim.reset(SEED)
    fingerprint = sim.fingerprint()
    obs = hooks.after_reset(sim) or obs
    expert = make_expert(sim)
    ee, raw, seen = [sim.ee_pos()], [obs[AGENT]], []
    try:
        for _ in range(steps):
            view = hooks.transform(obs)
            seen.append(view[AGENT])
            obs = sim.step(expert.infer(view)["actions"][0])
            ee.append(sim.ee_pos())
            raw.append(obs[AGENT])
    finally:
        hooks.close()
    return {"fingerprint": fingerprint, "ee": np.array(ee), "raw": np.array(raw), "seen": np.array(seen),
            "state": sim.get_state()}


@pytest.fixture(scope="module")
def clean_run(lift):
    return rollout(lift, ShiftHooks(None, 0))


@pytest.mark.parametrize("name", OBS_ONLY)
def test_observation_factors_leave_fingerprint_and_physics_untouched(lift, clean_run, name):
    level = 3
    lift.reset(SEED)
    before, state_before = lift.fingerprint(), lift.get_state()
    clean_obs = lift.observe()
    params, undo = apply_shift(lift, name, level)
    try:
        assert lift.fingerprint() == before
        np.testing.assert_array_equal(lift.get_state(), state_before)
        factor = get_factor(name)
        seen = factor.transform_obs(lift.observe(), params, np.random.default_rng(0))
        diff = np.abs(seen[AGENT].astype(int) - clean_obs[AGENT]).mean()
        if name == "language":
            assert diff == 0 and seen["prompt"] != clean_obs["prompt"]
        else:
            assert diff > 2.0, f"{name}: agentview barely changed ({diff:.2f})"
            assert seen["prompt"] == clean_obs["prompt"]
        if name in ("camera", "noise"):  # third-person camera only
            np.testing.assert_array_equal(seen[WRIST], clean_obs[WRIST])
    finally:
        undo()

    shifted = rollout(lift, ShiftHooks(name, level))
    assert shifted["fingerprint"] == clean_run["fingerprint"]
    np.testing.assert_array_equal(shifted["ee"], clean_run["ee"])  # the privileged expert acts identically
    np.testing.assert_array_equal(shifted["state"], clean_run["state"])
    if name in ("noise", "language"):  # the rendered scene itself is untouched, at every step
        np.testing.assert_array_equal(shifted["raw"], clean_run["raw"])


@pytest.mark.parametrize("name", FACTOR_NAMES)
def test_undo_restores_the_clean_model_and_images_bit_identically(lift, name):
    clean_obs = lift.reset(SEED)
    clean_model, fingerprint = model_arrays(lift), lift.fingerprint()
    clean_images = {k: clean_obs[k].copy() for k in (AGENT, WRIST)}
    for level in (1, 3):
        lift.reset(SEED)
        _, undo = apply_shift(lift, name, level)
        undo()
        undo()  # idempotent
        obs = lift.reset(SEED)
        assert lift.fingerprint() == fingerprint
        after = model_arrays(lift)
        changed = [k for k in clean_model if not np.array_equal(clean_model[k], after[k], equal_nan=True)]
        assert not changed, f"{name} L{level}: undo left {changed} changed"
        for key, image in clean_images.items():
            np.testing.assert_array_equal(obs[key], image)


def test_refresh_observation_does_not_shift_image_timing(lift, clean_run):
    """robosuite's forced update would sample every later image one physics substep early."""
    class Refresh(ShiftHooks):
        def after_reset(self, sim):
            return sim.refresh_observation()

    again = rollout(lift, Refresh(None, 0))
    np.testing.assert_array_equal(again["raw"], clean_run["raw"])


def test_camera_moves_only_agentview_and_more_at_l3(lift):
    obs = lift.reset(SEED)
    clean = obs[AGENT].astype(int)
    cam = lift.sim.model.camera_name2id("agentview")
    pos0 = np.array(lift.mj_model.cam_pos[cam])
    moved, diffs = {}, {}
    for level in (1, 3):
        lift.reset(SEED)
        _, undo = apply_shift(lift, "camera", level)
        moved[level] = np.linalg.norm(lift.mj_model.cam_pos[cam] - pos0)
        diffs[level] = np.abs(lift.observe()[AGENT].astype(int) - clean).mean()
        undo()
    assert moved[3] > moved[1] > 0.01
    assert diffs[3] > diffs[1] > 2.0


def test_robot_init_moves_the_start_pose_by_the_level_norm_and_the_arm_holds_it(lift):
    displacement = {1: [], 3: []}
    for seed in range(3):
        for level in (1, 3):
            lift.reset(seed)
            q0, ee0 = lift.joint_pos(), lift.ee_pos()
            params, undo = apply_shift(lift, "robot_init", level, seed=seed)
            q1, ee1 = lift.joint_pos(), lift.ee_pos()
            np.testing.assert_allclose(np.linalg.norm(q1 - q0), params["norm_rad"], rtol=1e-6)
            np.testing.assert_allclose(lift.observe()["state/ee_pos"], ee1, atol=1e-6)  # observation refreshed
            assert lift.ee_pos()[2] > lift.table_height() + 0.05
            displacement[level].append(np.linalg.norm(ee1 - ee0))
            for _ in range(20):
                lift.step(np.zeros(7))
            assert np.linalg.norm(lift.ee_pos() - ee1) < 2e-3, "the controller pulled the arm back"
            assert np.linalg.norm(lift.joint_pos() - q1) < 0.02
            undo()
    assert min(displacement[1]) > 0.005
    assert np.mean(displacement[3]) > 2 * np.mean(displacement[1])


def test_layout_places_objects_beyond_the_clean_range_with_distractors(lift):
    region = REGIONS["Lift"]
    clean_obs = lift.reset(SEED)
    z0 = lift.object_pos("cube")[2]
    for level in (1, 3):
        lift.reset(SEED)
        params, undo = apply_shift(lift, "layout", level)
        offset = lift.object_pos("cube")[:2] - np.array(region.centre)
        assert np.any(np.abs(offset) > np.array(region.clean_half)), "object left inside the clean range"
        assert np.all(np.abs(offset) <= np.array(region.clean_half) + params["extra_m"] + 1e-9)
        assert lift.object_pos("cube")[2] == pytest.approx(z0)
        np.testing.assert_allclose(lift.initial_object_pos("cube"), lift.object_pos("cube"))
        if level == 3:
            assert len(params["distractors"]) == get_factor("layout").levels[3]["distractors"] >= 2
            model = lift.mj_model
            geoms = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in
                     ("right_eef_target_box", "left_eef_target_sphere")]
            for g, spec in zip(geoms, params["distractors"]):
                np.testing.assert_allclose(lift.mj_data.geom_xpos[g][:2], spec["xy"], atol=1e-9)
                assert model.geom_contype[g] == 0 and model.geom_conaffinity[g] == 0
            assert np.abs(lift.observe()[AGENT].astype(int) - clean_obs[AGENT]).mean() > 1.0
        for _ in range(10):  # the cube settles on the table, nothing explodes
            lift.step(np.zeros(7))
        assert abs(lift.object_pos("cube")[2] - z0) < 0.02
        undo()


@pytest.mark.slow
@pytest.mark.parametrize("task", ["Lift", "Stack"])
def test_scripted_expert_solves_most_layout_l3_episodes(task):
    from demos.rollout import run_episode

    sim = SimEnv(SimConfig(task=task, cameras=()))
    try:
        wins = sum(run_episode(sim, make_expert(sim), seed, record=False, hooks=ShiftHooks("layout", 3))[1]["success"]
                   for seed in range(8))
    finally:
        sim.close()
    assert wins >= 7


@pytest.mark.parametrize("task", list(BUILTIN_TASKS))
def test_layout_regions_match_the_simulator(task):
    """The static placement table of the layout factor agrees with robosuite's objects and clean placements."""
    region = REGIONS[task]
    sim = SimEnv(SimConfig(task=task, cameras=()))
    try:
        for name, radius in region.radii.items():
            assert sim.object_model(name).horizontal_radius == pytest.approx(radius, abs=5e-4)
        for seed in range(15):
            sim.reset(seed)
            for name in region.radii:
                offset = sim.object_pos(name)[:2] - np.array(region.centre)
                assert np.all(np.abs(offset) <= np.array(region.clean_half) + 1e-3), (task, name, seed, offset)
    finally:
        sim.close()
