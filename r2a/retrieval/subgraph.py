"""The bounded neighbourhood the GNN runs on: seeds from FAISS, then k hops along the graph's edges.

Latency must not grow with the graph, so the candidate set is capped: each hop adds the not-yet-selected
neighbours of the frontier, and when a hop would pass ``max_nodes`` only the ones closest to the query's
kinematic key are kept. The induced edges (both ends selected) come from a source-sorted edge list. Everything is
vectorized numpy over compressed adjacency arrays built once per graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Subgraph:
    """Candidate nodes (global ids, seeds first) and the edges among them in local numbering."""

    nodes: np.ndarray  # (n,) int64
    edge_index: np.ndarray  # (2, e) int64, local ids, messages flow edge_index[0] -> edge_index[1]
    edge_ids: np.ndarray  # (e,) int64, global edge ids (for edge features)
    seeds: int  # the first ``seeds`` nodes are the FAISS seeds


class Neighbourhoods:
    """Compressed adjacency of a graph's ``edge_index (2, E)`` for bounded k-hop extraction."""

    def __init__(self, edge_index: np.ndarray, num_nodes: int) -> None:
        src, dst = np.asarray(edge_index[0], np.int64), np.asarray(edge_index[1], np.int64)
        self.num_nodes = int(num_nodes)
        # undirected neighbour lists (a node's future and past both count as its neighbourhood)
        both_src, both_dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        order = np.argsort(both_src, kind="stable")
        self._nbr_ptr = _pointers(both_src[order], self.num_nodes)
        self._nbr = both_dst[order].astype(np.int32 if self.num_nodes < 2**31 else np.int64)
        # out-edges by source, to collect induced edges
        order = np.argsort(src, kind="stable")
        self._out_ptr = _pointers(src[order], self.num_nodes)
        self._out_edge = order.astype(np.int64)
        self._out_dst = dst[order]
        self._local = np.full(self.num_nodes, -1, np.int64)
        self._stamp = np.zeros(self.num_nodes, np.int32 if self.num_nodes < 2**31 else np.int64)  # dedup scratch

    def extract(self, seeds: np.ndarray, keys: np.ndarray, query_key: np.ndarray, hops: int,
                max_nodes: int, keep: np.ndarray | None = None) -> Subgraph:
        """Seeds plus up to ``hops`` rings of neighbours, at most ``max_nodes`` nodes in all; with ``keep`` (a
        boolean per graph node) the nodes outside it are then dropped with their edges — the rings grow and are
        capped as without it, so this is the unrestricted subgraph restricted (seeds stay first)."""
        seeds = _unique_in_order(np.asarray(seeds, np.int64))[:max_nodes]
        selected = [seeds]
        count = len(seeds)
        self._local[seeds] = 1  # marks "selected" while growing
        frontier = seeds
        for _ in range(hops):
            if count >= max_nodes or len(frontier) == 0:
                break
            ring = self._new_neighbours(frontier)
            room = max_nodes - count
            if len(ring) > room:
                dist = np.sum((keys[ring] - query_key) ** 2, axis=1)
                ring = ring[np.argpartition(dist, room - 1)[:room]]
            self._local[ring] = 1
            selected.append(ring)
            count += len(ring)
            frontier = ring
        nodes = np.concatenate(selected)
        self._local[nodes] = -1  # ready for the next query without clearing N entries
        seed_count = len(seeds)
        if keep is not None:
            kept = keep[nodes]
            nodes, seed_count = nodes[kept], int(kept[:seed_count].sum())
        self._local[nodes] = np.arange(len(nodes))
        try:
            return self._induced(nodes, seed_count)
        finally:
            self._local[nodes] = -1

    def _new_neighbours(self, frontier: np.ndarray) -> np.ndarray:
        """The not-yet-selected neighbours of ``frontier``, sorted, each once (``np.unique`` of what is new).

        Rings overlap heavily (a node's spatial neighbours are each other's), so the duplicates are dropped
        by stamping each value with its position and keeping the entries whose stamp survived — linear time —
        and only the unique remainder is sorted.
        """
        ring = _gather(self._nbr_ptr, self._nbr, frontier)
        ring = ring[self._local[ring] < 0]
        position = np.arange(len(ring), dtype=self._stamp.dtype)
        self._stamp[ring] = position
        ring = np.sort(ring[self._stamp[ring] == position]).astype(np.int64)
        return ring

    def _induced(self, nodes: np.ndarray, seeds: int) -> Subgraph:
        """The subgraph on ``nodes`` (``self._local`` holds their local ids): every out-edge of a node whose end
        is selected too, in source order."""
        at, counts = _positions(self._out_ptr, nodes)
        dst = self._local[self._out_dst[at]]
        keep = dst >= 0
        src = np.repeat(np.arange(len(nodes)), counts)
        return Subgraph(nodes=nodes, edge_index=np.stack([src[keep], dst[keep]]), edge_ids=self._out_edge[at[keep]],
                        seeds=seeds)


def _pointers(sorted_rows: np.ndarray, n: int) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.bincount(sorted_rows, minlength=n))]).astype(np.int64)


def _gather(ptr: np.ndarray, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``concatenate(values[ptr[r]:ptr[r+1]] for r in rows)`` without a Python loop."""
    return values[_positions(ptr, rows)[0]]


def _positions(ptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where rows ``rows`` of a compressed array lie (``concatenate(arange(ptr[r], ptr[r+1]))``), and their lengths."""
    starts, ends = ptr[rows], ptr[rows + 1]
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64), lengths
    offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return offsets + np.arange(total), lengths


def _unique_in_order(x: np.ndarray) -> np.ndarray:
    """The valid ids (``>= 0``) of ``x``, each at its first occurrence (a handful of seeds: plain Python is
    faster than the sorting ``np.unique`` does)."""
    return np.fromiter(dict.fromkeys(i for i in x.tolist() if i >= 0), np.int64)


__all__ = ["Neighbourhoods", "Subgraph"]
