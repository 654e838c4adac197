"""Segmentation: stride windows, gripper-event boundaries, node features and future motion."""

from __future__ import annotations

import numpy as np
import pytest

from graph_builder.build import build_graph_from_episodes
from graph_builder.config import GraphConfig, SegmentationConfig, apply_override
from graph_builder.segmentation import gripper_events, segment_demos, segment_starts
from graph_builder.synthetic import line_episode, synthetic_episodes
from r2a_core.rotations import quat_to_rot6d


def _close_then_open(length: int = 40, close_at: int = 10, open_at: int = 25, width: float = 0.6) -> np.ndarray:
    g = np.ones(length)
    g[close_at + 1:close_at + 6] = np.linspace(1.0, width, 6)[1:]
    g[close_at + 6:] = width
    g[open_at + 1:open_at + 6] = np.linspace(width, 1.0, 6)[1:]
    g[open_at + 6:] = 1.0
    return g


def test_gripper_events_at_start_of_close_and_open():
    # the fingers stop at 0.6 (object width): a 0.5 threshold would miss this grasp
    assert gripper_events(_close_then_open(), 0.05).tolist() == [10, 25]


def test_gripper_events_ignore_noise_below_hysteresis():
    rng = np.random.default_rng(0)
    g = np.clip(1.0 - np.abs(rng.normal(0, 0.01, 200)), 0, 1)
    assert gripper_events(g, 0.05).size == 0
    assert gripper_events(np.ones(50), 0.05).size == 0
    assert gripper_events(np.zeros(0), 0.05).size == 0


def test_gripper_events_start_closed_then_open():
    g = np.concatenate([np.zeros(10), np.linspace(0, 1, 5)[1:], np.ones(10)])  # opens from frame 10 on
    assert gripper_events(g, 0.05).tolist() == [9]


@pytest.mark.parametrize("length, events, expected", [
    (23, [], [0, 5, 10, 15, 20]),
    (21, [], [0, 5, 10, 15]),  # 20 would leave a 1-frame sliver at the end
    (23, [11], [0, 5, 11, 15, 20]),  # 10 is 1 frame from the event: dropped
    (23, [12], [0, 5, 10, 12, 15, 20]),
    (23, [0, 21], [0, 5, 10, 15, 21]),  # 20 is 1 frame from the event at 21
])
def test_segment_starts(length, events, expected):
    cfg = SegmentationConfig(stride=5, min_segment=2)
    assert segment_starts(length, np.asarray(events, dtype=np.int64), cfg).tolist() == expected


def test_segments_cover_each_demo_and_start_at_every_gripper_event():
    episodes = synthetic_episodes(3000, seed=1)
    cfg = SegmentationConfig()
    grip = np.concatenate([ep.gripper for ep in episodes])
    ptr = np.concatenate([[0], np.cumsum([len(ep) for ep in episodes])])
    seg = segment_demos(grip, ptr, cfg)
    for d, ep in enumerate(episodes):
        nodes = slice(seg.demo_node_ptr[d], seg.demo_node_ptr[d + 1])
        starts, ends = seg.start[nodes], seg.end[nodes]
        assert starts[0] == 0 and ends[-1] == len(ep)
        np.testing.assert_array_equal(starts[1:], ends[:-1])  # contiguous, no gaps or overlaps
        assert np.all(ends - starts >= 1)
        events = gripper_events(ep.gripper, cfg.gripper_hysteresis)
        assert events.size >= 1  # every synthetic task moves the gripper
        assert set(events.tolist()) <= set(starts.tolist())
        assert seg.at_gripper_event[nodes].sum() == events.size
        assert np.all(ends - starts <= cfg.stride + cfg.min_segment - 1)


def test_stride_is_configurable():
    episodes = synthetic_episodes(2000, seed=2)
    n5 = build_graph_from_episodes(episodes).num_nodes
    n10 = build_graph_from_episodes(episodes, apply_override(GraphConfig(), "segmentation.stride=10")).num_nodes
    assert 1.7 < n5 / n10 < 2.1


def test_node_state_and_future_motion_are_exact_on_a_line():
    grip = _close_then_open(length=40, close_at=11, open_at=26)  # stride boundaries 10 and 25 yield
    ep = line_episode(40, gripper=grip)
    cfg = apply_override(GraphConfig(), "edges.spatial_k=0")
    g = build_graph_from_episodes([ep], cfg)
    a = g.arrays
    assert a["node_span"][:, 0].tolist() == [0, 5, 11, 15, 20, 26, 30, 35]
    assert a["node_at_gripper_event"].tolist() == [False, False, True, False, False, True, False, False]
    starts = a["node_span"][:, 0]
    np.testing.assert_allclose(a["node_ee_pos"], ep.ee_pos[starts], atol=1e-6)
    np.testing.assert_allclose(a["node_phase"], starts / 39, atol=1e-6)
    np.testing.assert_allclose(a["node_gripper"], grip[starts], atol=1e-6)
    np.testing.assert_allclose(a["node_velocity"][:, 0], 0.01, atol=1e-6)  # 1 cm per frame along x
    np.testing.assert_allclose(a["node_ee_rot6d"], quat_to_rot6d(ep.ee_quat[starts]), atol=1e-6)
    h = cfg.segmentation.future_frames
    n = 1  # node starting at frame 5
    np.testing.assert_allclose(a["future_dpos"][n, :, 0], 0.01 * np.arange(1, h + 1), atol=1e-6)
    np.testing.assert_allclose(a["future_actions"][n, :, 0], 5 + np.arange(h))  # actions 5..24
    np.testing.assert_allclose(a["future_gripper"][n], grip[6:6 + h], atol=1e-6)
    assert a["future_valid"][n].all()
    last = len(starts) - 1  # node at frame 35: frames 36..39 exist, the rest is padding
    assert a["future_valid"][last].tolist() == [True] * 4 + [False] * (h - 4)
    np.testing.assert_allclose(a["future_dpos"][last, 4:, 0], 0.04, atol=1e-6)  # repeats the last frame
    np.testing.assert_allclose(a["future_drot6d"][..., [0, 4]], 1.0, atol=1e-6)  # constant orientation: identity


def test_future_rotation_is_relative_to_the_start_pose():
    ep = line_episode(30)
    yaw = 0.02 * np.arange(30)  # yaw about world z, 0.02 rad per frame
    ep.ee_quat = np.stack([np.cos(yaw / 2), np.zeros(30), np.zeros(30), np.sin(yaw / 2)], axis=1)
    g = build_graph_from_episodes([ep], apply_override(GraphConfig(), "edges.spatial_k=0"))
    rel = g.arrays["future_drot6d"][1, 4]  # node at frame 5, entry 4 = frame 10: relative yaw 0.1 rad
    np.testing.assert_allclose(rel[:2], [np.cos(0.1), np.sin(0.1)], atol=1e-5)


def test_failed_demos_are_skipped_and_counted():
    episodes = synthetic_episodes(4000, seed=3, failure_rate=0.3)
    failed = sum(not ep.success for ep in episodes)
    assert failed > 0
    g = build_graph_from_episodes(episodes)
    assert g.manifest["counts"]["skipped_failed"] == failed
    assert g.manifest["counts"]["demos"] == len(episodes) - failed
    kept = [i for i, ep in enumerate(episodes) if ep.success]
    assert g.arrays["demo_episode"].tolist() == kept


def test_make_key_reproduces_node_keys():
    episodes = synthetic_episodes(2000, seed=4)
    g = build_graph_from_episodes(episodes)
    a = g.arrays
    key = g.make_key(a["node_ee_pos"], a["node_ee_quat"], a["node_gripper"], a["node_phase"])
    np.testing.assert_allclose(key, a["node_key"], atol=1e-5)
    assert g.key_spec.names == ("ee_pos", "ee_rot6d", "gripper", "phase")
    with pytest.raises(ValueError, match="phase"):
        g.make_key(a["node_ee_pos"][:1], a["node_ee_quat"][:1], a["node_gripper"][:1])
    no_phase = build_graph_from_episodes(episodes, apply_override(GraphConfig(), "features.phase_weight=0"))
    assert no_phase.key_spec.names == ("ee_pos", "ee_rot6d", "gripper")
    assert no_phase.index.d == 10
