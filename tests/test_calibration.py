"""Calibrating the shift levels: severity knobs, the logistic fit, level choice, and `r2a bench calibrate`
end to end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from eval.calibration.config import CalibrationConfig
from eval.calibration.fit import LogisticFit, Observation, choose_levels, fit_logistic, next_severities
from r2a_core.errors import R2AInputError
from sim.shifts import get_factor, load_factors, sample_params
from sim.shifts.config import DEFAULT_FACTORS_YAML, load_factor_levels

#: parameters that grow weaker as their value grows (the dimmer, the stronger the shift)
DECREASING = {("light", "dim"), ("background", "value")}


def _strength_values(factor: str, params: dict) -> dict[str, float]:
    out = {}
    for name, value in params.items():
        values = value if isinstance(value, list) else [value]
        sign = -1.0 if (factor, name) in DECREASING else 1.0
        for i, v in enumerate(values):
            out[f"{name}[{i}]"] = sign * float(v)
    return out


@pytest.mark.parametrize("factor", ["camera", "robot_init", "light", "background", "noise", "layout"])
def test_every_parameter_is_monotone_in_the_knob(factor):
    fa = get_factor(factor)
    for knob in fa.knobs:
        previous = None
        for s in np.linspace(0.05, 1.0, 12):
            now = _strength_values(factor, fa.params_at({knob: float(s)}))
            if previous is not None:
                worse = [k for k in now if now[k] < previous[k] - 1e-9]
                assert not worse, (factor, knob, s, worse)
            previous = now


def test_outer_bounds_are_libero_plus_where_it_has_them():
    assert get_factor("camera").params_at(1.0)["orbit_deg"][1] == 75.0
    assert get_factor("robot_init").params_at(1.0)["norm_rad"] == 0.5
    assert get_factor("noise").params_at({"gaussian_blur": 1.0})["blur_sigma_px"][1] == 10.0
    assert get_factor("background").params_at(1.0)["surfaces"] == 3


def test_knob_errors_are_clear():
    with pytest.raises(R2AInputError, match="several severity knobs"):
        get_factor("noise").params_at(0.5)
    with pytest.raises(R2AInputError, match="no severity knob 'blur'.*gaussian_blur"):
        get_factor("noise").params_at({"blur": 0.5})
    with pytest.raises(R2AInputError, match=r"in \[0, 1\]"):
        get_factor("camera").params_at(1.5)
    with pytest.raises(R2AInputError, match="ordinal"):
        get_factor("language").params_at(0.5)
    assert get_factor("language").params_at(2 / 3) == {"source_level": 2}


def test_a_noise_level_draws_only_its_enabled_corruptions():
    fa = get_factor("noise")
    only_blur = type(fa)({1: fa.params_at({"gaussian_blur": 0.5})})
    kinds = {sample_params(only_blur, 1, seed, "Lift")["corruption"] for seed in range(40)}
    assert kinds == {"gaussian_blur"}
    off = type(fa)({1: fa.params_at({})})
    with pytest.raises(R2AInputError, match="enable at least one"):
        sample_params(off, 1, 0, "Lift")
    # the benchmark's own levels (every corruption enabled) still draw all four
    kinds = {sample_params(load_factors()["noise"], 3, seed, "Lift")["corruption"] for seed in range(60)}
    assert len(kinds) == 4


def _synthetic(a: float, b: float, clean: dict[str, float], per_point: int, seed: int = 0) -> list[Observation]:
    rng = np.random.default_rng(seed)
    out = []
    for s in (0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 1.0):
        for task, c in clean.items():
            p = c / (1 + np.exp(-(a - b * s)))
            out += [Observation(task, s, bool(x)) for x in rng.random(per_point) < p]
    return out


def test_the_fit_recovers_a_known_curve_with_task_ceilings():
    clean = {"Lift": 1.0, "StackThree": 0.5, "Broken": 0.0}
    fit = fit_logistic(_synthetic(3.0, 6.0, clean, 300), clean)
    assert fit.a == pytest.approx(3.0, abs=0.5) and fit.b == pytest.approx(6.0, abs=0.8)
    assert set(fit.tasks) == {"Lift", "StackThree"}  # a task that never succeeds clean carries no information
    assert fit.severity_at(0.5) == pytest.approx(0.5, abs=0.05)
    levels = choose_levels(fit)
    assert levels["status"] == "calibrated"
    s1, s2, s3 = levels["severities"]
    assert 0 < s1 < s2 < s3 <= 1
    np.testing.assert_allclose(levels["fitted_relative"], [0.85, 0.65, 0.45], atol=0.01)


def test_a_factor_that_steps_down_at_once_is_partial():
    step = LogisticFit(a=1.0, b=3.0, episodes=10, log_likelihood=0.0)   # r(0) ≈ 0.73 < 0.85: L1 unreachable
    levels = choose_levels(step)
    assert levels["status"] == "partial" and levels["severities"][0] == 0.02
    assert levels["fitted_relative"][0] < 0.85


def test_levels_of_insensitive_and_partial_factors_stay_inside_the_bound():
    insensitive = choose_levels(LogisticFit(a=5.0, b=1.0, episodes=10, log_likelihood=0.0))
    assert insensitive["status"] == "insensitive" and insensitive["severities"] == [0.3333, 0.6667, 1.0]
    partial = choose_levels(LogisticFit(a=3.0, b=2.5, episodes=10, log_likelihood=0.0))  # r(1) ≈ 0.62
    assert partial["status"] == "partial"
    s = partial["severities"]
    assert s[2] == 1.0 and s[0] < s[1] < s[2]
    ordinal = choose_levels(LogisticFit(a=5.0, b=1.0, episodes=10, log_likelihood=0.0), ordinal=(1 / 3, 2 / 3, 1.0))
    assert ordinal["status"] == "insensitive" and ordinal["severities"] == [0.3333, 0.6667, 1.0]


def test_refinement_adds_points_near_the_targets_only():
    fit = LogisticFit(a=3.0, b=6.0, episodes=10, log_likelihood=0.0)
    new = next_severities(fit, [0.25, 0.5, 1.0])
    assert new and all(0 < s <= 1 for s in new)
    assert all(min(abs(s - m) for m in [0.25, 0.5, 1.0]) >= 0.05 - 1e-9 for s in new)
    assert next_severities(fit, [0.25, 0.5, 1.0, *new]) == []


def test_calibration_seeds_stay_below_the_test_seeds():
    with pytest.raises(R2AInputError, match="test seeds"):
        CalibrationConfig.from_dict({"seed": 99_995, "episodes": 10})
    with pytest.raises(R2AInputError, match="reserved for held-out"):
        CalibrationConfig.from_dict({"seed": 500_000})
    with pytest.raises(R2AInputError, match="targets"):
        CalibrationConfig.from_dict({"targets": [0.5, 0.6, 0.7]})


def test_calibrate_end_to_end_writes_levels_that_read_back(tmp_path, capsys):
    """Two knob values, two episodes, real MuJoCo: records, a fitted curve, the levels file and a resume."""
    from eval.calibration.run import RESULTS, load_calibration
    from r2a_cli.main import main

    levels = tmp_path / "factors.yaml"
    shutil.copy(DEFAULT_FACTORS_YAML, levels)
    out = tmp_path / "cal"
    args = ["bench", "calibrate", "--factor", "robot_init", "--policy", "expert", "--seeds", "80000:80002",
            "--set", "tasks=[Lift]", "--set", "severities=[0.5,1.0]", "--set", "refine=1", "--set", "image_size=32",
            "--out", str(out), "--write", str(levels)]
    assert main(args) == 0
    lines = (out / RESULTS).read_text().splitlines()
    assert len(lines) == 2 + 2 * 2  # clean + two severities, two episodes each
    recs = [json.loads(line) for line in lines]
    shifted = [r for r in recs if r["factor"] == "robot_init"]
    assert {r["severity"] for r in shifted} == {0.5, 1.0}
    assert all(r["shift_params"]["norm_rad"] == pytest.approx(0.5 * r["severity"]) for r in shifted)
    result = load_calibration(out)
    entry = result["factors"]["robot_init"]["robot_init"]
    assert [p["severity"] for p in entry["points"]] == [0.5, 1.0] and {"a", "b"} <= set(entry["fit"])
    doc = load_factor_levels(levels)
    cal = doc["calibration"]
    assert cal["status"] == "partial" and "robot_init" in cal["factors"] and cal["seeds"] == [80000, 80001]
    assert "camera" in cal["provisional"]
    written = [doc["factors"]["robot_init"][lv]["norm_rad"] for lv in (1, 2, 3)]
    assert written == [pytest.approx(0.5 * s) for s in entry["severities"]]
    assert (out / "calibration.png").stat().st_size > 0
    # a resume runs nothing again; other seeds in the same directory are refused
    assert main(args) == 0
    assert len((out / RESULTS).read_text().splitlines()) == len(lines)
    assert main([*args[:7], "80002:80004", *args[8:]]) == 2
    assert "other seed" in capsys.readouterr().err
    assert load_calibration(Path(out / "calibration.json"))["episodes"] == 6


def test_levels_file_takes_multi_knob_and_ordinal_factors(tmp_path):
    from eval.calibration.levels_file import write_calibrated_levels

    levels = tmp_path / "factors.yaml"
    shutil.copy(DEFAULT_FACTORS_YAML, levels)

    def entry(severities, status="calibrated"):
        return {"severities": severities, "fitted_relative": [0.85, 0.65, 0.45], "status": status,
                "fit": {"a": 3.0, "b": 6.0, "tasks": {"Lift": 1.0}},
                "points": [{"severity": s, "successes": 5, "episodes": 10} for s in severities]}

    noise = {k: entry([0.2, 0.5, 0.9]) for k in get_factor("noise").knobs}
    calibration = {"policy": "builtin", "artifacts": {"base_checkpoint": "abc"}, "date": "2026-12-01",
                   "config": {"seed": 80000, "episodes": 10, "tasks": ["Lift"], "targets": [0.85, 0.65, 0.45]},
                   "clean": {"Lift": {"rate": 1.0}},
                   "factors": {"noise": noise, "language": {"language": entry([0.3333, 0.6667, 1.0], "partial")},
                               "camera": {"camera": entry([0.3, 0.6, 1.0])}}}
    del calibration["factors"]["noise"]["fog"]  # a factor with a knob left is not written yet
    write_calibrated_levels(levels, calibration)
    doc = load_factor_levels(levels)
    assert doc["factors"]["language"][2] == {"source_level": 2}
    assert doc["factors"]["camera"][3]["orbit_deg"] == [56.25, 75.0]
    assert doc["factors"]["noise"] == load_factor_levels(DEFAULT_FACTORS_YAML)["factors"]["noise"]
    cal = doc["calibration"]
    assert set(cal["factors"]) == {"language", "camera"} and "noise" in cal["provisional"]
    assert cal["factors"]["language"]["status"] == "partial"
    calibration["factors"]["noise"]["fog"] = entry([0.2, 0.5, 0.9])
    write_calibrated_levels(levels, calibration)
    noise_levels = load_factor_levels(levels)["factors"]["noise"]
    assert noise_levels[1]["blur_sigma_px"] == [1.5, 2.0] and noise_levels[3]["fog_density"] == [0.54, 0.72]
