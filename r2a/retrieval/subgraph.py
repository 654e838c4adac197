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

    def extract(self, seeds: np.ndarray, keys: np.ndarray, query_key: np.ndarray, hops: int,
                max_nodes: int) -> Subgraph:
        """Seeds plus up to ``hops`` rings of neighbours, at most ``max_nodes`` nodes in all."""
        seeds = _unique_in_order(np.asarray(seeds, np.int64)[np.asarray(seeds) >= 0])[:max_nodes]
        selected = [seeds]
        count = len(seeds)
        self._local[seeds] = 1  # marks "selected" while growing
        frontier = seeds
        for _ in range(hops):
            if count >= max_nodes or len(frontier) == 0:
                break
            ring = np.unique(_gather(self._nbr_ptr, self._nbr, frontier))
            ring = ring[self._local[ring] < 0]
            room = max_nodes - count
            if len(ring) > room:
                dist = np.sum((keys[ring] - query_key) ** 2, axis=1)
                ring = ring[np.argpartition(dist, room - 1)[:room]]
            self._local[ring] = 1
            selected.append(ring.astype(np.int64))
            count += len(ring)
            frontier = ring
        nodes = np.concatenate(selected)
        self._local[nodes] = np.arange(len(nodes))
        try:
            edge_ids, dst = _gather(self._out_ptr, self._out_edge, nodes), _gather(self._out_ptr, self._out_dst, nodes)
            src = np.repeat(np.arange(len(nodes)), self._out_ptr[nodes + 1] - self._out_ptr[nodes])
            keep = self._local[dst] >= 0
            edge_index = np.stack([src[keep], self._local[dst[keep]]]).astype(np.int64)
            return Subgraph(nodes=nodes, edge_index=edge_index, edge_ids=edge_ids[keep], seeds=len(seeds))
        finally:
            self._local[nodes] = -1  # ready for the next query without clearing N entries


def _pointers(sorted_rows: np.ndarray, n: int) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.bincount(sorted_rows, minlength=n))]).astype(np.int64)


def _gather(ptr: np.ndarray, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``concatenate(values[ptr[r]:ptr[r+1]] for r in rows)`` without a Python loop."""
    starts, ends = ptr[rows], ptr[rows + 1]
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return values[:0]
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return values[offsets + np.arange(total)]


def _unique_in_order(x: np.ndarray) -> np.ndarray:
    _, first = np.unique(x, return_index=True)
    return x[np.sort(first)]


__all__ = ["Neighbourhoods", "Subgraph"]
