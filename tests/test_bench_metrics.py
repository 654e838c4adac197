"""Trajectory metrics on trajectories whose values are known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eval.metrics import (
    gripper_toggles,
    integrated_squared_jerk,
    mean_speed,
    path_length,
    sparc,
    speed_profile,
    time_to_success,
    trajectory_metrics,
)
from r2a_core.errors import R2AInputError

DT = 0.05  # 20 Hz control
FS = 1 / DT


def _line(T: int, length: float) -> np.ndarray:
    return np.stack([np.linspace(0.0, length, T), np.zeros(T), np.zeros(T)], axis=1)


def _min_jerk_speed(duration: float, fs: float = FS, peak: float = 0.2) -> np.ndarray:
    """Minimum-jerk bell: v(τ) ∝ 30 τ²(1 − τ)²."""
    tau = np.arange(0.0, duration + 1e-9, 1.0 / fs) / duration
    return peak * 16 * tau**2 * (1 - tau) ** 2


def test_path_length_and_mean_speed():
    # 0.3 m along x in 11 samples (10 intervals of 0.05 s = 0.5 s) → 0.6 m/s
    pos = _line(11, 0.3)
    assert path_length(pos) == pytest.approx(0.3)
    assert mean_speed(pos, DT) == pytest.approx(0.6)
    # a 3-4-5 right-angle path: 0.3 along x then 0.4 along y
    corner = np.array([[0, 0, 0], [0.3, 0, 0], [0.3, 0.4, 0]])
    assert path_length(corner) == pytest.approx(0.7)
    assert mean_speed(corner[:1], DT) == 0.0
    np.testing.assert_allclose(speed_profile(corner, DT), [6.0, 8.0])


def test_integrated_squared_jerk_of_a_cubic():
    # x = t³ has jerk 6 exactly (third differences of a cubic are exact): ∫ 36 dt over (T − 3) samples of dt
    t = np.arange(21) * DT
    pos = np.stack([t**3, np.zeros_like(t), np.zeros_like(t)], axis=1)
    assert integrated_squared_jerk(pos, DT) == pytest.approx(36 * 18 * DT)   # 32.4
    assert integrated_squared_jerk(_line(21, 1.0), DT) == pytest.approx(0.0, abs=1e-6)
    assert integrated_squared_jerk(pos[:3], DT) == 0.0


def test_gripper_toggles_with_hysteresis():
    open_, closed_on_cube = np.ones(10), np.full(10, 0.5)    # a 4 cm cube keeps the gripper half open
    assert gripper_toggles(np.concatenate([open_, closed_on_cube])) == 1                # a pick
    assert gripper_toggles(np.concatenate([open_, closed_on_cube, open_])) == 2         # pick and place
    chatter = 0.5 + 0.04 * np.sign(np.sin(np.arange(40)))                              # ±0.04 < hysteresis
    assert gripper_toggles(chatter) == 0
    assert gripper_toggles(np.concatenate([open_, np.linspace(1.0, 0.0, 20)])) == 1    # slow close counts once
    assert gripper_toggles(np.array([])) == 0
    assert gripper_toggles(np.array([0.0, 0.0, 1.0, 0.0, 1.0])) == 3                   # starts closed


def test_time_to_success():
    assert time_to_success(40, DT) == pytest.approx(2.0)
    assert time_to_success(None, DT) is None


def test_sparc_of_a_single_bell_is_about_minus_1_4():
    # Balasubramanian et al. (2015): a single smooth submovement has SPARC ≈ −1.4 … −1.6
    for duration in (1.0, 2.0, 3.0):
        value = sparc(_min_jerk_speed(duration), FS)
        assert -1.6 <= value <= -1.39, (duration, value)
    t = np.arange(0, 2.0, 1 / FS)
    gaussian = 0.2 * np.exp(-0.5 * ((t - 1.0) / 0.25) ** 2)
    assert -1.6 <= sparc(gaussian, FS) <= -1.39
    # independent of amplitude and of stillness around the movement
    bell = _min_jerk_speed(1.0)
    assert sparc(3 * bell, FS) == pytest.approx(sparc(bell, FS))


def test_sparc_decreases_with_submovements_and_noise():
    bell = _min_jerk_speed(1.0)
    smooth = sparc(bell, FS)
    two_submovements = sparc(np.concatenate([bell, 0.8 * bell]), FS)
    noisy = sparc(np.abs(bell + np.random.default_rng(0).normal(0.0, 0.06, bell.size)), FS)
    assert two_submovements < smooth - 0.3
    assert noisy < smooth - 0.1


def test_sparc_is_nan_when_the_episode_never_moves():
    assert math.isnan(sparc(np.zeros(50), FS))
    assert math.isnan(sparc(np.full(50, 1e-7), FS))
    assert math.isnan(sparc(np.array([]), FS))


def test_trajectory_metrics_combines_all():
    T = 41
    tau = np.linspace(0, 1, T)
    x = 0.2 * (10 * tau**3 - 15 * tau**4 + 6 * tau**5)      # minimum-jerk reach of 0.2 m in 2 s
    pos = np.stack([x, np.zeros(T), np.full(T, 0.9)], axis=1)
    gripper = np.where(np.arange(T) < 30, 1.0, 0.5)
    out = trajectory_metrics(pos, gripper, DT, success_step=38)
    assert set(out) == {"path_length", "mean_speed", "integrated_squared_jerk", "gripper_toggles",
                        "time_to_success", "sparc"}
    assert out["path_length"] == pytest.approx(0.2)
    assert out["mean_speed"] == pytest.approx(0.1)
    assert out["gripper_toggles"] == 1.0
    assert out["time_to_success"] == pytest.approx(1.9)
    assert -1.6 <= out["sparc"] <= -1.39
    assert all(isinstance(v, float) for v in out.values())
    still = trajectory_metrics(np.zeros((10, 3)), np.ones(10), DT)
    assert math.isnan(still["sparc"]) and still["time_to_success"] is None and still["path_length"] == 0.0


def test_trajectory_metrics_rejects_bad_shapes():
    with pytest.raises(R2AInputError, match="shape"):
        trajectory_metrics(np.zeros((10, 2)), np.ones(10), DT)
    with pytest.raises(R2AInputError, match="gripper"):
        trajectory_metrics(np.zeros((10, 3)), np.ones(9), DT)
