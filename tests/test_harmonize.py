"""Observation harmonization: histogram matching, the detector's threshold, hysteresis, and composition with a base
policy and with R2A."""

from __future__ import annotations

import numpy as np
import pytest

from r2a.observation.harmonize import (
    CameraHarmonizer,
    HarmonizedPolicy,
    HarmonizeSettings,
    apply_luts,
    match_histogram_lut,
    match_mean_std,
)
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA
from r2a_core.visual_ood import (
    ImageStats,
    fit_camera_stats,
    fit_start_reference,
    fit_threshold,
    load_image_stats,
    roc_auc,
    save_image_stats,
)


def test_histogram_matching_maps_a_two_level_image_onto_a_two_level_target():
    image = np.zeros((4, 4, 3), np.uint8)
    image[:2], image[2:] = 10, 20  # half the pixels 10, half 20, every channel
    target = np.zeros((3, 256))
    target[:, 100], target[:, 200] = 0.5, 0.5
    luts = match_histogram_lut(image, np.cumsum(target, axis=1))
    out = apply_luts(image, luts)
    assert set(np.unique(out[:2])) == {100} and set(np.unique(out[2:])) == {200}
    assert luts[0][10] == 100 and luts[0][20] == 200


def test_mean_std_matching_hits_the_target_statistics():
    rng = np.random.default_rng(0)
    image = rng.integers(40, 80, (32, 32, 3), dtype=np.uint8)
    out = match_mean_std(image, np.array([120.0, 100.0, 90.0]), np.array([30.0, 20.0, 10.0]))
    np.testing.assert_allclose(out.reshape(-1, 3).mean(0), [120, 100, 90], atol=1.5)
    np.testing.assert_allclose(out.reshape(-1, 3).std(0), [30, 20, 10], atol=1.5)


def test_the_threshold_separates_what_should_fire_from_what_should_not():
    assert fit_threshold([0.1, 0.2, 0.3], [5.0, 6.0]) == pytest.approx(np.sqrt(0.3 * 5.0))
    assert roc_auc([0.1, 0.2], [0.3, 0.4]) == 1.0 and roc_auc([1.0, 1.0], [1.0, 1.0]) == 0.5
    clean, camera, light = [0.1] * 98, [3.0, 3.0], [2.0, 5.0, 5.0, 5.0]
    assert fit_threshold(clean + camera, light) == pytest.approx(np.sqrt(0.1 * 2.0))  # pooled: camera is 2 %
    assert fit_threshold([clean, camera], [light]) == pytest.approx(np.sqrt(3.0 * 5.0))  # per condition: half
    with pytest.raises(R2AInputError, match="at least 2"):
        fit_threshold([0.1], [1.0, 2.0])


def _stats(threshold: float | None = 2.0) -> ImageStats:
    rng = np.random.default_rng(1)
    frames = [np.clip(rng.normal(120, 20, (32, 32, 3)), 0, 255).astype(np.uint8) for _ in range(40)]
    camera = fit_camera_stats(frames)
    camera.starts = [fit_start_reference(frames[:5], "synthetic.hdf5")]
    return ImageStats(cameras={"agentview": camera}, thresholds={"agentview": threshold})


def test_hysteresis_turns_on_above_the_threshold_and_off_only_below_the_release():
    cam = CameraHarmonizer(_stats().cameras["agentview"], threshold=1.0, normalizer="hist", release=0.5,
                           reference="frame")
    assert [cam.update(s) for s in (0.5, 1.2, 0.8, 0.6, 0.4, 0.9, float("nan"), 1.1)] == \
        [False, True, True, True, False, False, False, True]


class RecordingBase:
    action_space = OSC_POSE_DELTA

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def reset(self) -> None:
        self.seen.clear()

    def infer(self, obs):
        self.seen.append(obs)
        return {"actions": np.zeros((16, 7), np.float32)}


def test_the_policy_normalizes_only_when_the_detector_fires_and_modes_ablate_it():
    stats = _stats()
    dark = np.full((32, 32, 3), 15, np.uint8)  # a photometric shift
    normal = np.clip(np.random.default_rng(2).normal(120, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
    base = RecordingBase()
    policy = HarmonizedPolicy(base, stats, HarmonizeSettings(enabled=True, mode="gated"))
    out = policy.infer({"images/agentview": normal, "prompt": "x"})
    assert out["harmonize"]["agentview"]["active"] is False and base.seen[-1]["images/agentview"] is normal
    policy.reset()  # an episode that starts dark: the map from its first frame brightens it
    out = policy.infer({"images/agentview": dark, "prompt": "x"})
    assert out["harmonize"]["agentview"]["active"] is True
    assert base.seen[-1]["images/agentview"].mean() > 60  # brought toward the demos' brightness
    assert base.seen[-1]["prompt"] == "x" and out["actions"].shape == (16, 7)
    policy.reset()
    assert not policy.cameras["agentview"].active
    never = HarmonizedPolicy(RecordingBase(), stats, HarmonizeSettings(enabled=True, mode="never"))
    never.infer({"images/agentview": dark})
    assert never.base.seen[-1]["images/agentview"] is dark
    always = HarmonizedPolicy(RecordingBase(), _stats(None), HarmonizeSettings(enabled=True, mode="always",
                                                                                normalizer="meanstd"))
    always.infer({"images/agentview": normal})
    assert always.base.seen[-1]["images/agentview"] is not normal
    with pytest.raises(R2AInputError, match="no fitted detector threshold"):
        HarmonizedPolicy(RecordingBase(), _stats(None), HarmonizeSettings(enabled=True, mode="gated"))


def _scene(bright_left: bool, gain: float = 1.0, seed: int = 0) -> np.ndarray:
    """A 32-px scene, bright on one half: its layout tells the scenes apart at any brightness."""
    rng = np.random.default_rng(seed)
    img = np.full((32, 32, 3), 60.0) + rng.normal(0, 3, (32, 32, 3))
    img[:, :16] += 100 if bright_left else 0
    img[:, 16:] += 0 if bright_left else 100
    return np.clip(img * gain, 0, 255).astype(np.uint8)


def test_the_start_reference_of_the_nearest_scene_sets_one_map_for_the_whole_episode():
    camera = fit_camera_stats([_scene(i % 2 == 0, seed=i) for i in range(20)])
    camera.starts = [fit_start_reference([_scene(True, seed=i) for i in range(5)], "left.hdf5"),
                     fit_start_reference([_scene(False, seed=i) for i in range(5)], "right.hdf5")]
    dim_right = _scene(False, gain=0.5, seed=9)  # a light shift of the second scene
    assert camera.start_reference(dim_right).source == "right.hdf5"
    assert camera.start_reference(_scene(True, gain=1.6, seed=9)).source == "left.hdf5"
    stats = ImageStats(cameras={"agentview": camera}, thresholds={"agentview": None})
    policy = HarmonizedPolicy(RecordingBase(), stats, HarmonizeSettings(enabled=True, mode="always"))
    policy.infer({"images/agentview": dim_right})
    np.testing.assert_allclose(policy.base.seen[-1]["images/agentview"].reshape(-1, 3).mean(0),
                               camera.starts[1].mean, atol=2.0)  # the first frame lands on the reference
    later = np.full((32, 32, 3), 50, np.uint8)  # a later frame keeps the first frame's map: 50 ≈ 2 × 25 + ...
    policy.infer({"images/agentview": later})
    luts = policy.cameras["agentview"].episode_luts
    assert (policy.base.seen[-1]["images/agentview"] == luts[:, 50]).all() and luts[0, 50] > 80
    policy.reset()
    assert policy.cameras["agentview"].episode_luts is None


def test_stats_files_carry_their_version_and_v1_has_no_start_references(tmp_path):
    import json

    path = save_image_stats(_stats(), tmp_path / "stats.json")
    doc = json.loads(path.read_text())
    assert doc["format_version"] == 2 and load_image_stats(path).cameras["agentview"].starts[0].episodes == 5
    v1 = {**doc, "format_version": 1, "cameras": {"agentview": {k: v for k, v in doc["cameras"]["agentview"].items()
                                                                 if k != "starts"}}}
    path.write_text(json.dumps(v1))
    old = load_image_stats(path)
    assert old.cameras["agentview"].starts == []
    with pytest.raises(R2AInputError, match="no start references"):
        HarmonizedPolicy(RecordingBase(), old, HarmonizeSettings(enabled=True))
    HarmonizedPolicy(RecordingBase(), old, HarmonizeSettings(enabled=True, reference="frame"))  # v1 still serves
    path.write_text(json.dumps({**doc, "format_version": 3}))
    with pytest.raises(R2AInputError, match="format_version 3 is not supported"):
        load_image_stats(path)


def test_r2a_composes_with_a_harmonized_base_and_keeps_raw_images_for_itself(tmp_path):
    from graph_builder.build import build_graph_from_episodes
    from graph_builder.storage import save_graph
    from graph_builder.synthetic import synthetic_episodes
    from r2a.wrapper.build import build_r2a, load_r2a_config
    from r2a_core.visual_ood import save_image_stats

    graph = save_graph(build_graph_from_episodes(synthetic_episodes(2000, seed=0, num_tasks=2, mean_length=80)),
                       tmp_path / "graph")
    stats_path = save_image_stats(_stats(), tmp_path / "stats.json")
    config = load_r2a_config(None, [f"graph={graph}", "retriever=null", "retrieval.mode=knn", "recovery.enabled=false",
                                    "gate.kind=constant", "harmonize.enabled=true",
                                    f"harmonize.image_stats={stats_path}"])
    inner = RecordingBase()
    policy = build_r2a(config, inner)
    assert isinstance(policy.base, HarmonizedPolicy) and "harmonize_stats" in policy.metadata["artifacts"]
    dark = np.full((32, 32, 3), 15, np.uint8)
    out = policy.infer({"state/ee_pos": np.array([0.0, 0.0, 1.0]), "state/ee_quat": np.array([0.0, 1.0, 0.0, 0.0]),
                        "state/gripper": np.float32(1.0), "prompt": "lift the cube", "state/step": 0,
                        "images/agentview": dark})
    assert out["harmonize"]["agentview"]["active"] and inner.seen[-1]["images/agentview"].mean() > 60
    assert np.isfinite(out["actions"]).all()


def _render_file(tmp_path, name: str, shift: dict | None, brightness: float, seed: int = 0):
    """A tiny demo file whose agentview frames are noise around ``brightness`` (a stand-in for a render)."""
    from demos.hdf5_io import write_hdf5
    from tests.conftest import make_episode

    rng = np.random.default_rng(seed)
    episodes = []
    for i in range(2):
        ep = make_episode(length=10, seed=i, size=16)
        ep.images = {"agentview": np.clip(rng.normal(brightness, 20, (10, 16, 16, 3)), 0, 255).astype(np.uint8)}
        ep.meta = {"seed": 30000 + i, **({"shift": {**shift, "seed": shift["seed"] + i}} if shift else {})}
        episodes.append(ep)
    return write_hdf5(tmp_path / f"{name}.hdf5", episodes, env_args={"env_name": "Lift"})


def test_the_detector_is_fitted_and_scored_per_condition_on_training_split_renders(tmp_path):
    from demos.image_stats import evaluate_detector, fit_detector

    clean = _render_file(tmp_path, "clean", None, 120, seed=1)
    dark = _render_file(tmp_path, "light3", {"factor": "light", "level": 3, "seed": 7000}, 40, seed=2)
    same = _render_file(tmp_path, "camera1", {"factor": "camera", "level": 1, "seed": 7000}, 120, seed=3)
    record = evaluate_detector(_stats(threshold=5.0), [clean], [dark, same], stride=1)["agentview"]
    assert list(record) == ["clean", "camera:1", "light:3"] and record["clean"]["frames"] == 20
    assert record["clean"]["roc_auc_embedding"] is None
    assert record["light:3"]["roc_auc_embedding"] == 1.0 and record["light:3"]["roc_auc_photometric"] == 1.0
    assert record["light:3"]["fires"] == 1.0 and record["clean"]["fires"] == 0.0
    assert 0.2 < record["camera:1"]["roc_auc_photometric"] < 0.8  # the same distribution: no separation
    assert evaluate_detector(_stats(threshold=None), [clean], [dark], stride=1)["agentview"]["light:3"]["fires"] is None
    assert list(evaluate_detector(_stats(), [clean], [dark], stride=1, cameras=["agentview"])) == ["agentview"]
    with pytest.raises(R2AInputError, match="no camera wrist"):
        evaluate_detector(_stats(), [clean], [dark], cameras=["wrist"])
    stats = _stats(threshold=None)
    fitted = fit_detector(stats, [clean], [dark, same], stride=1)["agentview"]
    assert fitted["positives"] == ["light:3"] and fitted["fires"]["light:3"] == 1.0 and fitted["fires"]["clean"] == 0.0
    assert evaluate_detector(stats, [clean], [dark], stride=1)["agentview"]["light:3"]["fires"] == 1.0
    test_seed = _render_file(tmp_path, "test", {"factor": "light", "level": 3, "seed": 100000}, 40)
    with pytest.raises(R2AInputError, match="seed 100000"):
        evaluate_detector(_stats(), [clean], [test_seed])


def test_the_offline_check_scores_each_variant_against_the_clean_render_of_the_same_state(tmp_path):
    """The frozen built-in VLA on a clean file and on its 'light' re-render (every image × 0.4): the clean row is
    zero without harmonization, the dimmed images move the chunk, and the episode's start map undoes most of it."""
    from demos.hdf5_io import write_hdf5
    from demos.image_stats import write_image_stats
    from tests.conftest import make_episode
    from training.harmonize_check import harmonize_check, markdown_table

    def scene(rng: np.random.Generator, length: int) -> np.ndarray:
        base = np.full((length, 32, 32, 3), 90.0)
        base[:, :, :16] += 80
        return np.clip(base + rng.normal(0, 10, base.shape), 0, 255)

    clean, dim = [], []
    for i in range(3):
        ep = make_episode(length=8, seed=i)
        rng = np.random.default_rng(i)
        ep.images = {cam: scene(rng, 8).astype(np.uint8) for cam in ("agentview", "wrist")}
        ep.meta = {"seed": 20000 + i}
        clean.append(ep)
        shifted = make_episode(length=8, seed=i)
        shifted.images = {cam: (v * 0.4).astype(np.uint8) for cam, v in ep.images.items()}
        shifted.meta = {"seed": 20000 + i, "shift": {"factor": "light", "level": 3, "seed": 5000 + i}}
        dim.append(shifted)
    clean_path = write_hdf5(tmp_path / "clean.hdf5", clean, env_args={"env_name": "Lift"})
    dim_path = write_hdf5(tmp_path / "light3.hdf5", dim, env_args={"env_name": "Lift"})
    write_image_stats([clean_path], tmp_path / "stats.json", cameras=("agentview", "wrist"), stride=1)
    rows = harmonize_check("builtin", tmp_path / "stats.json", clean_path, [dim_path], episodes=3, stride=2,
                           n_boot=50)
    by = {(r["condition"], r["variant"]): r for r in rows}
    assert "gated (defaults)" not in {r["variant"] for r in rows}  # no fitted threshold: not compared
    assert by["clean", "none"]["trans_mm"][0] == 0.0 and by["clean", "none"]["frames"] == 12
    assert by["light:3", "none"]["trans_mm"][0] > 0.0 and by["light:3", "none"]["active"] == 0.0
    assert by["light:3", "start meanstd (always)"]["trans_mm"][0] < 0.5 * by["light:3", "none"]["trans_mm"][0]
    assert by["light:3", "start meanstd (always)"]["active"] == 1.0
    assert "| light:3 |" in markdown_table(rows)
    other = write_hdf5(tmp_path / "other.hdf5", [make_episode(length=8, seed=9)] * 3, env_args={"env_name": "Lift"})
    with pytest.raises(R2AInputError, match="not a re-render"):
        harmonize_check("builtin", tmp_path / "stats.json", clean_path, [other], episodes=3)


def test_an_episode_summary_counts_the_queries_harmonized_per_camera():
    from r2a.observation.harmonize import summarize_harmonize

    reports = [{"agentview": {"active": True}, "wrist": {"active": False}},
               {"agentview": {"active": False}, "wrist": {"active": False}},
               {"agentview": {"active": True}, "wrist": {"active": True}}, {"agentview": {"active": False}}]
    summary = summarize_harmonize(reports)
    assert summary == {"queries": 4, "active_share": {"agentview": 0.5, "wrist": 0.25}, "any_active_share": 0.5}
    assert summarize_harmonize([])["any_active_share"] is None
