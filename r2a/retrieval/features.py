"""The retriever's inputs as numbers: the query vector, the per-node features and the edge features.

Everything here is kinematic — poses, gripper openings, actions, phases. No image enters retrieval, which is why
a visual shift cannot corrupt it (it can only make the base policy's chunk, one part of the query, wrong).

**Query** ``Q_t`` (:func:`query_vector`): the base policy's predicted chunk (its first ``chunk_steps`` actions
and the EE displacements they imply through the controller's response), the last ``history`` EE positions and
orientations relative to the current pose, the gripper openings and the executed actions at those steps, the
current opening and the elapsed time.

**Node features** (:func:`node_features`): the node's own kinematic key, velocity, a summary of its future
motion and gripper event flag, and — relative to the query — where it starts from the current pose, how its key
compares, and how its future displacement over the executed steps compares with what the base chunk implies.
That last group is the pilot's lesson: kinematic neighbours alone retrieve the wrong future; agreeing with the
policy's intent is what makes retrieval help.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2a.retrieval.history import HistoryWindow
from r2a.retrieval.motion import ResponseModel, rot6d_to_matrix
from r2a_core.rotations import quat_to_matrix

#: length unit of every position feature (5 cm: one full-scale OSC_POSE step)
POS_UNIT = 0.05
#: elapsed control steps are divided by this (the built-in VLA uses the same scale)
TIME_UNIT = 200.0
#: future frames summarized per node (indexes into the graph's future arrays)
FUTURE_SUMMARY = (0, 2, 4, 7, 11, 15, 19)


@dataclass(frozen=True)
class QueryLayout:
    """Lengths that fix the query's width; they travel in the retriever checkpoint."""

    history: int = 16
    chunk_steps: int = 16
    action_dim: int = 7

    @property
    def dim(self) -> int:
        h, c, a = self.history, self.chunk_steps, self.action_dim
        return c * a + c * 3 + h * 3 + h * 6 + h + h * a + 3


def implied_displacements(chunk: np.ndarray, window: HistoryWindow, response: ResponseModel) -> np.ndarray:
    """Cumulative EE displacement ``(n, 3)`` the chunk's translation commands imply from the current motion."""
    positions = np.concatenate([window.ee_pos, window.now_pos[None]])
    v_past = np.diff(positions, axis=0)[-response.translation.past_steps:]
    a_past = window.actions[-response.translation.past_actions:, :3] if response.translation.past_actions else \
        np.zeros((0, 3))
    steps = response.translation.forward(chunk[:, :3], v_past, a_past)
    return np.cumsum(steps, axis=0)


def query_vector(chunk: np.ndarray, window: HistoryWindow, response: ResponseModel, layout: QueryLayout,
                 step: int) -> tuple[np.ndarray, np.ndarray]:
    """``(query features (layout.dim,), implied displacement (chunk_steps, 3) in metres)``."""
    c, h = layout.chunk_steps, layout.history
    chunk = _fit_rows(np.asarray(chunk, np.float64), c)
    implied = implied_displacements(chunk, window, response)
    r_now = quat_to_matrix(window.now_quat)
    rel_rot = quat_to_matrix(window.ee_quat) @ r_now.T
    rel6 = np.concatenate([rel_rot[:, :, 0], rel_rot[:, :, 1]], axis=1) - np.array([1, 0, 0, 0, 1, 0])
    parts = [chunk.reshape(-1), (implied / POS_UNIT).reshape(-1),
             ((window.ee_pos - window.now_pos) / POS_UNIT).reshape(-1), rel6.reshape(-1), window.gripper,
             window.actions.reshape(-1), [window.now_gripper, step / TIME_UNIT, window.valid / max(h, 1)]]
    vec = np.concatenate([np.asarray(p, np.float64).reshape(-1) for p in parts]).astype(np.float32)
    return vec, implied


def _fit_rows(x: np.ndarray, n: int) -> np.ndarray:
    """``n`` rows: truncated, or the last row repeated (a shorter chunk holds its last action)."""
    if len(x) >= n:
        return x[:n]
    return np.concatenate([x, np.repeat(x[-1:], n - len(x), axis=0)])


#: width of :func:`node_features`
NODE_FEATURE_DIM = 11 + 5 + len(FUTURE_SUMMARY) * 4 + 1 + 1 + 1 + 3 + 6 + 1 + 1 + 1 + 4


def node_features(arrays: dict[str, np.ndarray], nodes: np.ndarray, query_key: np.ndarray, now_pos: np.ndarray,
                  now_quat: np.ndarray, now_gripper: float, phase: float, implied: np.ndarray,
                  executed: int) -> np.ndarray:
    """Per-node features ``(len(nodes), NODE_FEATURE_DIM)`` of candidate ``nodes`` for one query."""
    key = arrays["node_key"][nodes].astype(np.float64)
    if key.shape[1] < 11:
        key = np.concatenate([key, np.zeros((len(nodes), 11 - key.shape[1]))], axis=1)
    dpos = arrays["future_dpos"][nodes][:, FUTURE_SUMMARY].astype(np.float64)
    grip = arrays["future_gripper"][nodes][:, FUTURE_SUMMARY].astype(np.float64)
    valid = arrays["future_valid"][nodes].mean(axis=1, keepdims=True)
    velocity = arrays["node_velocity"][nodes].astype(np.float64) * np.array([100, 100, 100, 10, 10])
    rel_pos = (arrays["node_ee_pos"][nodes] - now_pos) / POS_UNIT
    r_now = quat_to_matrix(now_quat)
    r_node = rot6d_to_matrix(arrays["node_ee_rot6d"][nodes])
    rel = r_node @ r_now.T
    rel6 = np.concatenate([rel[:, :, 0], rel[:, :, 1]], axis=1) - np.array([1, 0, 0, 0, 1, 0])
    qk = np.asarray(query_key, np.float64).reshape(-1)[: arrays["node_key"].shape[1]]
    key_dist = np.linalg.norm(arrays["node_key"][nodes] - qk, axis=1, keepdims=True)
    f = min(executed, arrays["future_dpos"].shape[1]) - 1
    agree = (arrays["future_dpos"][nodes][:, f] - implied[min(f, len(implied) - 1)]) / POS_UNIT
    parts = [key, velocity, dpos.reshape(len(nodes), -1) / POS_UNIT, grip, valid,
             arrays["node_at_gripper_event"][nodes].astype(np.float64)[:, None],
             arrays["node_phase"][nodes][:, None] - phase, rel_pos, rel6,
             arrays["node_gripper"][nodes][:, None] - now_gripper, key_dist,
             np.linalg.norm(rel_pos, axis=1, keepdims=True), agree, np.linalg.norm(agree, axis=1, keepdims=True)]
    out = np.concatenate([np.asarray(p, np.float64).reshape(len(nodes), -1) for p in parts], axis=1)
    return out.astype(np.float32)


#: width of :func:`edge_features`
EDGE_FEATURE_DIM = 4


def edge_features(arrays: dict[str, np.ndarray], edges: np.ndarray) -> np.ndarray:
    """``(len(edges), 4)``: temporal, spatial, signed node offset / 16, key distance of the edge."""
    kind = arrays["edge_type"][edges]
    return np.stack([kind == 0, kind == 1, arrays["edge_offset"][edges] / 16.0, arrays["edge_dist"][edges]],
                    axis=1).astype(np.float32)


__all__ = ["EDGE_FEATURE_DIM", "FUTURE_SUMMARY", "NODE_FEATURE_DIM", "POS_UNIT", "QueryLayout", "TIME_UNIT",
           "edge_features", "implied_displacements", "node_features", "query_vector"]
