"""Graph edges: temporal edges inside a demo and spatial edges to the nearest nodes of *other* demos.

Edge direction follows torch_geometric (messages flow ``edge_index[0] → edge_index[1]``):

* temporal ``u → v`` with ``offset = v − u`` in node steps of the same demo, for every ±Δ of the config;
* spatial ``j → i`` for each of the ``k`` nearest nodes ``j`` of node ``i`` that belong to another demo, so each
  node *receives* exactly ``k`` spatial messages (fewer only if fewer eligible nodes exist).

Spatial candidates come from FAISS (IVF above the exact-size threshold), then are re-ranked with float64
distances and ties broken by node id, so the edges do not depend on thread count or floating-point noise.
"""

from __future__ import annotations

import logging

import faiss
import numpy as np
from tqdm import tqdm

from graph_builder.config import EdgeConfig, IndexConfig
from graph_builder.index import build_index, index_kind, search, search_device_index, set_search_params

log = logging.getLogger(__name__)

TEMPORAL, SPATIAL = 0, 1
EDGE_TYPES = {TEMPORAL: "temporal", SPATIAL: "spatial"}

#: queries per FAISS batch when building spatial edges (bounds the candidate arrays' memory)
_BATCH = 16384
#: candidates are escalated up to this many before the remaining rows are solved by brute force (faiss-gpu
#: returns at most 2048 neighbours per query, so keep this below that)
_MAX_CANDIDATES = 1024


def temporal_edges(demo_node_ptr: np.ndarray, offsets: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``(2, E)`` temporal edges and their signed offsets, ordered by offset (+1, −1, +2, −2, …) then source."""
    counts = np.diff(demo_node_ptr)
    node = np.arange(int(demo_node_ptr[-1]), dtype=np.int64)
    local = node - np.repeat(demo_node_ptr[:-1], counts)
    size = np.repeat(counts, counts)
    pairs, offs = [], []
    for delta in offsets:
        for o in (delta, -delta):
            ok = (local + o >= 0) & (local + o < size)
            src = node[ok]
            pairs.append(np.stack([src, src + o]))
            offs.append(np.full(src.shape[0], o, dtype=np.int32))
    if not pairs:
        return np.zeros((2, 0), np.int64), np.zeros(0, np.int32)
    return np.concatenate(pairs, axis=1), np.concatenate(offs)


def spatial_edges(keys: np.ndarray, node_demo: np.ndarray, node_task: np.ndarray, cfg: EdgeConfig,
                  index_cfg: IndexConfig, progress: bool = False, index: faiss.Index | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(2, E)`` spatial edges (neighbour → node) and their key-space distances, ordered by target node.

    Exact search up to ``index.edge_exact_max_nodes`` nodes, IVF above (exact kNN of all nodes is O(N²)).
    ``index`` may be a prebuilt CPU index over exactly ``keys`` (the seed index), reused when of that kind.
    """
    n, k = keys.shape[0], cfg.spatial_k
    if k == 0 or n == 0:
        return np.zeros((2, 0), np.int64), np.zeros(0, np.float32)
    need = np.minimum(k, _eligible_counts(node_demo, node_task, cfg.spatial_cross_task))
    kind = "flat" if n <= index_cfg.edge_exact_max_nodes else "ivf"
    if index is not None and index_kind(index) == kind:
        index = faiss.clone_index(index)
    else:
        index = build_index(keys, index_cfg, kind=kind)
    set_search_params(index, index_cfg.edge_nprobe, index_cfg.hnsw_ef_search)
    index = search_device_index(index, index_cfg.gpu)
    max_k = min(n, _MAX_CANDIDATES)
    targets, sources, dists = [], [], []
    for lo in tqdm(range(0, n, _BATCH), desc="spatial edges", unit="batch", disable=not progress):
        rows = np.arange(lo, min(lo + _BATCH, n))
        nbr, dist = _neighbours(index, keys, rows, need[rows], node_demo, node_task, cfg, index_cfg, max_k)
        ok = nbr >= 0
        targets.append(np.repeat(rows, ok.sum(axis=1)))
        sources.append(nbr[ok])
        dists.append(dist[ok])
    edge_index = np.stack([np.concatenate(sources), np.concatenate(targets)]).astype(np.int64)
    return edge_index, np.concatenate(dists).astype(np.float32)


def _eligible_counts(node_demo: np.ndarray, node_task: np.ndarray, cross_task: bool) -> np.ndarray:
    """Per node, how many nodes it may connect to (not its own demo; its own task only if not cross-task)."""
    per_demo = np.bincount(node_demo)[node_demo]
    if cross_task:
        return node_demo.shape[0] - per_demo
    return np.bincount(node_task)[node_task] - per_demo


def _neighbours(index: faiss.Index, keys: np.ndarray, rows: np.ndarray, need: np.ndarray, node_demo: np.ndarray,
                node_task: np.ndarray, cfg: EdgeConfig, index_cfg: IndexConfig, max_k: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` eligible neighbours of ``rows`` (ids padded with -1), escalating the candidate count as needed."""
    k = cfg.spatial_k
    out_ids = np.full((rows.size, k), -1, dtype=np.int64)
    out_dist = np.zeros((rows.size, k), dtype=np.float32)
    todo = np.arange(rows.size)
    k_search = min(k + 16, max_k)
    while todo.size:
        _, cand = search(index, keys[rows[todo]], k_search, index_cfg.build_threads)
        ids, dist, found = _rank(keys, rows[todo], cand, node_demo, node_task, cfg)
        done = (found >= need[todo]) | (k_search >= max_k)
        out_ids[todo[done]], out_dist[todo[done]] = ids[done], dist[done]
        todo = todo[~done]
        k_search = min(k_search * 4, max_k)
    short = np.flatnonzero((out_ids >= 0).sum(axis=1) < need)
    if short.size:
        log.debug("spatial edges: %d nodes solved by brute force", short.size)
        cand = _brute_force_candidates(keys, rows[short], node_demo, node_task, cfg)
        ids, dist, _ = _rank(keys, rows[short], cand, node_demo, node_task, cfg)
        out_ids[short], out_dist[short] = ids, dist
    return out_ids, out_dist


def _rank(keys: np.ndarray, rows: np.ndarray, cand: np.ndarray, node_demo: np.ndarray, node_task: np.ndarray,
          cfg: EdgeConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Filter candidates to eligible nodes, re-rank by exact float64 distance then id, keep the first ``k``."""
    k = cfg.spatial_k
    ok = (cand >= 0) & (cand != rows[:, None])
    safe = np.where(ok, cand, 0)
    ok &= node_demo[safe] != node_demo[rows][:, None]
    if not cfg.spatial_cross_task:
        ok &= node_task[safe] == node_task[rows][:, None]
    diff = keys[safe].astype(np.float64) - keys[rows][:, None, :].astype(np.float64)
    d2 = np.where(ok, np.einsum("rcd,rcd->rc", diff, diff), np.inf)
    tie = np.where(ok, safe, np.iinfo(np.int64).max)
    order = np.lexsort((tie, d2), axis=-1)[:, :k]
    ids = np.take_along_axis(np.where(ok, safe, -1), order, axis=1)
    dist = np.sqrt(np.take_along_axis(d2, order, axis=1))
    if ids.shape[1] < k:  # fewer candidates than k: pad
        pad = k - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        dist = np.pad(dist, ((0, 0), (0, pad)), constant_values=np.inf)
    return ids, np.where(ids >= 0, dist, 0.0).astype(np.float32), ok.sum(axis=1)


def _brute_force_candidates(keys: np.ndarray, rows: np.ndarray, node_demo: np.ndarray, node_task: np.ndarray,
                            cfg: EdgeConfig) -> np.ndarray:
    """Exact eligible top-k candidates for a few rows the approximate index could not serve."""
    out = np.full((rows.size, cfg.spatial_k), -1, dtype=np.int64)
    all_ids = np.arange(keys.shape[0])
    for i, r in enumerate(rows):
        ok = node_demo != node_demo[r]
        if not cfg.spatial_cross_task:
            ok &= node_task == node_task[r]
        ids = all_ids[ok]
        d2 = ((keys[ids].astype(np.float64) - keys[r].astype(np.float64)) ** 2).sum(axis=1)
        best = ids[np.lexsort((ids, d2))[: cfg.spatial_k]]
        out[i, : best.size] = best
    return out


def edge_distances(keys: np.ndarray, edge_index: np.ndarray) -> np.ndarray:
    """Euclidean key distance between the endpoints of each edge (a cheap edge feature for the GNN)."""
    out = np.empty(edge_index.shape[1], dtype=np.float32)
    for lo in range(0, out.size, 1 << 20):
        a, b = keys[edge_index[0, lo:lo + (1 << 20)]], keys[edge_index[1, lo:lo + (1 << 20)]]
        out[lo:lo + a.shape[0]] = np.sqrt(((a.astype(np.float64) - b) ** 2).sum(axis=1))
    return out
