"""Localize the ongoing execution in the motion graph and say which primitives should come next.

One call per executed chunk (:meth:`Retriever.retrieve`): the kinematic key of the current pose seeds a FAISS
search; a bounded k-hop subgraph around the seeds is the candidate set; the query-conditioned GNN scores every
candidate (``mode="gnn"``) — or, as the ablation, the candidates are ranked by key distance alone
(``mode="knn"``, plain nearest neighbours); the top K become softmax weights. The instruction, when it is one of
the graph's, restricts candidates to that task (a paraphrased one leaves all tasks in).

Two implementations of the same query (``settings.inference``): ``fast``, the default, built for one query at a
time — the key from the pose in one vector operation (:class:`PoseKey`), node features from a per-graph table
(:class:`~r2a.retrieval.features.NodeTable`), the GNN as folded tensors
(:class:`~r2a.retrieval.gnn_fast.FastRetrieverNet`), all derived at load — and ``training``, the code the
retriever is trained with. They give the same candidates and chosen nodes, features and scores equal within float
rounding (``tests/test_retrieval_fast.py``); ``r2a bench perf retrieval`` times both.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any, ContextManager

import numpy as np

from graph_builder.motion_graph import MotionGraph
from r2a.retrieval.config import RetrievalSettings
from r2a.retrieval.features import NodeTable, QueryLayout, edge_features, node_features, query_vector, window_rotations
from r2a.retrieval.history import HistoryWindow
from r2a.retrieval.motion import ResponseModel
from r2a.retrieval.subgraph import Neighbourhoods, Subgraph
from r2a_core.errors import R2AInputError
from r2a_core.rotations import quat_to_matrix
from r2a_core.timing import stage_timer


@dataclass
class Retrieval:
    """What one retrieval found, with the confidence signals the gate and the fallbacks read."""

    nodes: np.ndarray  # (K,) global node ids, best first
    weights: np.ndarray  # (K,) softmax weights
    progress: float  # p̂ in [0, 1]
    seed_distance: float  # key-space distance of the nearest seed
    entropy: float  # of the weights over all candidates, normalized to [0, 1]
    top_weight: float  # largest weight over all candidates
    candidates: int
    implied: np.ndarray  # (chunk_steps, 3) displacement the base chunk implies
    query: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    def summary(self) -> dict[str, Any]:
        return {"nodes": self.nodes.tolist(), "weights": np.round(self.weights, 4).tolist(),
                "progress": round(float(self.progress), 4), "seed_distance": round(float(self.seed_distance), 4),
                "entropy": round(float(self.entropy), 4), "top_weight": round(float(self.top_weight), 4),
                "candidates": int(self.candidates)}


@dataclass
class Candidates:
    """One query's candidate subgraph with its features (the GNN's input, also built for training)."""

    subgraph: Subgraph
    x: np.ndarray  # (n, NODE_FEATURE_DIM)
    edge_attr: np.ndarray  # (e, EDGE_FEATURE_DIM)
    query: np.ndarray  # (Dq,)
    implied: np.ndarray
    seed_distance: float
    key_distance: np.ndarray  # (n,) distance of each candidate's key to the query key


class Retriever:
    """Graph + (optional) GNN + settings: ``retrieve(chunk, window, prompt, phase)`` → :class:`Retrieval`."""

    def __init__(self, graph: MotionGraph, response: ResponseModel, settings: RetrievalSettings,
                 layout: QueryLayout, net: Any = None, executed_steps: int = 8) -> None:
        self.graph, self.response, self.settings, self.layout = graph, response, settings, layout
        self.net, self.executed_steps = net, executed_steps
        self.arrays = graph.arrays
        self.neighbourhoods = Neighbourhoods(self.arrays["edge_index"], graph.num_nodes)
        self._task_of_prompt = {text: graph.tasks[task] for text, task in instruction_tasks(graph).items()}
        self._node_task = self.arrays["node_task"]
        for task in range(len(graph.tasks)):  # per-task seed indexes, built now rather than at the first query
            graph.task_index(task)
        #: stage → seconds of the last query, filled only while profiling (``r2a bench perf retrieval``)
        self.stage_times: dict[str, float] | None = None
        lengths = self.arrays["demo_length"].astype(np.float64)
        self._median_length = {name: float(info["median_length"]) for name, info in graph.manifest["per_task"].items()}
        self._pooled_length = float(np.median(lengths)) if len(lengths) else 1.0
        self._fast_parts(settings.inference == "fast")

    def with_inference(self, inference: str) -> "Retriever":
        """This retriever on the other implementation (``fast`` or ``training``), sharing the graph structures —
        how ``r2a bench perf retrieval`` times both paths side by side without building the graph structures twice."""
        if inference not in INFERENCE_PATHS:
            raise R2AInputError(f"unknown inference path {inference!r}; valid: {', '.join(INFERENCE_PATHS)}")
        other = copy.copy(self)
        other.settings = replace(self.settings, inference=inference)
        other.stage_times = None
        other._fast_parts(inference == "fast")
        return other

    def _fast_parts(self, fast: bool) -> None:
        """What the fast path derives from the graph and the network at load (``None`` on the training path)."""
        self.node_table = NodeTable(self.arrays, self.executed_steps) if fast else None
        self._task_masks: dict[int, np.ndarray] = {}
        self.pose_key = PoseKey.of(self.graph.key_spec) if fast else None
        self.fast_net = None
        if fast and self.net is not None:
            from r2a.retrieval.gnn_fast import FastRetrieverNet

            self.fast_net = FastRetrieverNet(self.net)

    # ------------------------------------------------------------------------------------------ queries
    @property
    def instructions(self) -> list[str]:
        """The graph's instructions that name exactly one task (what a prompt is matched against)."""
        return list(self._task_of_prompt)

    def task_of(self, prompt: str | None) -> str | None:
        """The graph task whose instruction is exactly ``prompt``, else None (paraphrases, unknown tasks)."""
        return self._task_of_prompt.get(prompt) if prompt is not None else None

    def phase_for(self, step: int, prompt: str | None) -> float:
        """Elapsed steps over the (task's) median demo length, clipped to [0, 1]: the seed key's phase."""
        task = self.task_of(prompt) if self.settings.match_task else None
        length = self._median_length.get(task, self._pooled_length) if task else self._pooled_length
        return _unit(step / max(length - 1.0, 1.0))

    def task_id(self, prompt: str | None) -> int | None:
        """Index of the graph task that restricts the candidates for ``prompt`` (None: every task)."""
        task = self.task_of(prompt) if self.settings.match_task else None
        return self.graph.tasks.index(task) if task is not None else None

    def candidates(self, chunk: np.ndarray, window: HistoryWindow, prompt: str | None, phase: float,
                   step: int) -> Candidates:
        """Seeds, the bounded subgraph and every feature of one query (no network involved)."""
        with self._stage("query"):
            rotations = window_rotations(window)  # the window's and the current orientation, read three times
            query, implied = query_vector(chunk, window, self.response, self.layout, step, rotations)
        return self.candidates_for(query, implied, window.now_pos, window.now_quat, window.now_gripper, phase,
                                   self.task_id(prompt), r_now=rotations[-1])

    def candidates_for(self, query: np.ndarray, implied: np.ndarray, now_pos: np.ndarray, now_quat: np.ndarray,
                       now_gripper: float, phase: float, task_id: int | None,
                       r_now: np.ndarray | None = None) -> Candidates:
        """:meth:`candidates` from an already encoded query (training re-uses stored queries); ``r_now``: the
        rotation matrix of ``now_quat`` when the caller has it."""
        with self._stage("seeds"):
            key = self._key(now_pos, now_quat, now_gripper, phase, r_now)
            seeds, seed_dist = self._seeds(key, task_id)
        with self._stage("subgraph"):
            sub = self._subgraph(seeds, key, task_id)
        with self._stage("features"):
            x, node_keys = self._node_features(sub.nodes, key, now_pos, now_quat, now_gripper, phase, implied, r_now)
            key_distance = np.linalg.norm(node_keys - key, axis=1)
            edge_attr = edge_features(self.arrays, sub.edge_ids)
        return Candidates(subgraph=sub, x=x, edge_attr=edge_attr, query=query, implied=implied,
                          seed_distance=seed_dist, key_distance=key_distance)

    def _subgraph(self, seeds: np.ndarray, key: np.ndarray, task_id: int | None) -> Subgraph:
        """The bounded neighbourhood of the seeds, then only ``task_id``'s nodes when given (the training path
        restricts the extracted subgraph; the fast path passes the task's node mask into the extraction — the
        same subgraph, ``tests/test_retrieval_fast.py``)."""
        s = self.settings
        if self.node_table is not None and task_id is not None:
            return self.neighbourhoods.extract(seeds, self.arrays["node_key"], key, s.hops, s.max_nodes,
                                               keep=self._task_mask(task_id))
        sub = self.neighbourhoods.extract(seeds, self.arrays["node_key"], key, s.hops, s.max_nodes)
        return sub if task_id is None else _restrict(sub, self._node_task[sub.nodes] == task_id)

    def _task_mask(self, task_id: int) -> np.ndarray:
        """``node_task == task_id`` over the graph (one byte per node and task, made on first use)."""
        if task_id not in self._task_masks:
            self._task_masks[task_id] = self._node_task == task_id
        return self._task_masks[task_id]

    def _key(self, now_pos: np.ndarray, now_quat: np.ndarray, now_gripper: float, phase: float,
             r_now: np.ndarray | None) -> np.ndarray:
        """The seed key of the current pose (the graph's :meth:`~MotionGraph.make_key`, or its fast equal)."""
        if self.pose_key is None:
            return self.graph.make_key(now_pos, now_quat, now_gripper, phase)[0]
        return self.pose_key(now_pos, quat_to_matrix(now_quat) if r_now is None else r_now, now_gripper, phase)

    def _node_features(self, nodes: np.ndarray, key: np.ndarray, now_pos: np.ndarray, now_quat: np.ndarray,
                       now_gripper: float, phase: float, implied: np.ndarray,
                       r_now: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The candidates' features and keys, from the graph arrays (training path) or the node table (fast)."""
        if self.node_table is None:
            x = node_features(self.arrays, nodes, key, now_pos, now_quat, now_gripper, phase, implied,
                              self.executed_steps)
            return x, self.arrays["node_key"][nodes]
        r_now = quat_to_matrix(now_quat) if r_now is None else r_now
        x, state = self.node_table.features(nodes, key, now_pos, r_now, now_gripper, phase, implied)
        return x, state.key

    def _stage(self, name: str) -> ContextManager[Any]:
        """Times the block into ``stage_times[name]`` while profiling; otherwise a no-op that costs ~nothing."""
        return stage_timer(self.stage_times, name)

    def _seeds(self, key: np.ndarray, task_id: int | None) -> tuple[np.ndarray, float]:
        """The ``seeds`` nearest nodes (of ``task_id``'s nodes only, when given) and the nearest one's distance."""
        k = self.settings.seeds
        if task_id is None:
            dist, ids = self.graph.search(key[None], k)
        else:
            dist, ids = self.graph.search_task(key[None], k, task_id)
        ok = ids[0] >= 0
        dist, ids = dist[0][ok], ids[0][ok]
        if len(ids) == 0:
            raise R2AInputError("the graph returned no seed nodes (is it empty?)")
        return ids, float(dist[0])

    def retrieve(self, chunk: np.ndarray, window: HistoryWindow, prompt: str | None, phase: float,
                 step: int) -> Retrieval:
        cand = self.candidates(chunk, window, prompt, phase, step)
        if self.settings.mode == "knn":
            scores = -cand.key_distance / max(float(np.median(cand.key_distance)), 1e-6)
            top = cand.subgraph.nodes[np.argsort(-scores, kind="stable")[: self.settings.top_k]]
            progress = float(np.mean(self.arrays["node_phase"][top]))
            return self._pick(cand, scores, progress, uniform=True)
        if self.net is None:
            raise R2AInputError("retrieval mode 'gnn' needs a trained retriever checkpoint (or use mode 'knn')")
        with self._stage("gnn"):
            scores, progress = self._score(cand)
        return self._pick(cand, scores, progress, uniform=False)

    def _score(self, cand: Candidates) -> tuple[np.ndarray, float]:
        """GNN scores of the candidates (float64) and p̂: the fast network, else the training one."""
        sub = cand.subgraph
        if self.fast_net is not None:
            scores, progress = self.fast_net(cand.query, cand.x, sub.edge_index, cand.edge_attr)
            return scores.astype(np.float64), progress
        import torch

        from r2a.retrieval.gnn_fast import one_torch_thread

        with one_torch_thread(), torch.inference_mode():
            scores, progress = self.net(torch.from_numpy(cand.query[None]), torch.from_numpy(cand.x),
                                        torch.from_numpy(sub.edge_index), torch.from_numpy(cand.edge_attr),
                                        torch.zeros(len(sub.nodes), dtype=torch.long))
        return scores.numpy().astype(np.float64), float(progress[0])

    def _pick(self, cand: Candidates, scores: np.ndarray, progress: float, uniform: bool) -> Retrieval:
        s = self.settings
        nodes = cand.subgraph.nodes
        all_w = _softmax(scores / s.temperature)
        order = np.argsort(-scores, kind="stable")[: s.top_k]
        weights = np.full(len(order), 1.0 / len(order)) if uniform else _softmax(scores[order] / s.temperature)
        n = len(nodes)
        entropy = float(-(all_w * np.log(np.maximum(all_w, 1e-12))).sum() / np.log(n)) if n > 1 else 0.0
        return Retrieval(nodes=nodes[order], weights=weights, progress=_unit(float(progress)),
                         seed_distance=cand.seed_distance, entropy=entropy, top_weight=float(all_w.max()),
                         candidates=n, implied=cand.implied, query=cand.query)


class PoseKey:
    """:meth:`MotionGraph.make_key` of one pose whose rotation matrix is already known, in one vector operation.

    The graph's key is, per group, ``(raw − mean) · (weight / std)`` (``KeySpec.apply``); this holds those numbers
    per column and applies them to ``[position, rot6d, opening, phase]`` at once — the same float64 operations on
    the same values, so the key is identical (``make_key`` spends ~40 numpy calls on the quaternion alone).
    """

    def __init__(self, names: tuple[str, ...], mean: np.ndarray, scale: np.ndarray) -> None:
        self.names, self.mean, self.scale = names, mean, scale

    @classmethod
    def of(cls, spec: Any) -> "PoseKey | None":
        """The key of ``spec`` (a ``KeySpec``), or None when it has a group this class does not know."""
        if not set(spec.names) <= set(_POSE_PARTS):
            return None
        mean = np.concatenate([np.asarray(g.mean, np.float64) for g in spec.groups])
        scale = np.concatenate([np.full(g.dim, g.weight / g.std) for g in spec.groups])
        return cls(spec.names, mean, scale)

    def __call__(self, pos: np.ndarray, rotation: np.ndarray, gripper: float, phase: float) -> np.ndarray:
        """The ``(dim,)`` float32 key; ``rotation`` is the matrix of the pose's quaternion."""
        parts = {"ee_pos": pos, "ee_rot6d": rotation[:, :2].T, "gripper": gripper, "phase": phase}
        raw = np.concatenate([np.asarray(parts[name], np.float64).reshape(-1) for name in self.names])
        return ((raw - self.mean) * self.scale).astype(np.float32)


#: the implementations of one query (``RetrievalSettings.inference``)
INFERENCE_PATHS = ("fast", "training")
#: the raw inputs of the key groups a graph's key can have (``graph_builder.features.KEY_GROUPS``)
_POSE_PARTS = ("ee_pos", "ee_rot6d", "gripper", "phase")


def _unit(x: float) -> float:
    """``float(np.clip(x, 0, 1))`` of one float, without numpy's dispatch (a NaN stays NaN, as with np.clip)."""
    return x if x != x else min(max(0.0, x), 1.0)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


def _restrict(sub: Subgraph, keep: np.ndarray) -> Subgraph:
    """The subgraph on the nodes where ``keep`` (seeds stay first); edges to dropped nodes go too."""
    if keep.all():
        return sub
    new_id = np.cumsum(keep) - 1
    edge_ok = keep[sub.edge_index[0]] & keep[sub.edge_index[1]]
    edge_index = new_id[sub.edge_index[:, edge_ok]]
    return Subgraph(nodes=sub.nodes[keep], edge_index=edge_index, edge_ids=sub.edge_ids[edge_ok],
                    seeds=int(keep[: sub.seeds].sum()))


def instruction_tasks(graph: MotionGraph) -> dict[str, int]:
    """Instruction text → task id, for instructions that belong to exactly one task."""
    demo_task, demo_instr = graph.arrays["demo_task"], graph.arrays["demo_instruction"]
    pairs: dict[str, set[int]] = {}
    for t, i in zip(demo_task.tolist(), demo_instr.tolist()):
        pairs.setdefault(graph.instructions[i], set()).add(t)
    return {text: next(iter(tasks)) for text, tasks in pairs.items() if len(tasks) == 1}


__all__ = ["Candidates", "PoseKey", "Retrieval", "RetrievalSettings", "Retriever"]
