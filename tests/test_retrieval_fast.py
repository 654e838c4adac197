"""The fast single-query path is exact to the training path: the same GNN scores (within 1e-5) on random networks
and subgraphs and on the shipped checkpoint, the same keys and subgraphs, features within float32 rounding, and
the same retrieval — chosen nodes, weights, reference chunk — on a synthetic graph; the learned gate's arrays
equal its module, and its image signal's embedding is bit for bit the plain one."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from graph_builder.build import build_graph_from_episodes
from graph_builder.synthetic import synthetic_episodes
from r2a.retrieval.config import RetrievalSettings
from r2a.retrieval.features import (
    EDGE_FEATURE_DIM,
    NODE_FEATURE_DIM,
    NodeTable,
    QueryLayout,
    node_features,
    quat_matrices,
    window_rotations,
)
from r2a.retrieval.gnn import RetrieverNet, RetrieverNetConfig
from r2a.retrieval.gnn_fast import FastRetrieverNet
from r2a.retrieval.history import window_from_arrays
from r2a.retrieval.motion import response_for
from r2a.retrieval.retriever import PoseKey, Retriever
from r2a.retrieval.synthesis import reference_chunk
from r2a_core.errors import R2AInputError
from r2a_core.rotations import quat_to_matrix
from r2a_core.types import OSC_POSE_DELTA

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def episodes():
    return synthetic_episodes(4000, seed=0, num_tasks=2, mean_length=80)


@pytest.fixture(scope="module")
def graph(episodes):
    return build_graph_from_episodes(episodes)


def _random_net(seed: int, query_dim: int, hidden: int = 32, layers: int = 3) -> RetrieverNet:
    """A network with random weights and random (not unit) input normalization, as a trained one has."""
    torch.manual_seed(seed)
    net = RetrieverNet(RetrieverNetConfig(query_dim=query_dim, node_dim=NODE_FEATURE_DIM, edge_dim=EDGE_FEATURE_DIM,
                                          hidden=hidden, layers=layers))
    net.set_normalization({name: (torch.randn(dim), 0.5 + torch.rand(dim))
                           for name, dim in (("query", query_dim), ("node", NODE_FEATURE_DIM),
                                             ("edge", EDGE_FEATURE_DIM))})
    return net.eval()


def _random_subgraph(rng: np.random.Generator, n: int, edges: int, query_dim: int) -> tuple[np.ndarray, ...]:
    query = rng.normal(size=query_dim).astype(np.float32)
    x = rng.normal(size=(n, NODE_FEATURE_DIM)).astype(np.float32)
    edge_index = rng.integers(0, n, (2, edges)) if edges else np.zeros((2, 0), np.int64)
    edge_attr = rng.normal(size=(edges, EDGE_FEATURE_DIM)).astype(np.float32)
    return query, x, edge_index, edge_attr


def _training_scores(net: RetrieverNet, query, x, edge_index, edge_attr) -> tuple[np.ndarray, float]:
    with torch.no_grad():
        scores, progress = net(torch.from_numpy(query[None]), torch.from_numpy(x), torch.from_numpy(edge_index),
                               torch.from_numpy(edge_attr), torch.zeros(len(x), dtype=torch.long))
    return scores.numpy(), float(progress[0])


@pytest.mark.parametrize("hidden, layers", [(32, 3), (16, 2), (64, 1)])
def test_fast_gnn_scores_equal_the_training_network_on_random_subgraphs(hidden, layers):
    rng = np.random.default_rng(hidden + layers)
    for seed in range(3):
        net = _random_net(seed, query_dim=20, hidden=hidden, layers=layers)
        fast = FastRetrieverNet(net)
        # ~100-node subgraphs like the wrapper's, nodes without incoming edges, a lone node, no edges at all
        for n, edges in ((100, 750), (40, 25), (1, 0), (12, 0), (30, 300)):
            args = _random_subgraph(rng, n, edges, 20)
            scores, progress = fast(*args)
            want, want_progress = _training_scores(net, *args)
            assert scores.shape == (n,) and scores.dtype == np.float32
            np.testing.assert_allclose(scores, want, rtol=0, atol=TOLERANCE)
            assert abs(progress - want_progress) < TOLERANCE


def test_fast_gnn_equals_the_shipped_checkpoint_and_leaves_the_thread_count_alone():
    from r2a.retrieval.checkpoint import load_retriever
    from r2a.wrapper.config import DEFAULT_CONFIG, R2AConfig, resolve_path

    net = load_retriever(resolve_path(str(R2AConfig.from_yaml(DEFAULT_CONFIG).retriever))).net.eval()
    fast = FastRetrieverNet(net)
    rng = np.random.default_rng(0)
    threads = torch.get_num_threads()
    for _ in range(5):  # inputs around the checkpoint's own normalization, so activations are realistic
        query, x, edge_index, edge_attr = _random_subgraph(rng, 96, 700, net.config.query_dim)
        query = query * net.query_std.numpy() + net.query_mean.numpy()
        x = x * net.node_std.numpy() + net.node_mean.numpy()
        scores, progress = fast(query, x, edge_index, edge_attr)
        want, want_progress = _training_scores(net, query, x, edge_index, edge_attr)
        np.testing.assert_allclose(scores, want, rtol=0, atol=TOLERANCE)
        assert abs(progress - want_progress) < TOLERANCE
    assert torch.get_num_threads() == threads  # one thread inside the call, restored after it


def test_fast_pieces_are_identical_to_the_training_code(graph, episodes):
    a = graph.arrays
    rng = np.random.default_rng(1)
    quats = rng.normal(size=(50, 4))
    np.testing.assert_array_equal(quat_matrices(quats), quat_to_matrix(quats))
    key_of, table = PoseKey.of(graph.key_spec), NodeTable(a, executed=8)
    layout = QueryLayout()
    for i in range(20):
        ep = episodes[i]
        t = int(rng.integers(0, len(ep)))
        window = window_from_arrays(ep.ee_pos, ep.ee_quat, ep.gripper, ep.actions, t, layout.history)
        phase, r_now = float(rng.random()), window_rotations(window)[-1]
        key = graph.make_key(window.now_pos, window.now_quat, window.now_gripper, phase)[0]
        np.testing.assert_array_equal(key_of(window.now_pos, r_now, window.now_gripper, phase), key)
        nodes = rng.choice(graph.num_nodes, 60, replace=False)
        implied = rng.normal(size=(16, 3)) * 0.01
        fast, _ = table.features(nodes, key, window.now_pos, r_now, window.now_gripper, phase, implied)
        want = node_features(a, nodes, key, window.now_pos, window.now_quat, window.now_gripper, phase, implied, 8)
        np.testing.assert_allclose(fast, want, rtol=1e-6, atol=1e-6)  # numpy's 3×3 products: last-bit rounding


def _queries(episodes, retriever: Retriever, count: int, paraphrase_every: int = 3):
    """(chunk, window, prompt, phase, step) of random demo frames; every few a prompt of no graph task."""
    rng = np.random.default_rng(2)
    out = []
    for i in range(count):
        ep = episodes[int(rng.integers(len(episodes)))]
        t = int(rng.integers(0, len(ep)))
        window = window_from_arrays(ep.ee_pos, ep.ee_quat, ep.gripper, ep.actions, t, retriever.layout.history)
        chunk = np.asarray(ep.actions[t:t + 16], np.float64) + rng.normal(0, 0.1, (min(16, len(ep) - t), 7))
        prompt = "do something else" if i % paraphrase_every == 0 else ep.instruction
        out.append((chunk, window, prompt, retriever.phase_for(t, prompt), t))
    return out


@pytest.mark.parametrize("mode", ["gnn", "knn"])
def test_fast_and_training_paths_retrieve_the_same_nodes_weights_and_reference(graph, episodes, mode):
    net = _random_net(3, QueryLayout().dim, hidden=32)
    response = response_for(graph)
    fast = Retriever(graph, response, RetrievalSettings(mode=mode), QueryLayout(), net=net)
    training = fast.with_inference("training")
    assert fast.fast_net is not None and fast.node_table is not None and training.fast_net is None
    for chunk, window, prompt, phase, step in _queries(episodes, fast, 40):
        a = fast.candidates(chunk, window, prompt, phase, step)
        b = training.candidates(chunk, window, prompt, phase, step)
        for field in ("nodes", "edge_index", "edge_ids"):
            np.testing.assert_array_equal(getattr(a.subgraph, field), getattr(b.subgraph, field))
        assert a.subgraph.seeds == b.subgraph.seeds and a.seed_distance == b.seed_distance
        np.testing.assert_allclose(a.x, b.x, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(a.query, b.query)
        np.testing.assert_array_equal(a.key_distance, b.key_distance)
        found, want = fast.retrieve(chunk, window, prompt, phase, step), training.retrieve(chunk, window, prompt,
                                                                                          phase, step)
        np.testing.assert_array_equal(found.nodes, want.nodes)
        np.testing.assert_allclose(found.weights, want.weights, rtol=0, atol=TOLERANCE)
        for name in ("progress", "entropy", "top_weight"):
            assert abs(getattr(found, name) - getattr(want, name)) < TOLERANCE
        refs = [reference_chunk(graph.arrays, r.nodes, r.weights, window, 8, conversion, response, OSC_POSE_DELTA)
                for r in (found, want) for conversion in ("actions", "response")]
        np.testing.assert_allclose(refs[0], refs[2], rtol=0, atol=TOLERANCE)
        np.testing.assert_allclose(refs[1], refs[3], rtol=0, atol=TOLERANCE)


def test_the_fast_path_is_the_default_and_names_are_checked(graph):
    assert RetrievalSettings().inference == "fast"
    retriever = Retriever(graph, response_for(graph), RetrievalSettings(), QueryLayout(),
                          net=_random_net(0, QueryLayout().dim))
    assert isinstance(retriever.fast_net, FastRetrieverNet)
    assert Retriever(graph, response_for(graph), replace(RetrievalSettings(), inference="training"),
                     QueryLayout()).node_table is None
    with pytest.raises(R2AInputError, match="unknown inference path 'fats'"):
        retriever.with_inference("fats")


def test_learned_gate_arrays_equal_its_torch_module():
    from r2a.wrapper.gate import GateInputs
    from r2a.wrapper.learned_gate import GateLayout, LearnedGate, build_gate_net

    layout = GateLayout(signals=("disagreement",))
    torch.manual_seed(0)
    net = build_gate_net(layout, hidden=32, max_gate=0.5)
    with torch.no_grad():
        net.x_mean.normal_()
        net.x_std.uniform_(0.5, 2.0)
        net.mlp[-1].bias.normal_()
    fast, module = LearnedGate(net, layout, OSC_POSE_DELTA), LearnedGate(net, layout, OSC_POSE_DELTA, fast=False)
    assert fast.arrays is not None and module.arrays is None
    rng = np.random.default_rng(0)
    for _ in range(20):
        inputs = GateInputs(base=rng.uniform(-1, 1, (8, 7)), reference=rng.uniform(-1, 1, (8, 7)),
                            base_chunk=rng.uniform(-1, 1, (16, 7)), previous_plan=rng.uniform(-1, 1, (8, 7)),
                            retrieval={"entropy": 0.5, "top_weight": 0.2, "seed_distance": 0.3, "progress": 0.4},
                            proprio={"ee_pos": rng.normal(size=3), "gripper": np.array(0.5)}, step=40)
        np.testing.assert_allclose(fast(inputs), module(inputs), rtol=0, atol=1e-6)


def test_perf_retrieval_times_both_paths_side_by_side():
    from eval.perf.retrieval_latency import PATHS, STAGES, format_table, measure_wrapper_latency

    row = measure_wrapper_latency(nodes=400, queries=4, warmup=1)
    assert set(row["paths"]) == set(PATHS) and row["paths_agree"] == 1.0 and row["queries"] == 4
    for path in row["paths"].values():
        assert set(path["stages_ms_p50"]) == set(STAGES) and path["query_ms_p50"] > 0
        assert 0 < path["query_cpu_ms_p50"] <= path["query_cpu_ms_p99"]  # the thread's CPU time beside the wall
        assert sum(path["stages_ms_p50"].values()) > 0
    assert row["query_ms_p50"] == row["paths"]["fast"]["query_ms_p50"]
    table = format_table({"rows": [row], "base": {"query_ms_p50": 1.0, "query_ms_p99": 1.0, "per_step_ms_p50": 1.0},
                          "target_p99_ms_at_100k": 2.0, "machine": {"cpu": "cpu", "load_avg": [0.0]}})
    assert "| training p50 | training p99 | fast p50 | fast p99 |" in table and "| gnn |" in table
    assert "| query CPU p50 ms | query CPU p99 ms |" in table


def _plain_image_features(image: np.ndarray) -> np.ndarray:
    """The image embedding as first written — one numpy call per statistic — the reference the gate's fast one
    must equal bit for bit (so the gate's S does not move)."""
    from r2a_core.visual_ood import HIST_BINS, POOL_SIZE, _pooled

    small = _pooled(np.asarray(image)) / 255.0
    flat = small.reshape(-1, 3)
    bins = np.minimum((flat * HIST_BINS).astype(np.int64), HIST_BINS - 1)
    hist = [np.bincount(bins[:, c], minlength=HIST_BINS) / len(flat) for c in range(3)]
    hi, lo = flat.max(axis=1), flat.min(axis=1)
    sat = np.where(hi > 1e-6, (hi - lo) / np.maximum(hi, 1e-6), 0.0)
    lum = small @ np.array([0.299, 0.587, 0.114])
    grid = lum.reshape(4, POOL_SIZE // 4, 4, POOL_SIZE // 4).mean(axis=(1, 3)).ravel()
    gy, gx = np.abs(np.diff(lum, axis=0))[:, :-1], np.abs(np.diff(lum, axis=1))[:-1, :]
    grad = gx + gy
    half = grad.shape[0] // 2
    energy = [grad[:half, :half].mean(), grad[:half, half:].mean(), grad[half:, :half].mean(),
              grad[half:, half:].mean()]
    return np.concatenate([flat.mean(0), flat.std(0), *hist, [sat.mean(), sat.std()], grid, energy])


@pytest.mark.parametrize("size", [32, 64, 77, 128, 224])
def test_image_features_are_bit_identical_to_the_plain_statistics(size):
    from r2a_core.visual_ood import pooled_image_features

    rng = np.random.default_rng(size)
    yy, xx = np.mgrid[:size, :size]
    ramp = np.stack([xx * 255 // size, yy * 255 // size, (xx + yy) * 127 // size], -1)
    images = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8), np.full((size, size, 3), 37, np.uint8),
              np.zeros((size, size, 3), np.uint8),
              np.clip(ramp + rng.integers(-20, 20, ramp.shape), 0, 255).astype(np.uint8),
              (rng.random((size, size, 3)) ** 3 * 255).astype(np.uint8)]
    for image in images:
        np.testing.assert_array_equal(pooled_image_features(image), _plain_image_features(image))


def test_bound_gate_still_zeroes_non_finite_entries():
    from r2a.wrapper.gate import bound_gate

    s = np.array([[0.2, np.nan, np.inf, -np.inf, 0.9, -0.1, 0.3]])
    np.testing.assert_array_equal(bound_gate(s, OSC_POSE_DELTA, 0.5), [[0.2, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0]])


@pytest.mark.parametrize("size", [64, 224, 512, 1024])
def test_block_pooling_equals_the_area_resize(size):
    """The block mean's integer sums (uint16 while a block's sum fits) give resize_image's numbers, white included."""
    from r2a_core.images import resize_image
    from r2a_core.visual_ood import POOL_SIZE, _pooled

    rng = np.random.default_rng(size)
    for image in (rng.integers(0, 256, (size, size, 3), dtype=np.uint8), np.full((size, size, 3), 255, np.uint8)):
        want = resize_image(image, (POOL_SIZE, POOL_SIZE)).astype(np.float64)
        np.testing.assert_array_equal(_pooled(image), want)
