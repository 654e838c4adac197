"""View canonicalization (r2a/observation/canonicalize/, camera geometry in r2a_core/camera.py): the camera factor
moves the camera with the displacement the estimator searches over, the table-plane homography maps table points,
the estimator recovers a known displacement of a synthetic scene, the policy never fails an episode or emits NaN,
and the oracle's warp brings a real shifted MuJoCo view back to the clean one."""

from __future__ import annotations

import numpy as np
import pytest

from r2a.observation.canonicalize import (
    CanonicalizedPolicy,
    CanonicalizeSettings,
    CanonReference,
    DisplacementEstimator,
    WarpMap,
    canonical_warp,
    load_reference,
    save_reference,
    scene_reference,
)
from r2a_core.camera import CameraView, Displacement, pixel_displacement, plane_homography

HEIGHT = 0.8
SIZE = (64, 64)


def clean_view(fovy: float = 45.0) -> CameraView:
    """A camera like robosuite's agentview: in front of the table, above it, looking down at about 30°."""
    pos = np.array([1.0, 0.0, 1.45])
    forward = np.array([-0.85, 0.0, -0.53])
    forward /= np.linalg.norm(forward)
    right = np.array([0.0, -1.0, 0.0])
    up = np.cross(right, forward)
    return CameraView(pos, np.column_stack([right, up, -forward]), fovy)


def project(view: CameraView, points: np.ndarray, size=SIZE) -> np.ndarray:
    """Direct pinhole projection (not through the homography) of ``(N, 3)`` world points to pixels."""
    k = view.intrinsics(size)
    q = k @ (view.rot.T @ (points - view.pos).T)
    return (q[:2] / q[2]).T


# -------------------------------------------------------------------------------------------- a synthetic scene

def _texture(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Smooth, non-repeating colours over the world (a table top with a pattern, a different floor and wall)."""
    on_table = (np.abs(x) < 0.5) & (np.abs(y) < 0.6) & (np.abs(z - HEIGHT) < 1e-3)
    table = np.stack([150 + 60 * np.sin(7 * x + 2 * y), 140 + 60 * np.cos(5 * y - 3 * x),
                      120 + 50 * np.sin(4 * x * y + 9 * y)], -1)
    other = np.stack([80 + 40 * np.sin(3 * x + 5 * z), 60 + 30 * np.cos(4 * y + 2 * z),
                      40 + 30 * np.sin(2 * x - 3 * y + z)], -1)
    return np.where(on_table[..., None], table, other)


def _raycast(view: CameraView, size) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic scene seen by ``view``: the table top (a rectangle at HEIGHT), the floor (z = 0) and a wall
    (x = −1.5). Returns the image (H, W, 3) uint8 and the world points (H, W, 3)."""
    h, w = size
    u, v = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    rays = (view.rot @ (np.linalg.inv(view.intrinsics(size)) @ np.stack([u.ravel(), v.ravel(), np.ones(h * w)])))
    rays /= np.linalg.norm(rays, axis=0)
    best = np.full(h * w, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_table = (HEIGHT - view.pos[2]) / rays[2]
        hit = view.pos[:, None] + t_table * rays
        t_table = np.where((t_table > 0) & (np.abs(hit[0]) < 0.5) & (np.abs(hit[1]) < 0.6), t_table, np.inf)
        t_floor = np.where(-view.pos[2] / rays[2] > 0, -view.pos[2] / rays[2], np.inf)
        t_wall = np.where((-1.5 - view.pos[0]) / rays[0] > 0, (-1.5 - view.pos[0]) / rays[0], np.inf)
    best = np.minimum(np.minimum(t_table, t_floor), t_wall)
    points = (view.pos[:, None] + best * rays).T
    points[~np.isfinite(best)] = np.nan
    colour = _texture(*np.nan_to_num(points).T)
    return np.clip(colour, 0, 255).astype(np.uint8).reshape(h, w, 3), points.reshape(h, w, 3)


@pytest.fixture(scope="module")
def synthetic_reference() -> CanonReference:
    clean = clean_view()
    wide = CameraView(clean.pos, clean.rot, 90.0)
    frames, points = _raycast(wide, (128, 128))
    scene = scene_reference("Synthetic", "do it", clean, HEIGHT, frames[None], points)
    return CanonReference([scene], 3.0, {})


# ------------------------------------------------------------------------------------------------------ geometry

def test_the_camera_factor_moves_the_camera_by_the_displacement_canonicalization_searches() -> None:
    """One implementation (r2a_core.camera.displaced_pose): the factor's sampled parameters and the estimator's
    vector of the same displacement give the same camera, and the composition does what its parts say."""
    from sim.shifts.camera import shifted_pose

    clean = clean_view()
    params = {"orbit_deg": 40.0, "elevation_deg": -9.0, "distance_scale": 1.6, "shift_m": 0.07,
              "shift_dir_deg": 130.0, "look_away_deg": 6.0, "look_dir_deg": -70.0}
    pos, rot = shifted_pose(clean.pos, clean.rot, clean.pivot(HEIGHT), params)
    moved = Displacement.from_params(params).apply(clean, HEIGHT)
    np.testing.assert_allclose(moved.pos, pos, atol=1e-12)
    np.testing.assert_allclose(moved.rot, rot, atol=1e-12)
    np.testing.assert_allclose(moved.rot.T @ moved.rot, np.eye(3), atol=1e-12)
    # the identity moves nothing, bit for bit
    still = Displacement().apply(clean, HEIGHT)
    np.testing.assert_array_equal(still.pos, clean.pos)
    np.testing.assert_array_equal(still.rot, clean.rot)
    # distance, elevation and orbit keep the pivot at the image centre; distance scales the range to it
    pivot = clean.pivot(HEIGHT)
    around = Displacement(orbit_deg=50.0, elevation_deg=10.0, distance_scale=1.5).apply(clean, HEIGHT)
    np.testing.assert_allclose(around.pivot(HEIGHT), pivot, atol=1e-9)
    assert np.linalg.norm(around.pos - pivot) == pytest.approx(1.5 * np.linalg.norm(clean.pos - pivot))
    np.testing.assert_allclose(project(around, pivot[None])[0], np.array(SIZE[::-1]) / 2, atol=1e-6)
    # an orbit keeps the height; the shift slides the camera along its own right and up axes, turning nothing
    assert Displacement(orbit_deg=30.0).apply(clean, HEIGHT).pos[2] == pytest.approx(clean.pos[2])
    slid = Displacement(shift_x_m=0.03, shift_y_m=-0.04).apply(clean, HEIGHT)
    np.testing.assert_allclose(slid.pos - clean.pos, 0.03 * clean.rot[:, 0] - 0.04 * clean.rot[:, 1], atol=1e-12)
    np.testing.assert_allclose(slid.rot, clean.rot, atol=1e-15)
    # the look-away turns the view in place by its angle
    turned = Displacement(look_x_deg=6.0, look_y_deg=8.0).apply(clean, HEIGHT)
    np.testing.assert_array_equal(turned.pos, clean.pos)
    angle = np.degrees(np.arccos(np.clip(turned.rot[:, 2] @ clean.rot[:, 2], -1, 1)))
    assert angle == pytest.approx(10.0)


def test_plane_homography_maps_table_points() -> None:
    clean = clean_view()
    shifted = Displacement(orbit_deg=-60, elevation_deg=12, distance_scale=1.9, shift_x_m=0.05,
                           look_y_deg=-8).apply(clean, HEIGHT)
    rng = np.random.default_rng(0)
    table = np.column_stack([rng.uniform(-0.4, 0.4, 50), rng.uniform(-0.5, 0.5, 50), np.full(50, HEIGHT)])
    src, dst = project(shifted, table), project(clean, table)
    mapped = plane_homography(shifted, clean, HEIGHT, SIZE) @ np.vstack([src.T, np.ones(50)])
    np.testing.assert_allclose((mapped[:2] / mapped[2]).T, dst, atol=1e-8)
    # a point above the table is not on the plane: the homography does not map it (the parallax the docs name)
    above = np.array([[0.1, 0.1, HEIGHT + 0.3]])
    off = plane_homography(shifted, clean, HEIGHT, SIZE) @ np.append(project(shifted, above)[0], 1.0)
    assert np.linalg.norm(off[:2] / off[2] - project(clean, above)[0]) > 2.0


def test_warp_is_exact_on_the_plane_and_identity_when_still() -> None:
    clean = clean_view()
    image = np.random.default_rng(1).integers(0, 256, (*SIZE, 3), dtype=np.uint8)
    np.testing.assert_array_equal(canonical_warp(clean, clean, HEIGHT, SIZE).apply(image), image)
    shifted = Displacement(orbit_deg=30, distance_scale=1.4).apply(clean, HEIGHT)
    seen, _ = _raycast(shifted, SIZE)
    truth, points = _raycast(clean, SIZE)
    warped = canonical_warp(shifted, clean, HEIGHT, SIZE).apply(seen)
    on_table = np.abs(points[..., 2] - HEIGHT) < 1e-6
    assert np.abs(warped.astype(float) - truth)[on_table].mean() < 0.25 * np.abs(
        seen.astype(float) - truth)[on_table].mean()
    assert pixel_displacement(np.eye(3), SIZE) == 0.0


def test_warp_map_fills_pixels_without_a_source_and_stays_finite() -> None:
    behind = np.diag([1.0, 1.0, -1.0])  # every output pixel maps behind the camera: no source anywhere
    image = np.full((*SIZE, 3), 100, np.uint8)
    image[0, 0] = 0
    out = WarpMap.from_homography(behind, SIZE).apply(image)
    assert out.dtype == np.uint8 and np.all(np.abs(out.astype(int) - 100) <= 1)
    nan = WarpMap.from_homography(np.full((3, 3), np.nan), SIZE).apply(image)
    assert nan.dtype == np.uint8 and nan.shape == image.shape


# ----------------------------------------------------------------------------------------------------- estimator

@pytest.mark.parametrize("displacement", [
    Displacement(orbit_deg=-15, elevation_deg=3, distance_scale=1.2, shift_x_m=0.015, look_x_deg=2),
    Displacement(orbit_deg=55, elevation_deg=-10, distance_scale=1.7, shift_y_m=-0.05, look_y_deg=5),
])
def test_estimator_recovers_a_known_displacement(synthetic_reference: CanonReference,
                                                 displacement: Displacement) -> None:
    clean = clean_view()
    frame, _ = _raycast(displacement.apply(clean, HEIGHT), SIZE)
    est = DisplacementEstimator(synthetic_reference).estimate(frame, "do it")
    truth = plane_homography(clean, displacement.apply(clean, HEIGHT), HEIGHT, SIZE)
    found = plane_homography(clean, est.displacement.apply(clean, HEIGHT), HEIGHT, SIZE)
    assert pixel_displacement(np.linalg.inv(truth) @ found, SIZE) < 1.5
    assert est.loss < est.identity_loss


def test_reference_round_trip(tmp_path, synthetic_reference: CanonReference) -> None:
    path = tmp_path / "reference"
    save_reference(path, synthetic_reference)
    back = load_reference(path)
    assert back.threshold_px == 3.0 and back.scenes[0].task == "Synthetic"
    np.testing.assert_allclose(back.scenes[0].view.rot, synthetic_reference.scenes[0].view.rot)
    np.testing.assert_allclose(back.scenes[0].mean, synthetic_reference.scenes[0].mean, atol=0.51)
    np.testing.assert_allclose(back.scenes[0].points, synthetic_reference.scenes[0].points, atol=2e-3)
    assert (path / "manifest.json").is_file()


# -------------------------------------------------------------------------------------------------------- policy

class Recorder:
    """A base policy that remembers what it saw."""

    action_space = None

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def reset(self) -> None:
        self.seen.clear()

    def infer(self, obs):
        self.seen.append(obs["images/agentview"])
        return {"actions": np.zeros((8, 7), np.float32)}


def _obs(image: np.ndarray) -> dict:
    return {"images/agentview": image, "prompt": "do it"}


def test_clean_frames_pass_unchanged_and_shifted_ones_are_warped(synthetic_reference: CanonReference) -> None:
    base = Recorder()
    policy = CanonicalizedPolicy(base, synthetic_reference)
    clean_frame, _ = _raycast(clean_view(), SIZE)
    reply = policy.infer(_obs(clean_frame))
    assert reply["canonicalize"]["active"] is False and reply["canonicalize"]["reason"] == "below threshold"
    np.testing.assert_array_equal(base.seen[-1], clean_frame)

    policy.reset()
    moved, _ = _raycast(Displacement(orbit_deg=40, distance_scale=1.5).apply(clean_view(), HEIGHT), SIZE)
    first = policy.infer(_obs(moved))["canonicalize"]
    again = policy.infer(_obs(moved))["canonicalize"]
    assert first["active"] and first == again  # estimated once per episode
    assert np.abs(base.seen[-1].astype(float) - clean_frame).mean() < np.abs(
        moved.astype(float) - clean_frame).mean()


def test_the_warp_needs_a_clear_gain_and_no_photometric_alarm(synthetic_reference: CanonReference,
                                                               tmp_path) -> None:
    """Issue 49's gate: a moved camera explains its frame far better than the unmoved view; an estimate that barely
    beats the identity, or a first frame the photometric detector flags (light, background), keeps the warp off."""
    moved, _ = _raycast(Displacement(orbit_deg=40, distance_scale=1.5).apply(clean_view(), HEIGHT), SIZE)
    gain = CanonicalizedPolicy(Recorder(), synthetic_reference).infer(_obs(moved))["canonicalize"]["gain"]
    assert 0 < gain <= 1
    strict = CanonicalizedPolicy(Recorder(), synthetic_reference,
                                 CanonicalizeSettings(enabled=True, min_gain=min(gain + 0.01, 1.0)))
    report = strict.infer(_obs(moved))["canonicalize"]
    assert report["active"] is False and report["reason"] == "no clear gain over the unmoved view"

    class Alarm:  # a detector that fires on every frame (its photometric score: what its threshold reads)
        thresholds = {"agentview": 1.0}

        def photometric_score(self, camera, image):
            return 5.0

    vetoed = CanonicalizedPolicy(Recorder(), synthetic_reference, CanonicalizeSettings(enabled=True))
    vetoed.veto = Alarm()
    report = vetoed.infer(_obs(moved))["canonicalize"]
    assert report["active"] is False and report["reason"] == "photometric detector fired"


def test_a_failed_estimate_passes_images_through(synthetic_reference: CanonReference, monkeypatch) -> None:
    base = Recorder()
    policy = CanonicalizedPolicy(base, synthetic_reference, CanonicalizeSettings(enabled=True, threshold_px=0.0))

    def broken(*_args, **_kwargs):
        raise FloatingPointError("synthetic failure")

    monkeypatch.setattr(policy.estimator, "estimate", broken)
    image = np.random.default_rng(2).integers(0, 256, (*SIZE, 3), dtype=np.uint8)
    reply = policy.infer(_obs(image))
    assert reply["canonicalize"]["active"] is False and "synthetic failure" in reply["canonicalize"]["reason"]
    np.testing.assert_array_equal(base.seen[-1], image)
    assert np.all(np.isfinite(reply["actions"]))


@pytest.mark.parametrize("image", [np.zeros((*SIZE, 3), np.uint8), np.full((*SIZE, 3), 255, np.uint8),
                                   np.random.default_rng(3).integers(0, 256, (*SIZE, 3), dtype=np.uint8),
                                   np.zeros((32, 48, 3), np.uint8)])
def test_degenerate_frames_never_give_nan(synthetic_reference: CanonReference, image: np.ndarray) -> None:
    base = Recorder()
    reply = CanonicalizedPolicy(base, synthetic_reference).infer(_obs(image))
    report = reply["canonicalize"]
    assert all(np.isfinite(v) for v in report.values() if isinstance(v, float))
    assert base.seen[-1].dtype == np.uint8 and base.seen[-1].shape == image.shape


def test_registry_and_r2a_variant_know_canonicalize() -> None:
    from eval.diagnostics import register_diagnostics
    from r2a.policies.registry import POLICIES, R2A_VARIANTS, r2a_config_for

    register_diagnostics()
    assert not POLICIES["canonicalize"].diagnostic and r2a_config_for("r2a-builtin").canonicalize.enabled
    assert POLICIES["oracle-canonicalize"].diagnostic and POLICIES["r2a-harmonize-hold-canon"].diagnostic
    config = r2a_config_for("r2a-harmonize-hold-canon")
    assert config.canonicalize.enabled and config.harmonize.enabled and config.gate.holding_scale == 0
    assert not r2a_config_for("r2a-harmonize-hold").canonicalize.enabled
    assert "canonicalize.enabled=true" in R2A_VARIANTS["r2a-harmonize-hold-canon"].overrides


def test_oracle_refuses_to_run_without_a_simulator() -> None:
    from eval.diagnostics import register_diagnostics
    from r2a.policies.registry import make_policy
    from r2a_core.errors import R2AInputError

    register_diagnostics()
    with pytest.raises(R2AInputError, match="needs a simulator"):
        make_policy("oracle-canonicalize:builtin")


# ------------------------------------------------------------------------------------------------ end to end

def test_oracle_warp_brings_a_real_shifted_view_back() -> None:
    """MuJoCo at 64 px (about 3 s): the oracle's warp of the camera factor's L3 view is closer to the clean view on
    the table (the lower half of the image) than the raw shifted view, and the oracle reads the clean pose at
    reset."""
    from r2a.observation.canonicalize import OracleCanonicalizedPolicy
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig
    from sim.shifts import ShiftHooks

    sim = make_sim(SimConfig(task="Lift", image_size=64))
    try:
        clean = sim.reset(90000)["images/agentview"]
        base = Recorder()
        policy = OracleCanonicalizedPolicy(base, sim)
        policy.reset()
        hooks = ShiftHooks("camera", 3)
        shifted = (hooks.after_reset(sim) or sim.observe())["images/agentview"]
        reply = policy.infer(_obs(shifted))
        hooks.close()
        assert reply["canonicalize"]["active"]
        lower = slice(32, 64)
        raw = np.abs(shifted[lower].astype(float) - clean[lower]).mean()
        warped = np.abs(base.seen[-1][lower].astype(float) - clean[lower]).mean()
        assert warped < 0.3 * raw
    finally:
        sim.close()
