"""Shift factors without a simulator: registry, level config, seeded sampling, observation transforms."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim.shifts as shifts
from r2a_core.errors import R2AInputError
from sim.envs.tasks import BUILTIN_TASKS, TASKS
from sim.shifts import (
    FACTOR_CLASSES,
    FACTOR_NAMES,
    ShiftHooks,
    get_factor,
    load_factors,
    obs_rng,
    params_rng,
    sample_params,
)
from sim.shifts.config import DEFAULT_FACTORS_YAML, load_factor_levels
from sim.shifts.language import load_instructions, rewrites_path
from sim.shifts.noise import CORRUPTIONS, SEVERITY_KEY, NoiseShift, corrupt

EXPECTED = ("camera", "robot_init", "language", "light", "background", "noise", "layout")


def test_registry_has_the_seven_factors_with_state_flags():
    assert FACTOR_NAMES == EXPECTED
    assert set(shifts.FACTORS) == set(EXPECTED)
    state = {name for name in EXPECTED if get_factor(name).modifies_state}
    assert state == {"robot_init", "layout"}
    indices = [cls.index for cls in FACTOR_CLASSES.values()]
    assert len(set(indices)) == len(indices)


def test_unknown_factor_lists_the_valid_names():
    with pytest.raises(R2AInputError, match="unknown shift factor 'camra'.*did you mean 'camera'.*valid factors: "
                                            "camera, robot_init, language, light, background, noise, layout"):
        get_factor("camra")


@pytest.mark.parametrize("bad", [0, 4, 7, -1, "2", 2.0, True, None])
def test_bad_level_is_an_input_error(bad):
    with pytest.raises(R2AInputError, match="level"):
        sample_params("camera", bad, 0, "Lift")
    with pytest.raises(R2AInputError, match="level"):
        params_rng(0, "noise", bad)
    if bad not in (0, None):
        with pytest.raises(R2AInputError, match="level"):
            ShiftHooks("light", bad)


def test_level_zero_hooks_are_a_no_op():
    hooks = ShiftHooks("camera", 0)
    obs = {"prompt": "x", "images/agentview": np.zeros((4, 4, 3), np.uint8)}
    assert hooks.factor is None and hooks.transform(obs) is obs


def test_only_a_factor_drawing_randomness_per_step_needs_every_step_transformed():
    """A rollout may skip ``transform`` on steps nobody sees unless it advances the episode's random stream."""
    assert ShiftHooks("camera", 0).stepwise_transform
    assert [name for name in FACTOR_NAMES if not ShiftHooks(name, 2).stepwise_transform] == ["noise"]


@pytest.mark.parametrize("name", EXPECTED)
@pytest.mark.parametrize("task", [*BUILTIN_TASKS, "libero_spatial/0", "libero_object/0"])
def test_sampling_is_deterministic_jsonable_and_varied(name, task):  # pure: LIBERO's tasks need no libero here
    for level in (1, 2, 3):
        a = sample_params(name, level, 11, task)
        assert a == sample_params(name, level, 11, task)
        assert json.loads(json.dumps(a)) == a
        assert a["factor"] == name and a["level"] == level
        others = [json.dumps(sample_params(name, level, seed, task), sort_keys=True) for seed in range(8)]
        assert len(set(others)) > 1, f"{name} L{level}: different seeds gave identical parameters"


def test_parameters_are_identical_in_another_process():
    code = ("import json; from sim.shifts import sample_params, FACTOR_NAMES;"
            "print(json.dumps([sample_params(n, l, 5, 'Stack') for n in FACTOR_NAMES for l in (1, 2, 3)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"},
                         cwd=Path(__file__).resolve().parents[1]).stdout
    here = [sample_params(n, lvl, 5, "Stack") for n in FACTOR_NAMES for lvl in (1, 2, 3)]
    assert json.loads(out.strip().splitlines()[-1]) == here


def test_parameter_and_observation_streams_are_separate_and_seeded():
    a, b = params_rng(3, "noise", 2).random(4), obs_rng(3, "noise", 2).random(4)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(obs_rng(3, "noise", 2).random(4), b)
    assert not np.array_equal(obs_rng(4, "noise", 2).random(4), b)
    with pytest.raises(R2AInputError, match="seed"):
        params_rng(-1, "noise", 2)


def test_levels_grow_in_severity():
    f = load_factors()
    for level_lo, level_hi in ((1, 2), (2, 3)):
        lo, hi = f["camera"].levels[level_lo], f["camera"].levels[level_hi]
        assert hi["orbit_deg"][0] >= lo["orbit_deg"][1] and hi["distance_scale"][0] >= lo["distance_scale"][1]
        assert f["robot_init"].levels[level_hi]["norm_rad"] > f["robot_init"].levels[level_lo]["norm_rad"]
        assert f["layout"].levels[level_hi]["extra_m"] > f["layout"].levels[level_lo]["extra_m"]
        for key in ("noise_std", "blur_sigma_px", "motion_length_px", "fog_density"):
            assert f["noise"].levels[level_hi][key][0] >= f["noise"].levels[level_lo][key][1]
        assert f["light"].levels[level_hi]["dim"][1] <= f["light"].levels[level_lo]["dim"][0]


# ------------------------------------------------------------------------------------------------ config
def _write(tmp_path, mutate):
    doc = yaml.safe_load(DEFAULT_FACTORS_YAML.read_text())
    mutate(doc)
    path = tmp_path / "factors.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_default_config_is_calibrated_on_the_builtin_policy_and_complete():
    parsed = load_factor_levels()
    assert set(parsed["factors"]) == set(EXPECTED)
    calibration = parsed["calibration"]
    assert calibration["status"] == "calibrated" and calibration["base_policy"]["spec"] == "builtin"
    assert set(calibration["factors"]) == set(EXPECTED) and calibration["provisional"] == []
    assert all(s < 100_000 for s in calibration["seeds"])                  # calibration seeds, never test seeds
    assert all(set(levels) == {1, 2, 3} for levels in parsed["factors"].values())


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["factors"]["camera"]["L1"].update(orbit=[1, 2]), "unknown key 'orbit'.*valid keys: orbit_deg"),
    (lambda d: d["factors"]["camera"]["L2"].pop("shift_m"), r"camera\.L2: missing key\(s\) shift_m"),
    (lambda d: d["factors"].update(lightning=d["factors"]["light"]), "unknown factor 'lightning'.*did you mean"),
    (lambda d: d["factors"]["noise"].update(L4=d["factors"]["noise"]["L3"]), "unknown level 'L4'"),
    (lambda d: d["factors"]["noise"].update(L0=d["factors"]["noise"]["L3"]), "unknown level 'L0'"),
    (lambda d: d["factors"]["noise"].pop("L2"), r"missing level\(s\) L2"),
    (lambda d: d["factors"]["light"]["L1"].update(dim=[0.9, 0.1]), r"expected a range \[low, high\]"),
    (lambda d: d["factors"]["light"]["L1"].update(shadow_prob=2), "probability"),
    (lambda d: d["factors"].pop("layout"), r"no levels for factor\(s\) layout"),
    (lambda d: d.update(format_version=99), "format_version 99"),
    (lambda d: d.update(extra=1), "unknown top-level key 'extra'"),
])
def test_bad_config_is_rejected_with_a_clear_message(tmp_path, mutate, message):
    with pytest.raises(R2AInputError, match=message):
        load_factor_levels(_write(tmp_path, mutate))


def test_another_config_changes_the_levels(tmp_path):
    path = _write(tmp_path, lambda d: d["factors"]["robot_init"]["L1"].update(norm_rad=0.05))
    assert get_factor("robot_init", path).levels[1]["norm_rad"] == 0.05
    shipped = yaml.safe_load(DEFAULT_FACTORS_YAML.read_text())["factors"]["robot_init"]["L1"]["norm_rad"]
    assert get_factor("robot_init").levels[1]["norm_rad"] == shipped != 0.05


# ---------------------------------------------------------------------------------------------- language
@pytest.mark.parametrize("task", list(TASKS))
def test_every_task_has_rewrites_at_every_level(task):
    rewrites = load_instructions(task)
    original = TASKS[task].instruction
    for level in (1, 2, 3):
        assert len(rewrites[level]) >= 3 and original not in rewrites[level]
        assert len(set(rewrites[level])) == len(rewrites[level])
    assert not set(rewrites[1]) & set(rewrites[3])
    assert yaml.safe_load(rewrites_path(task).read_text())["original"] == original


#: libero_spatial's scenes hold two identical black bowls: which one a task means is only said by where it is
RAMEKIN = ("ramekin", "small dish", "little dish")
SPATIAL_LANDMARKS = {0: ("between", "in the middle of the plate and the ramekin"), 1: RAMEKIN,
                     2: ("center", "centre", "middle", "central"), 3: ("cookie",), 4: ("drawer",), 5: RAMEKIN,
                     6: ("cookie",), 7: ("stove", "cooker", "burner"),
                     8: ("next to the plate", "beside the plate", "by the plate", "near the plate", "beside it"),
                     9: ("cabinet",)}
ON = ("on the", "on top of", "off the", "stacked on", "from the stove", "from the top")
NEXT_TO = ("next to", "beside", "by the", "near the", "company")


@pytest.mark.parametrize("index", range(10))
def test_libero_spatial_rewrites_keep_which_bowl(index):
    for level, rewrites in load_instructions(f"libero_spatial/{index}").items():
        for text in rewrites:
            assert any(word in text for word in SPATIAL_LANDMARKS[index]), (index, level, text)
            if index in (1, 6):  # next to the ramekin / the cookie box, not on it
                assert any(word in text for word in NEXT_TO), (index, level, text)
            if index in (3, 5):  # on the cookie box / the ramekin, not next to it
                assert any(word in text for word in ON) and not any(w in text for w in NEXT_TO), (index, level, text)
            if index == 9:  # on the cabinet, not in its drawer
                assert "drawer" not in text, (index, level, text)


def test_a_suite_task_has_its_rewrites_in_the_suite_folder(tmp_path):
    assert rewrites_path("libero_spatial/3").relative_to(rewrites_path("Lift").parent) == Path(
        "libero_spatial/3.yaml")
    with pytest.raises(R2AInputError, match="not a task name"):
        rewrites_path("../Lift")
    (tmp_path / "libero_object").mkdir()
    (tmp_path / "libero_object" / "1.yaml").write_text(
        (rewrites_path("libero_object/0")).read_text())  # a copy that still names task 0
    with pytest.raises(R2AInputError, match="holds the rewrites of task 'libero_object/0', not of 'libero_object/1'"):
        load_instructions("libero_object/1", str(tmp_path))
    with pytest.raises(R2AInputError, match="tasks with rewrites: libero_object/1"):
        load_instructions("libero_object/2", str(tmp_path))


def test_language_changes_only_the_prompt():
    factor = get_factor("language")
    params = sample_params(factor, 3, 0, "Lift")
    assert params["instruction"] in load_instructions("Lift")[3]
    image = np.full((8, 8, 3), 7, np.uint8)
    obs = {"prompt": "pick up the red cube", "images/agentview": image, "state/ee_pos": np.zeros(3)}
    out = factor.transform_obs(obs, params, np.random.default_rng(0))
    assert out["prompt"] == params["instruction"] and obs["prompt"] == "pick up the red cube"
    assert out["images/agentview"] is image and set(out) == set(obs)


def test_unknown_task_has_no_rewrites():
    with pytest.raises(R2AInputError, match="no instruction rewrites for task 'Door'"):
        sample_params("language", 1, 0, "Door")


# ------------------------------------------------------------------------------------------------- noise
def _scene(size=64):
    rng = np.random.default_rng(0)
    img = np.full((size, size, 3), 200, np.uint8)
    img[size // 3: size // 2, size // 3: size // 2] = (180, 20, 20)
    img[: size // 5] = 90
    return np.clip(img + rng.integers(-5, 5, img.shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_each_corruption_is_visible_stronger_at_l3_and_fresh_every_step(kind):
    factor: NoiseShift = get_factor("noise")
    img = _scene()
    strength = {}
    for level in (1, 3):
        params = {"camera": "agentview", "corruption": kind,
                  "severity": float(np.mean(factor.levels[level][SEVERITY_KEY[kind]])), "angle_deg": 30.0}
        rng = np.random.default_rng(1)
        first, second = corrupt(img, params, rng), corrupt(img, params, rng)
        assert first.shape == img.shape and first.dtype == np.uint8
        assert not np.array_equal(first, second), f"{kind}: the same corruption twice in a row"
        strength[level] = np.abs(first.astype(int) - img).mean()
    assert strength[1] > 0.3 and strength[3] > 1.5 * strength[1], (kind, strength)


def test_noise_touches_only_agentview_and_reproduces_per_seed():
    factor = get_factor("noise")
    params = {"factor": "noise", "level": 3, "camera": "agentview", "corruption": "gaussian_noise", "severity": 30.0}
    wrist = _scene(32)
    obs = {"images/agentview": _scene(), "images/wrist": wrist, "prompt": "p"}
    before = obs["images/agentview"].copy()
    a = [factor.transform_obs(obs, params, rng)["images/agentview"] for rng in [obs_rng(2, "noise", 3)] * 3]
    b = [factor.transform_obs(obs, params, rng)["images/agentview"] for rng in [obs_rng(2, "noise", 3)] * 3]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a[1], a[2])
    np.testing.assert_array_equal(obs["images/agentview"], before)  # input not modified
    out = factor.transform_obs(obs, params, np.random.default_rng(0))
    assert out["images/wrist"] is wrist and out["prompt"] == "p"


def test_every_corruption_type_is_drawn():
    kinds = {sample_params("noise", 2, seed, "Lift")["corruption"] for seed in range(40)}
    assert kinds == set(CORRUPTIONS)
