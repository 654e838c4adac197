"""On-disk format: round trip, determinism, atomic writes, and rejection of bad graph directories."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from graph_builder.build import build_graph_from_episodes
from graph_builder.config import GraphConfig, apply_override
from graph_builder.storage import FORMAT_VERSION, load_graph, read_manifest, save_graph
from graph_builder.synthetic import synthetic_episodes
from r2a_core.errors import R2AInputError


@pytest.fixture(scope="module")
def episodes():
    return synthetic_episodes(3000, seed=11)


@pytest.fixture()
def saved(tmp_path, episodes):
    graph = build_graph_from_episodes(episodes)
    return graph, save_graph(graph, tmp_path / "g")


def test_round_trip(saved):
    graph, path = saved
    loaded = load_graph(path)
    assert sorted(p.name for p in path.iterdir()) == ["arrays", "index.faiss", "manifest.json"]
    assert loaded.manifest == graph.manifest
    assert set(loaded.arrays) == set(graph.arrays)
    for name, arr in graph.arrays.items():
        np.testing.assert_array_equal(loaded.arrays[name], arr, err_msg=name)
        assert loaded.arrays[name].dtype == arr.dtype
    queries = graph.arrays["node_key"][::50] + 0.01
    d0, i0 = graph.search(queries, 10)
    d1, i1 = loaded.search(queries, 10)
    np.testing.assert_array_equal(i0, i1)
    np.testing.assert_allclose(d0, d1)
    mapped = load_graph(path, mmap=True)
    assert isinstance(mapped.arrays["future_dpos"], np.memmap)


def test_seed_search_finds_the_node_itself(saved):
    graph, _ = saved
    keys = graph.arrays["node_key"][[0, 7, 99]]
    dist, ids = graph.search(keys, 5)
    assert ids.shape == (3, 5) and ids[:, 0].tolist() == [0, 7, 99]
    np.testing.assert_allclose(dist[:, 0], 0.0, atol=1e-3)
    assert np.all(np.diff(dist, axis=1) >= 0)
    with pytest.raises(R2AInputError, match="dims"):
        graph.search(np.zeros((1, 3), np.float32), 5)


def test_task_search_is_the_exact_in_task_nearest(saved):
    graph, _ = saved
    node_task, keys = graph.arrays["node_task"], graph.arrays["node_key"]
    assert len(graph.tasks) > 1
    query = keys[::97] + 0.05
    for task in range(len(graph.tasks)):
        dist, ids = graph.search_task(query, 4, task)
        assert np.all(node_task[ids] == task)
        mine = np.flatnonzero(node_task == task)
        brute = np.linalg.norm(keys[mine][None] - query[:, None], axis=2)
        np.testing.assert_allclose(dist, np.sort(brute, axis=1)[:, :4], rtol=1e-4, atol=1e-4)
    with pytest.raises(R2AInputError, match="out of range"):
        graph.search_task(query, 4, len(graph.tasks))


def test_to_pyg_hetero_and_homogeneous(saved):
    pytest.importorskip("torch_geometric")
    graph, _ = saved
    c = graph.manifest["counts"]
    hetero = graph.to_pyg()
    assert hetero["primitive"].num_nodes == c["nodes"]
    assert tuple(hetero["primitive"].x.shape) == (c["nodes"], graph.index.d)
    assert hetero["primitive", "temporal", "primitive"].edge_index.shape[1] == c["edges"]["temporal"]
    assert hetero["primitive", "spatial", "primitive"].edge_index.shape[1] == c["edges"]["spatial"]
    assert hetero["primitive"].future_dpos.shape[1] == graph.manifest["features"]["future"]["frames"]
    homo = graph.to_pyg(hetero=False)
    assert homo.num_nodes == c["nodes"] and homo.edge_index.shape[1] == c["edges"]["total"]
    assert set(homo.edge_type.unique().tolist()) == {0, 1}
    assert homo.edge_index.dtype == hetero["primitive", "spatial", "primitive"].edge_index.dtype
    homo.validate(raise_on_error=True)
    hetero.validate(raise_on_error=True)


def _digests(path):
    manifest = read_manifest(path)
    return json.dumps(manifest, sort_keys=True), (path / "manifest.json").read_bytes()


def test_build_is_deterministic(tmp_path, episodes):
    # IVF everywhere and different thread counts: still byte-identical output
    base = apply_override(apply_override(GraphConfig(), "index.type=ivf"), "index.edge_exact_max_nodes=0")
    one = save_graph(build_graph_from_episodes(episodes, apply_override(base, "index.build_threads=1")),
                     tmp_path / "a")
    two = save_graph(build_graph_from_episodes(episodes, base), tmp_path / "b")
    ma, mb = read_manifest(one), read_manifest(two)
    assert ma["index"]["type"] == "ivf"
    assert ma["files"] == mb["files"]  # every array and the index hash identically
    ma["build_config"]["index"].pop("build_threads")
    mb["build_config"]["index"].pop("build_threads")
    assert ma == mb


def test_existing_output_needs_overwrite(saved):
    graph, path = saved
    with pytest.raises(R2AInputError, match="already exists"):
        save_graph(graph, path)
    before = read_manifest(path)["files"]
    save_graph(graph, path, overwrite=True)
    assert read_manifest(path)["files"] == before
    assert [p.name for p in path.parent.iterdir()] == ["g"]  # no temporary or old directories left behind


def test_failed_write_leaves_no_trace(tmp_path, episodes, monkeypatch):
    graph = build_graph_from_episodes(episodes)
    import graph_builder.storage as storage

    def boom(*_):
        raise OSError("disk full")

    monkeypatch.setattr(storage, "serialize_index", boom)
    with pytest.raises(OSError):
        save_graph(graph, tmp_path / "g")
    assert list(tmp_path.iterdir()) == []


def _edit_manifest(path, fn):
    manifest = json.loads((path / "manifest.json").read_text())
    fn(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_rejects_unknown_version(saved):
    _, path = saved
    _edit_manifest(path, lambda m: m.update(format_version=FORMAT_VERSION + 1))
    with pytest.raises(R2AInputError, match=r"format version 2 is not supported.*upgrade r2a or rebuild"):
        load_graph(path)


def test_rejects_non_graph_directories(tmp_path, saved):
    with pytest.raises(R2AInputError, match="not a directory"):
        load_graph(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(R2AInputError, match="no manifest.json"):
        load_graph(tmp_path / "empty")
    _, path = saved
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(R2AInputError, match="not valid JSON"):
        load_graph(path)
    (path / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(R2AInputError, match="expected 'r2a-motion-graph'"):
        load_graph(path)


def test_rejects_corrupted_files(saved):
    _, path = saved
    target = path / "arrays" / "future_dpos.npy"
    data = bytearray(target.read_bytes())
    data[-3] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(R2AInputError, match="future_dpos.npy: sha256 does not match"):
        load_graph(path)
    load_graph(path, verify=False)  # sizes still match: only hashing catches a flipped byte


def test_rejects_truncated_and_missing_files(saved):
    _, path = saved
    index = path / "index.faiss"
    index.write_bytes(index.read_bytes()[:-10])
    with pytest.raises(R2AInputError, match="index.faiss: .* bytes, manifest says"):
        load_graph(path, verify=False)
    (path / "arrays" / "edge_type.npy").unlink()
    with pytest.raises(R2AInputError, match="edge_type.npy: missing"):
        load_graph(path)


def test_rejects_files_from_another_graph(tmp_path, saved, episodes):
    _, path = saved
    other = save_graph(build_graph_from_episodes(episodes[:5]), tmp_path / "other")
    # swap in another graph's array *and* its manifest entry, so only the cross-check can notice
    shutil.copy(other / "arrays" / "node_key.npy", path / "arrays" / "node_key.npy")
    entry = read_manifest(other)["files"]["arrays/node_key.npy"]
    _edit_manifest(path, lambda m: m["files"].update({"arrays/node_key.npy": entry}))
    with pytest.raises(R2AInputError, match="node_key has shape .* do not belong together"):
        load_graph(path)


def test_rejects_index_from_another_graph(tmp_path, saved, episodes):
    _, path = saved
    other = save_graph(build_graph_from_episodes(episodes[:5]), tmp_path / "other")
    shutil.copy(other / "index.faiss", path / "index.faiss")
    entry = read_manifest(other)["files"]["index.faiss"]
    _edit_manifest(path, lambda m: m["files"].update({"index.faiss": entry}))
    with pytest.raises(R2AInputError, match="index holds .* vectors"):
        load_graph(path)


def test_rejects_garbage_index(saved):
    _, path = saved
    index = path / "index.faiss"
    index.write_bytes(b"\0" * index.stat().st_size)
    with pytest.raises(R2AInputError, match="not a readable FAISS index"):
        load_graph(path, verify=False)
