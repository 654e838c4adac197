"""The R2A retriever on synthetic data: response model, subgraph, GNN, reference synthesis, training, resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import make_episode

from graph_builder.build import build_graph_from_episodes
from graph_builder.synthetic import line_episode, synthetic_episodes
from r2a.retrieval.features import EDGE_FEATURE_DIM, NODE_FEATURE_DIM, QueryLayout
from r2a.retrieval.gnn import RetrieverNet, RetrieverNetConfig
from r2a.retrieval.history import window_from_arrays
from r2a.retrieval.motion import AxisResponse, fit_response_model
from r2a.retrieval.subgraph import Neighbourhoods
from r2a.retrieval.synthesis import fuse, fused_actions, reference_chunk
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    from graph_builder.storage import save_graph

    g = build_graph_from_episodes(synthetic_episodes(4000, seed=0, num_tasks=2, mean_length=80))
    save_graph(g, tmp_path_factory.mktemp("graph") / "g")  # sets g.path
    return g


def test_response_model_recovers_known_dynamics():
    rng = np.random.default_rng(0)
    true = AxisResponse(ar=((1.2, -0.3),) * 3, ex=((0.1, -0.03, -0.04),) * 3, scale=0.05)
    n, h = 400, 20
    actions = rng.uniform(-1, 1, (n, h, 3)) * 0.5
    steps = np.stack([true.forward(a, np.zeros((2, 3)), np.zeros((2, 3))) for a in actions])
    dpos = np.cumsum(steps, axis=1)
    rot6d = np.tile([1.0, 0, 0, 0, 1, 0], (n, h, 1))
    rot_actions = np.zeros((n, h, 3))
    future_actions = np.concatenate([actions, rot_actions, np.zeros((n, h, 1))], axis=-1)
    # nothing ever turns: rotation is not identifiable, so the (pooled) translation dynamics stand in for it
    still = fit_response_model(dpos, rot6d, future_actions, np.ones((n, h), bool))
    np.testing.assert_allclose(still.rotation.ex, true.ex, atol=1e-6)
    assert still.rotation.scale == 0.5 and np.isnan(still.fit_rmse[1])
    with pytest.raises(R2AInputError, match="gain"):  # nothing moves at all: no conversion is possible
        fit_response_model(dpos * 0, rot6d, future_actions, np.ones((n, h), bool))
    yaw = np.cumsum(rng.uniform(-0.1, 0.1, (n, h)), axis=1)  # turning about z, commanded exactly (gain 1)
    rot6d = np.stack([np.cos(yaw), np.sin(yaw), 0 * yaw, -np.sin(yaw), np.cos(yaw), 0 * yaw], axis=-1)
    rot_actions[..., 2] = np.diff(np.concatenate([np.zeros((n, 1)), yaw], axis=1), axis=1) / 0.5
    future_actions = np.concatenate([actions, rot_actions, np.zeros((n, h, 1))], axis=-1)
    model = fit_response_model(dpos, rot6d, future_actions, np.ones((n, h), bool))
    np.testing.assert_allclose(model.translation.ar, true.ar, atol=1e-6)
    np.testing.assert_allclose(model.translation.ex, true.ex, atol=1e-6)
    assert model.fit_rmse[0] < 1e-9
    np.testing.assert_allclose(np.asarray(model.rotation.ex)[:, 0], 1.0, atol=1e-3)
    # the inverse reproduces the actions that made a trajectory
    a = rng.uniform(-0.4, 0.4, (8, 3))
    v = true.forward(a, np.full((2, 3), 0.002), np.full((2, 3), 0.1))
    np.testing.assert_allclose(true.inverse(v, np.full((2, 3), 0.002), np.full((2, 3), 0.1)), a, atol=1e-12)


def test_subgraph_is_bounded_holds_the_seeds_and_every_induced_edge(graph):
    hood = Neighbourhoods(graph.arrays["edge_index"], graph.num_nodes)
    key = graph.arrays["node_key"][5]
    _, seeds = graph.search(key[None], 10)
    sub = hood.extract(seeds[0], graph.arrays["node_key"], key, hops=2, max_nodes=48)
    assert len(sub.nodes) == 48 == len(set(sub.nodes.tolist())) and sub.seeds == 10
    np.testing.assert_array_equal(sub.nodes[:10], seeds[0])
    src, dst = graph.arrays["edge_index"]
    inside = np.isin(src, sub.nodes) & np.isin(dst, sub.nodes)
    assert sub.edge_index.shape[1] == inside.sum() > 0
    pairs = set(zip(sub.nodes[sub.edge_index[0]].tolist(), sub.nodes[sub.edge_index[1]].tolist()))
    assert pairs == set(zip(src[inside].tolist(), dst[inside].tolist()))
    again = hood.extract(seeds[0], graph.arrays["node_key"], key, hops=2, max_nodes=48)  # no state left behind
    np.testing.assert_array_equal(again.nodes, sub.nodes)


def test_gnn_forward_backward_over_a_batch_of_subgraphs():
    torch.manual_seed(0)
    net = RetrieverNet(RetrieverNetConfig(query_dim=12, node_dim=NODE_FEATURE_DIM, edge_dim=EDGE_FEATURE_DIM,
                                          hidden=16, layers=3))
    sizes = [5, 9]
    x = torch.randn(sum(sizes), NODE_FEATURE_DIM)
    batch = torch.tensor([0] * 5 + [1] * 9)
    edge_index = torch.tensor([[0, 1, 2, 5, 6, 7, 8], [1, 2, 0, 6, 7, 8, 13]])
    scores, progress = net(torch.randn(2, 12), x, edge_index, torch.randn(7, EDGE_FEATURE_DIM), batch)
    assert scores.shape == (14,) and progress.shape == (2,) and torch.all((progress > 0) & (progress < 1))
    (scores.square().sum() + progress.sum()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters() if p.requires_grad)
    # the query conditions every message: another query changes the scores of the same subgraph
    with torch.no_grad():
        a, _ = net(torch.zeros(2, 12), x, edge_index, torch.zeros(7, EDGE_FEATURE_DIM), batch)
        b, _ = net(torch.ones(2, 12), x, edge_index, torch.zeros(7, EDGE_FEATURE_DIM), batch)
    assert not torch.allclose(a, b)


def _line_graph():
    eps = [line_episode(40, step=(0.01, 0, 0)), line_episode(40, step=(0, 0.02, 0), start=(0, 0.0, 1.0))]
    return build_graph_from_episodes(eps)


def test_reference_synthesis_matches_a_hand_computed_case():
    g = _line_graph()
    a = g.arrays
    first, second = int(a["demo_node_ptr"][0]), int(a["demo_node_ptr"][1])
    now = np.array([0.5, -0.2, 0.9])
    ref = fuse(a, np.array([first, second]), np.array([1.0, 3.0]), now, steps=4)
    # demo 0 moves +1 cm in x per frame, demo 1 +2 cm in y: weights 0.25 / 0.75
    expected = np.array([[0.0025 * (j + 1), 0.015 * (j + 1), 0.0] for j in range(4)])
    np.testing.assert_allclose(ref.dpos, expected, atol=1e-6)
    np.testing.assert_allclose(ref.positions, now + expected, atol=1e-6)
    np.testing.assert_allclose(ref.rel_rot, np.broadcast_to(np.eye(3), (4, 3, 3)), atol=1e-6)
    half = fuse(a, np.array([first]), np.array([1.0]), now, steps=3, time_scale=0.5)  # half a frame per step
    np.testing.assert_allclose(half.dpos[:, 0], [0.005, 0.01, 0.015], atol=1e-6)
    # recorded actions (line_episode: action = arange(7) + t) fused with the same weights
    acts = fused_actions(a, np.array([first, second]), np.array([1.0, 3.0]), steps=2)
    t0, t1 = a["node_span"][first][0], a["node_span"][second][0]
    np.testing.assert_allclose(acts[0], np.arange(7) + 0.25 * t0 + 0.75 * t1, atol=1e-5)
    assert reference_chunk(a, np.array([first]), np.array([1.0]), None, 2, "actions", None, OSC_POSE_DELTA).shape \
        == (2, 7)


def test_query_vector_has_the_layout_width(graph):
    from r2a.retrieval.features import query_vector
    from r2a.retrieval.motion import response_for

    ep = synthetic_episodes(200, seed=3, num_tasks=1)[0]
    layout = QueryLayout()
    window = window_from_arrays(ep.ee_pos, ep.ee_quat, ep.gripper, ep.actions, 20, layout.history)
    q, implied = query_vector(ep.actions[20:36], window, response_for(graph), layout, 20)
    assert q.shape == (layout.dim,) and np.isfinite(q).all() and implied.shape == (16, 3)


def constant_chunk(obs):
    """A stand-in base policy for training tests: the same chunk for every frame (``callable:`` spec)."""
    return np.tile(np.array([0.2, 0.0, -0.1, 0, 0, 0, -1], np.float32), (16, 1))


def _held_out(tmp_path, other: int = 0):
    """Held-out demos with images (``other`` > 0: another set of episodes, images and seeds)."""
    from demos.hdf5_io import write_hdf5

    episodes = synthetic_episodes(600, seed=7 + other, num_tasks=2, mean_length=80)
    for i, ep in enumerate(episodes):
        ep.images = make_episode(length=len(ep), seed=1000 * other + i, size=16).images
        ep.meta["seed"] = 5000 + 100 * other + i
    return write_hdf5(tmp_path / "held_out.hdf5", episodes, env_args={"env_name": "synthetic"})


def test_training_saves_a_versioned_checkpoint_and_resumes(graph, tmp_path):
    from r2a.retrieval.checkpoint import FORMAT, load_retriever
    from training.retriever.config import RetrieverTrainConfig
    from training.retriever.train import train_retriever

    demos = _held_out(tmp_path)
    tiny = ["base=callable:test_retrieval:constant_chunk", "hidden=16", "layers=2", "batch_size=4", "log_every=2",
            "save_every=2", "frame_stride=8", "retrieval.max_nodes=24", "holdout_every=3"]
    out = tmp_path / "ret"
    first = train_retriever(RetrieverTrainConfig.from_yaml(None, tiny + ["steps=3"]), graph.path, [demos], out,
                            progress=False)
    assert first["steps"] == 3 and first["queries"] > 10 and first["val"] > 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == FORMAT and manifest["version"] == 1
    assert sorted(manifest["provenance"]["seeds"])[0] == 5000 and manifest["thresholds"]["max_seed_distance"] > 0
    assert not (out / "optimizer.safetensors").exists()  # a finished run keeps no training state
    assert (out / "queries.npz").is_file()  # ... but its query cache survives every checkpoint save
    second = train_retriever(RetrieverTrainConfig.from_yaml(None, tiny + ["steps=5"]), graph.path, [demos], out,
                             progress=False)
    history = load_retriever(out).history
    assert second["steps"] == 5 and [row["step"] for row in history] == [2, 3, 4, 5]
    with pytest.raises(R2AInputError, match="another config"):
        train_retriever(RetrieverTrainConfig.from_yaml(None, tiny + ["steps=6", "hidden=32"]), graph.path, [demos],
                        out, progress=False)
    manifest["version"] = 2
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(R2AInputError, match="version 2 is not supported"):
        load_retriever(out)


#: the base queries :func:`counted_chunk` answered, and after how many it stops answering (None: never)
BASE_CALLS = {"n": 0, "fail_after": None}


def counted_chunk(obs):
    """:func:`constant_chunk` that counts its queries and can stop answering, as a base server that goes away."""
    BASE_CALLS["n"] += 1
    if BASE_CALLS["fail_after"] is not None and BASE_CALLS["n"] > BASE_CALLS["fail_after"]:
        raise ConnectionError("the base policy stopped answering")
    return constant_chunk(obs)


def test_a_stopped_query_build_resumes_at_the_episode_it_was_on(graph, tmp_path):
    from training.retriever.config import RetrieverTrainConfig
    from training.retriever.queries import CHUNK_CACHE_DIR, load_query_set
    from training.retriever.train import QUERY_CACHE, train_retriever

    first, second = _held_out(tmp_path), _held_out(tmp_path / "second", other=1)
    config = RetrieverTrainConfig.from_yaml(None, ["base=callable:test_retrieval:counted_chunk", "hidden=16",
                                                   "layers=2", "batch_size=4", "steps=1", "frame_stride=8",
                                                   "retrieval.max_nodes=24"])
    BASE_CALLS.update(n=0, fail_after=None)
    train_retriever(config, graph.path, [first, second], tmp_path / "whole", progress=False)
    whole, queried = load_query_set(tmp_path / "whole" / QUERY_CACHE), BASE_CALLS["n"]
    episodes = int(whole.episode.max()) + 1
    assert not (tmp_path / "whole" / CHUNK_CACHE_DIR).exists()  # a private cache goes once the set is saved

    BASE_CALLS.update(n=0, fail_after=queried - 1)  # the server goes away on the very last frame
    with pytest.raises(ConnectionError):
        train_retriever(config, graph.path, [first, second], tmp_path / "stopped", progress=False)
    assert len(list((tmp_path / "stopped" / CHUNK_CACHE_DIR).iterdir())) == episodes - 1  # every episode but the last
    BASE_CALLS.update(n=0, fail_after=None)
    train_retriever(config, graph.path, [first, second], tmp_path / "stopped", progress=False)
    assert BASE_CALLS["n"] == (whole.episode == episodes - 1).sum()  # only the last episode's frames asked again
    resumed = load_query_set(tmp_path / "stopped" / QUERY_CACHE)
    assert resumed.conditions == whole.conditions and resumed.prompt == whole.prompt
    assert resumed.sources == whole.sources and len(resumed.sources) == 2
    for name in ("query", "base_chunk", "episode", "condition", "future_dpos", "phase"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(whole, name))


class CountingBase:
    """A reset-able base whose chunk depends on what it sees (the gripper's position); it counts its queries."""

    def __init__(self) -> None:
        self.asked = 0

    def reset(self) -> None:
        pass

    def infer(self, obs):
        self.asked += 1
        return {"actions": np.tile(np.append(obs["state/ee_pos"], [0, 0, 0, 1]).astype(np.float32), (16, 1))}


def test_the_chunk_cache_answers_only_the_same_base_asked_the_same_frames(tmp_path):
    from training.retriever.queries import ChunkCache, base_chunks

    ep = make_episode(length=12, seed=0, size=16)
    frames, base = np.arange(0, 11, 2), CountingBase()
    cache = ChunkCache(tmp_path / "chunks", "openpi:ws://127.0.0.1:8010")
    first = base_chunks(base, ep, frames, 64, cache)
    assert base.asked == len(frames) and first.shape == (len(frames), 16, 7)
    np.testing.assert_array_equal(base_chunks(base, ep, frames, 64, cache), first)
    assert base.asked == len(frames)  # answered from the cache
    base_chunks(base, ep, frames, 64, ChunkCache(tmp_path / "chunks", "openpi:ws://127.0.0.1:8011"))
    base_chunks(base, ep, frames[:-1], 64, cache)  # another sequence of frames
    ep.images["agentview"][4, 0, 0, 0] ^= 1  # one pixel of one asked frame
    base_chunks(base, ep, frames, 64, cache)
    assert base.asked == len(frames) * 4 - 1 and len(list((tmp_path / "chunks").iterdir())) == 4


def test_the_chunk_cache_tells_two_checkpoints_at_one_address_apart(tmp_path):
    from training.retriever.queries import ChunkCache, base_chunks, base_identity

    url = "openpi:ws://127.0.0.1:8010"
    assert base_identity(url) == base_identity(url, {}) == url  # a base that declares nothing: its spec, as before
    ep, frames, base = make_episode(length=12, seed=0, size=16), np.arange(0, 11, 2), CountingBase()
    for sha in ("a" * 64, "b" * 64, "a" * 64):
        identity = base_identity(url, {"base_checkpoint": {"path": "runs/lerobot/act", "sha256": sha}})
        base_chunks(base, ep, frames, 64, ChunkCache(tmp_path / "chunks", identity))
    assert base.asked == 2 * len(frames)  # the retrained checkpoint is asked anew; the first one's answers kept


def test_training_refuses_demos_that_are_in_the_graph(tmp_path):
    from demos.hdf5_io import write_hdf5
    from graph_builder.build import build_graph_from_paths
    from graph_builder.storage import save_graph
    from r2a_core.provenance import legacy_source_sha256, sha256_file
    from training.retriever.config import RetrieverTrainConfig
    from training.retriever.train import train_retriever

    episodes = synthetic_episodes(600, seed=7, num_tasks=1, mean_length=80)
    for i, ep in enumerate(episodes):
        ep.images = make_episode(length=len(ep), seed=i, size=16).images
    path = write_hdf5(tmp_path / "demos.hdf5", episodes, env_args={"env_name": "synthetic"})
    graph = save_graph(build_graph_from_paths([path]), tmp_path / "g")
    config = RetrieverTrainConfig.from_yaml(None, ["base=callable:test_retrieval:constant_chunk", "steps=1"])
    with pytest.raises(R2AInputError, match="one of the graph's sources"):
        train_retriever(config, graph, [path], tmp_path / "r", progress=False)
    # a graph built before issue 47 recorded its sources' name-salted digest (the shipped graphs do): still refused
    manifest = json.loads((graph / "manifest.json").read_text())
    assert manifest["sources"][0]["sha256"] == sha256_file(path)
    manifest["sources"][0]["sha256"] = legacy_source_sha256(path)
    (graph / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(R2AInputError, match="one of the graph's sources"):
        train_retriever(config, graph, [path], tmp_path / "r", progress=False)
