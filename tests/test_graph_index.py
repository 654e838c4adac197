"""Seed index: kind by size, all kinds round-trip and find the right nodes, deliberate thread counts."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

import graph_builder.motion_graph as motion_graph
from graph_builder.build import build_graph_from_episodes
from graph_builder.config import GraphConfig, IndexConfig, apply_override
from graph_builder.index import choose_index_type, faiss_threads, ivf_nlist
from graph_builder.storage import load_graph, save_graph
from graph_builder.synthetic import synthetic_episodes


def test_index_kind_by_size():
    cfg = IndexConfig(exact_max_nodes=1000)
    assert choose_index_type(1000, cfg) == "flat"
    assert choose_index_type(1001, cfg) == "ivf"
    assert choose_index_type(10, IndexConfig(type="hnsw")) == "hnsw"
    assert ivf_nlist(200_000, cfg) == 2048  # 4·sqrt(N) → power of two
    assert ivf_nlist(500, cfg) == 12  # capped: at least 39 training points per list
    assert ivf_nlist(200_000, IndexConfig(nlist=300)) == 300


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_every_index_kind_round_trips_and_finds_neighbours(tmp_path, kind):
    cfg = apply_override(GraphConfig(), f"index.type={kind}")
    graph = build_graph_from_episodes(synthetic_episodes(3000, seed=21), cfg)
    loaded = load_graph(save_graph(graph, tmp_path / kind))
    assert loaded.manifest["index"]["type"] == kind
    keys = loaded.arrays["node_key"]
    rng = np.random.default_rng(0)
    queries = keys[rng.choice(len(keys), 50, replace=False)] + rng.normal(0, 0.05, (50, keys.shape[1]))
    exact = faiss.IndexFlatL2(keys.shape[1])
    exact.add(keys)
    _, truth = exact.search(queries.astype(np.float32), 10)
    _, got = loaded.search(queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth.tolist(), got.tolist())])
    assert recall >= (1.0 if kind == "flat" else 0.9)


def test_single_queries_use_query_threads(monkeypatch):
    graph = build_graph_from_episodes(synthetic_episodes(1000, seed=22))
    seen = []
    real = motion_graph.search

    def spy(index, queries, k, threads):
        seen.append((len(np.atleast_2d(queries)), threads))
        return real(index, queries, k, threads)

    monkeypatch.setattr(motion_graph, "search", spy)
    before = faiss.omp_get_max_threads()
    graph.search(graph.arrays["node_key"][0], 10)
    graph.search(graph.arrays["node_key"][:100], 10)
    assert seen == [(1, 1), (100, 0)]  # query_threads=1 for one query, all cores for a batch
    assert faiss.omp_get_max_threads() == before


def test_faiss_threads_restores_the_thread_count():
    before = faiss.omp_get_max_threads()
    with faiss_threads(1):
        assert faiss.omp_get_max_threads() == 1
    assert faiss.omp_get_max_threads() == before


def test_gpu_copies_are_used_when_faiss_sees_a_gpu(monkeypatch):
    """No GPU here: stand-in GPU functions check that k-means and searches are routed to the GPU copy."""
    import graph_builder.index as index_mod

    moved = []

    def to_gpu(_res, _device, index):
        moved.append(type(faiss.downcast_index(index)).__name__)
        return faiss.clone_index(index)

    monkeypatch.setattr(faiss, "StandardGpuResources", lambda: object(), raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
    assert index_mod.use_gpu("auto") and not index_mod.use_gpu("off")
    cfg = apply_override(apply_override(GraphConfig(), "index.type=ivf"), "index.edge_exact_max_nodes=0")
    graph = build_graph_from_episodes(synthetic_episodes(2000, seed=23), cfg)
    assert graph.manifest["index"]["built_on_gpu"] is True
    assert moved.count("IndexFlatL2") == 2  # k-means of the seed index and of the spatial-edge index
    assert moved.count("IndexIVFFlat") == 1  # spatial-edge searches
    graph.search(graph.arrays["node_key"][:1], 5)
    assert moved.count("IndexIVFFlat") == 2  # seed searches run on a GPU copy too
    assert type(faiss.downcast_index(graph.index)).__name__ == "IndexIVFFlat"  # what gets saved stays on the CPU
