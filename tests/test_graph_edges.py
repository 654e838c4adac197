"""Edges: temporal offsets inside a demo; spatial k-nearest nodes of other demos, built with FAISS."""

from __future__ import annotations

import numpy as np
import pytest

from graph_builder.build import build_graph_from_episodes
from graph_builder.config import GraphConfig, apply_override
from graph_builder.edges import SPATIAL, TEMPORAL, spatial_edges, temporal_edges
from graph_builder.synthetic import line_episode, synthetic_episodes


@pytest.fixture(scope="module")
def graph():
    return build_graph_from_episodes(synthetic_episodes(4000, seed=5))


def test_temporal_edges_follow_offsets_inside_each_demo():
    ptr = np.array([0, 3, 23])  # demo 0: 3 nodes, demo 1: 20 nodes
    index, offset = temporal_edges(ptr, (1, 2, 4, 8, 16))
    demo = np.repeat([0, 1], [3, 20])
    assert np.all(demo[index[0]] == demo[index[1]])
    np.testing.assert_array_equal(index[1] - index[0], offset)
    assert sorted(set(offset.tolist())) == [-16, -8, -4, -2, -1, 1, 2, 4, 8, 16]
    # demo of n nodes has 2 * (n - d) edges for each offset d < n
    expected = sum(2 * max(n - d, 0) for n in (3, 20) for d in (1, 2, 4, 8, 16))
    assert index.shape == (2, expected)
    pairs = set(map(tuple, index.T.tolist()))
    assert all((b, a) in pairs for a, b in pairs)  # symmetric


def test_temporal_offsets_are_configurable():
    cfg = apply_override(GraphConfig(), "edges.temporal_offsets=[2, 4, 6, 8]")
    g = build_graph_from_episodes(synthetic_episodes(1500, seed=6), cfg)
    offsets = g.arrays["edge_offset"][g.arrays["edge_type"] == TEMPORAL]
    assert sorted(set(offsets.tolist())) == [-8, -6, -4, -2, 2, 4, 6, 8]


def _spatial(g):
    sel = g.arrays["edge_type"] == SPATIAL
    return g.arrays["edge_index"][:, sel].astype(np.int64), g.arrays["edge_dist"][sel]


def _exact_neighbours(keys, demo, task, k, cross_task=True):
    """Brute-force reference: k nearest other-demo nodes per node (ties by id)."""
    d2 = ((keys[:, None, :].astype(np.float64) - keys[None, :, :]) ** 2).sum(-1)
    bad = demo[:, None] == demo[None, :]
    if not cross_task:
        bad |= task[:, None] != task[None, :]
    d2[bad] = np.inf
    ids = np.arange(keys.shape[0])
    return [set(ids[np.lexsort((ids, row))][:k].tolist()) for row in d2]


def test_spatial_edges_are_the_k_nearest_nodes_of_other_demos(graph):
    a = graph.arrays
    index, dist = _spatial(graph)
    n, k = graph.num_nodes, graph.manifest["build_config"]["edges"]["spatial_k"]
    src, dst = index
    assert np.all(a["node_demo"][src] != a["node_demo"][dst])
    np.testing.assert_array_equal(np.bincount(dst, minlength=n), k)  # each node receives k spatial messages
    keys = a["node_key"][:, :10]  # the spatial key leaves phase (last column) out
    np.testing.assert_allclose(dist, np.linalg.norm(keys[src] - keys[dst], axis=1), rtol=1e-4, atol=1e-5)
    assert set(a["node_task"][src] != a["node_task"][dst]) == {False, True}  # crosses tasks by default
    exact = _exact_neighbours(keys, a["node_demo"], a["node_task"], k)
    got = [set() for _ in range(n)]
    for s, d in zip(src.tolist(), dst.tolist()):
        got[d].add(s)
    assert got == exact


def test_spatial_edges_within_task_only():
    cfg = apply_override(GraphConfig(), "edges.spatial_cross_task=false")
    g = build_graph_from_episodes(synthetic_episodes(2000, seed=7), cfg)
    (src, dst), _ = _spatial(g)
    assert np.all(g.arrays["node_task"][src] == g.arrays["node_task"][dst])
    assert np.all(g.arrays["node_demo"][src] != g.arrays["node_demo"][dst])


def test_ivf_spatial_edges_match_exact_ones():
    episodes = synthetic_episodes(4000, seed=8)
    exact = build_graph_from_episodes(episodes)
    ivf = build_graph_from_episodes(episodes, apply_override(GraphConfig(), "index.edge_exact_max_nodes=0"))
    (es, ed), _ = _spatial(exact)
    (is_, id_), _ = _spatial(ivf)
    exact_pairs, ivf_pairs = set(zip(es.tolist(), ed.tolist())), set(zip(is_.tolist(), id_.tolist()))
    assert len(ivf_pairs) == len(exact_pairs)
    assert len(exact_pairs & ivf_pairs) / len(exact_pairs) > 0.97


def test_spatial_edges_with_too_few_other_nodes():
    # one demo: nothing to connect to; two tiny demos: fewer eligible nodes than k
    one = build_graph_from_episodes([line_episode(30)])
    assert one.manifest["counts"]["edges"]["spatial"] == 0
    two = build_graph_from_episodes([line_episode(12), line_episode(12, start=(0.0, 0.1, 1.0))])
    (src, dst), _ = _spatial(two)
    nodes_per_demo = np.diff(two.arrays["demo_node_ptr"])
    np.testing.assert_array_equal(np.bincount(dst), nodes_per_demo[1 - two.arrays["node_demo"]])


def test_spatial_edges_function_is_deterministic_under_ties():
    keys = np.zeros((40, 3), np.float32)  # all nodes identical: ties everywhere, broken by node id
    demo = np.repeat(np.arange(8), 5).astype(np.int32)
    cfg = GraphConfig()
    a = spatial_edges(keys, demo, np.zeros(40, np.int32), cfg.edges, cfg.index)
    b = spatial_edges(keys, demo, np.zeros(40, np.int32), cfg.edges, cfg.index)
    np.testing.assert_array_equal(a[0], b[0])
    first = a[0][0][a[0][1] == 0]
    assert first.tolist() == list(range(5, 5 + cfg.edges.spatial_k))
