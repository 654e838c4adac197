"""The motion-primitive graph as the run-time retriever sees it: arrays, manifest, FAISS index.

``search`` seeds retrieval (nearest nodes to a query's kinematic key); ``to_pyg`` hands the graph to
torch_geometric (imported only then, since torch is slow to import). Array names and meanings:

* ``node_*`` (N, …): ``demo``, ``span`` [start, end) frames, ``phase`` start/(T-1), start pose ``ee_pos``,
  ``ee_quat`` (wxyz), ``ee_rot6d``, ``gripper`` opening, ``velocity`` [vx, vy, vz, angular speed, gripper rate]
  per frame, ``task``/``instruction`` ids (into the manifest's lists), ``at_gripper_event``, and ``key``;
* ``future_*`` (N, H, …): see :mod:`graph_builder.future_motion`;
* ``edge_*`` (E, …): ``index`` (2, E) source → target, ``type`` (0 temporal, 1 spatial), ``offset``, ``dist``;
* ``demo_*`` (D, …): ``source``/``episode`` (where it came from), ``task``, ``instruction``, ``length``,
  and ``node_ptr`` (D+1): the nodes of demo d are ``node_ptr[d]:node_ptr[d+1]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from graph_builder.config import IndexConfig
from graph_builder.edges import EDGE_TYPES, SPATIAL, TEMPORAL
from graph_builder.features import KeySpec
from graph_builder.index import SMALL_BATCH, build_index, search, search_device_index, set_search_params
from r2a_core.config import from_dict
from r2a_core.errors import R2AInputError

#: node-level arrays exposed on the torch_geometric node store (name without the ``node_`` prefix)
NODE_ARRAYS = ("node_demo", "node_span", "node_phase", "node_ee_pos", "node_ee_quat", "node_ee_rot6d",
               "node_gripper", "node_velocity", "node_task", "node_instruction", "node_at_gripper_event",
               "future_dpos", "future_drot6d", "future_gripper", "future_actions", "future_valid")
NODE_TYPE = "primitive"


@dataclass
class MotionGraph:
    """A built or loaded graph. ``arrays`` holds the numpy arrays named in the module docstring."""

    manifest: dict[str, Any]
    arrays: dict[str, np.ndarray]
    index: faiss.Index
    path: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    _search_index: faiss.Index | None = field(default=None, repr=False)
    _task_indexes: dict[int, tuple[faiss.Index, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def num_nodes(self) -> int:
        return int(self.arrays["node_key"].shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.arrays["edge_type"].shape[0])

    @property
    def key_spec(self) -> KeySpec:
        return KeySpec.from_dict(self.manifest["features"]["key"])

    @property
    def tasks(self) -> list[str]:
        return list(self.manifest["tasks"])

    @property
    def instructions(self) -> list[str]:
        return list(self.manifest["instructions"])

    def make_key(self, ee_pos: np.ndarray, ee_quat: np.ndarray, gripper: np.ndarray,
                 phase: np.ndarray | float | None = None) -> np.ndarray:
        """Query keys normalized with this graph's statistics (see :meth:`KeySpec.make_key`)."""
        return self.key_spec.make_key(ee_pos, ee_quat, gripper, phase)

    def search(self, keys: np.ndarray, k: int, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Seed nodes: the ``k`` nearest nodes to each key → ``(distances, ids)``, both ``(n, k)``.

        Distances are Euclidean in key space; ids are -1 where the graph has fewer than ``k`` nodes. Batches
        of up to 16 queries run on ``index.query_threads`` threads (1 by default: fastest for single queries).
        """
        keys = np.atleast_2d(np.asarray(keys, dtype=np.float32))
        if keys.shape[1] != self.index.d:
            raise R2AInputError(f"search: keys have {keys.shape[1]} dims, this graph's key has {self.index.d} "
                                f"({', '.join(self.key_spec.names)}); build keys with make_key")
        cfg = self.manifest["build_config"]["index"]
        threads = cfg["query_threads"] if keys.shape[0] <= SMALL_BATCH else cfg["build_threads"]
        index = self.search_index
        if nprobe is not None:
            set_search_params(index, nprobe, cfg["hnsw_ef_search"])
        try:
            d2, ids = search(index, keys, k, threads)
        finally:
            if nprobe is not None:
                set_search_params(index, cfg["nprobe"], cfg["hnsw_ef_search"])
        return np.sqrt(np.maximum(d2, 0.0)), ids

    def search_task(self, keys: np.ndarray, k: int, task: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` among one task's nodes only → ``(distances, global ids)``, ids -1 past the task's size.

        Each task gets its own index over its nodes (built on first use with the graph's index settings, so
        exact up to ``exact_max_nodes`` nodes and IVF above): an exact in-task answer in the time of a search
        over that task alone, instead of over-fetching from the whole graph and filtering.
        """
        keys = np.atleast_2d(np.asarray(keys, dtype=np.float32))
        if keys.shape[1] != self.index.d:
            raise R2AInputError(f"search_task: keys have {keys.shape[1]} dims, this graph's key has {self.index.d}")
        index, nodes = self.task_index(task)
        cfg = self.manifest["build_config"]["index"]
        d2, local = search(index, keys, k, cfg["query_threads"] if keys.shape[0] <= SMALL_BATCH
                           else cfg["build_threads"])
        ids = np.where(local >= 0, nodes[np.maximum(local, 0)], -1)
        return np.sqrt(np.maximum(d2, 0.0)), ids

    def task_index(self, task: int) -> tuple[faiss.Index, np.ndarray]:
        """The index over task ``task``'s nodes and those nodes' global ids (built once, then cached)."""
        if not 0 <= task < len(self.tasks):
            raise R2AInputError(f"task index {task} out of range: this graph has {len(self.tasks)} tasks")
        if task not in self._task_indexes:
            nodes = np.flatnonzero(self.arrays["node_task"] == task).astype(np.int64)
            cfg = from_dict(IndexConfig, self.manifest["build_config"]["index"], "graph manifest build_config.index")
            self._task_indexes[task] = (build_index(self.arrays["node_key"][nodes], cfg), nodes)
        return self._task_indexes[task]

    @property
    def search_index(self) -> faiss.Index:
        """The index searches run on: a GPU copy when faiss-gpu and a GPU are present (``index.gpu``), else
        ``index`` itself (which is what gets saved)."""
        if self._search_index is None:
            self._search_index = search_device_index(self.index, self.manifest["build_config"]["index"]["gpu"])
        return self._search_index

    def demo_nodes(self, demo: int) -> np.ndarray:
        """Node ids of one demo in temporal order."""
        ptr = self.arrays["demo_node_ptr"]
        return np.arange(ptr[demo], ptr[demo + 1])

    def to_pyg(self, hetero: bool = True) -> Any:
        """The graph as torch_geometric ``HeteroData`` (node type ``primitive``, edge types ``temporal`` and
        ``spatial``) or, with ``hetero=False``, a ``Data`` whose ``edge_type`` holds 0/1.

        ``x`` is the normalized kinematic key; every other node array is attached by name (tensors share
        memory with the numpy arrays where the dtype allows).
        """
        import torch
        from torch_geometric.data import Data, HeteroData

        a = self.arrays
        node = {name.removeprefix("node_"): torch.from_numpy(np.ascontiguousarray(a[name])) for name in NODE_ARRAYS}
        edge_index = torch.from_numpy(a["edge_index"].astype(np.int64))
        if not hetero:
            data = Data(x=torch.from_numpy(a["node_key"]), edge_index=edge_index,
                        edge_type=torch.from_numpy(a["edge_type"].astype(np.int64)),
                        edge_offset=torch.from_numpy(a["edge_offset"]), edge_dist=torch.from_numpy(a["edge_dist"]),
                        num_nodes=self.num_nodes, **node)
            return data
        data = HeteroData()
        store = data[NODE_TYPE]
        store.x = torch.from_numpy(a["node_key"])
        store.num_nodes = self.num_nodes
        for name, value in node.items():
            store[name] = value
        for kind in (TEMPORAL, SPATIAL):
            sel = np.flatnonzero(a["edge_type"] == kind)
            rel = data[NODE_TYPE, EDGE_TYPES[kind], NODE_TYPE]
            rel.edge_index = edge_index[:, torch.from_numpy(sel)]
            rel.dist = torch.from_numpy(a["edge_dist"][sel])
            if kind == TEMPORAL:
                rel.offset = torch.from_numpy(a["edge_offset"][sel])
        data.demo_node_ptr = torch.from_numpy(a["demo_node_ptr"])
        return data

    def summary(self) -> dict[str, Any]:
        """Counts and settings for ``r2a graph info`` (from the manifest; no arrays needed)."""
        return summarize_manifest(self.manifest)


def summarize_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """A short JSON-able summary of a manifest."""
    files = manifest.get("files", {})
    return {
        "format": manifest["format"],
        "format_version": manifest["format_version"],
        "counts": manifest["counts"],
        "per_task": manifest["per_task"],
        "key": {"dims": manifest["features"]["key"]["dim"],
                "groups": [g["name"] for g in manifest["features"]["key"]["groups"]]},
        "future_frames": manifest["features"]["future"]["frames"],
        "action_space": manifest["action_space"],
        "index": manifest["index"],
        "sources": manifest["sources"],
        "warnings": manifest.get("warnings", []),
        "size_mb": round(sum(f["bytes"] for f in files.values()) / 2**20, 3),
    }
