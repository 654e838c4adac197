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
from r2a_core.rotations import canonical_quat, quat_to_matrix

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
                 step: int, rotations: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(query features (layout.dim,), implied displacement (chunk_steps, 3) in metres)``; ``rotations``: the
    window's orientations and the current one as matrices (:func:`window_rotations`), when the caller has them."""
    c, h = layout.chunk_steps, layout.history
    chunk = _fit_rows(np.asarray(chunk, np.float64), c)
    implied = implied_displacements(chunk, window, response)
    rotations = window_rotations(window) if rotations is None else rotations
    r_now = rotations[-1]
    rel_rot = rotations[:-1] @ r_now.T
    rel6 = np.concatenate([rel_rot[:, :, 0], rel_rot[:, :, 1]], axis=1) - np.array([1, 0, 0, 0, 1, 0])
    parts = [chunk.reshape(-1), (implied / POS_UNIT).reshape(-1),
             ((window.ee_pos - window.now_pos) / POS_UNIT).reshape(-1), rel6.reshape(-1), window.gripper,
             window.actions.reshape(-1), [window.now_gripper, step / TIME_UNIT, window.valid / max(h, 1)]]
    vec = np.concatenate([np.asarray(p, np.float64).reshape(-1) for p in parts]).astype(np.float32)
    return vec, implied


def window_rotations(window: HistoryWindow) -> np.ndarray:
    """``(H + 1, 3, 3)``: the window's EE orientations, then the current one, as rotation matrices (one call)."""
    return quat_matrices(np.concatenate([window.ee_quat, window.now_quat[None]]))


#: for each entry of a rotation matrix (row-major), the two quaternion products it combines (indices into the
#: flattened outer product q qᵀ, w x y z = 0 1 2 3), the sign between them, and whether it is a diagonal entry
_PRODUCTS_A = np.array([2 * 4 + 2, 1 * 4 + 2, 1 * 4 + 3, 1 * 4 + 2, 1 * 4 + 1, 2 * 4 + 3, 1 * 4 + 3, 2 * 4 + 3,
                        1 * 4 + 1])
_PRODUCTS_B = np.array([3 * 4 + 3, 3 * 4 + 0, 2 * 4 + 0, 3 * 4 + 0, 3 * 4 + 3, 1 * 4 + 0, 2 * 4 + 0, 1 * 4 + 0,
                        2 * 4 + 2])
_PRODUCT_SIGN = np.array([1.0, -1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 1.0, 1.0])
_DIAGONAL = np.array([0, 4, 8])


def quat_matrices(q: np.ndarray) -> np.ndarray:
    """:func:`~r2a_core.rotations.quat_to_matrix` of ``(n, 4)`` wxyz quaternions in ~10 numpy calls instead of
    ~40: every entry is ``±2·(a·b ± c·d)`` or ``1 − 2·(a·a + b·b)`` of the same products, computed the same way,
    so the matrices are identical (``tests/test_retrieval_fast.py``)."""
    q = canonical_quat(q)
    products = (q[:, :, None] * q[:, None, :]).reshape(len(q), 16)
    m = 2.0 * (products[:, _PRODUCTS_A] + _PRODUCT_SIGN * products[:, _PRODUCTS_B])
    m[:, _DIAGONAL] = 1.0 - m[:, _DIAGONAL]
    return m.reshape(len(q), 3, 3)


def _fit_rows(x: np.ndarray, n: int) -> np.ndarray:
    """``n`` rows: truncated, or the last row repeated (a shorter chunk holds its last action)."""
    if len(x) >= n:
        return x[:n]
    return np.concatenate([x, np.repeat(x[-1:], n - len(x), axis=0)])


#: width of :func:`node_features`
NODE_FEATURE_DIM = 11 + 5 + len(FUTURE_SUMMARY) * 4 + 1 + 1 + 1 + 3 + 6 + 1 + 1 + 1 + 4
#: its first columns, which depend on the node alone (:func:`own_node_features`; the rest are query-relative)
OWN_FEATURE_DIM = 11 + 5 + len(FUTURE_SUMMARY) * 4 + 1 + 1


def node_features(arrays: dict[str, np.ndarray], nodes: np.ndarray, query_key: np.ndarray, now_pos: np.ndarray,
                  now_quat: np.ndarray, now_gripper: float, phase: float, implied: np.ndarray,
                  executed: int) -> np.ndarray:
    """Per-node features ``(len(nodes), NODE_FEATURE_DIM)`` of candidate ``nodes`` for one query."""
    state = NodeStates.of(arrays, nodes, executed)
    relative = relative_node_features(state, query_key, now_pos, quat_to_matrix(now_quat), now_gripper, phase,
                                      implied)
    return np.concatenate([own_node_features(arrays, nodes), relative], axis=1).astype(np.float32)


def own_node_features(arrays: dict[str, np.ndarray], nodes: np.ndarray) -> np.ndarray:
    """The columns that depend on the node alone ``(len(nodes), OWN_FEATURE_DIM)`` float64: its key, velocity,
    future-motion summary, share of valid future frames and gripper-event flag."""
    key = arrays["node_key"][nodes].astype(np.float64)
    if key.shape[1] < 11:
        key = np.concatenate([key, np.zeros((len(nodes), 11 - key.shape[1]))], axis=1)
    dpos = arrays["future_dpos"][nodes][:, FUTURE_SUMMARY].astype(np.float64)
    grip = arrays["future_gripper"][nodes][:, FUTURE_SUMMARY].astype(np.float64)
    valid = arrays["future_valid"][nodes].mean(axis=1, keepdims=True)
    velocity = arrays["node_velocity"][nodes].astype(np.float64) * np.array([100, 100, 100, 10, 10])
    parts = [key, velocity, dpos.reshape(len(nodes), -1) / POS_UNIT, grip, valid,
             arrays["node_at_gripper_event"][nodes].astype(np.float64)[:, None]]
    return np.concatenate([np.asarray(p, np.float64).reshape(len(nodes), -1) for p in parts], axis=1)


@dataclass(frozen=True)
class NodeStates:
    """What the query-relative features read of each candidate node (arrays in the graph's own dtypes)."""

    phase: np.ndarray  # (n, 1)
    gripper: np.ndarray  # (n, 1)
    ee_pos: np.ndarray  # (n, 3)
    key: np.ndarray  # (n, key dim)
    future: np.ndarray  # (n, 3) displacement after the executed steps
    future_step: int  # which future frame ``future`` is
    rotation: np.ndarray  # (n, 3, 3) float64, the node's EE orientation

    @classmethod
    def of(cls, arrays: dict[str, np.ndarray], nodes: np.ndarray, executed: int) -> "NodeStates":
        f = min(executed, arrays["future_dpos"].shape[1]) - 1
        return cls(phase=arrays["node_phase"][nodes][:, None], gripper=arrays["node_gripper"][nodes][:, None],
                   ee_pos=arrays["node_ee_pos"][nodes], key=arrays["node_key"][nodes],
                   future=arrays["future_dpos"][nodes][:, f], future_step=f,
                   rotation=rot6d_to_matrix(arrays["node_ee_rot6d"][nodes]))


def relative_node_features(state: NodeStates, query_key: np.ndarray, now_pos: np.ndarray, r_now: np.ndarray,
                           now_gripper: float, phase: float, implied: np.ndarray) -> np.ndarray:
    """The query-relative columns ``(n, NODE_FEATURE_DIM - OWN_FEATURE_DIM)`` float64: phase and opening
    differences, where the node starts from the current pose (``r_now``: its rotation matrix), key distance, and
    how the node's future displacement over the executed steps compares with what the base chunk implies."""
    n = len(state.ee_pos)
    rel_pos = (state.ee_pos - now_pos) / POS_UNIT
    rel = state.rotation @ r_now.T
    rel6 = np.concatenate([rel[:, :, 0], rel[:, :, 1]], axis=1) - np.array([1, 0, 0, 0, 1, 0])
    qk = np.asarray(query_key, np.float64).reshape(-1)[: state.key.shape[1]]
    key_dist = np.linalg.norm(state.key - qk, axis=1, keepdims=True)
    agree = (state.future - implied[min(state.future_step, len(implied) - 1)]) / POS_UNIT
    parts = [state.phase - phase, rel_pos, rel6, state.gripper - now_gripper, key_dist,
             np.linalg.norm(rel_pos, axis=1, keepdims=True), agree, np.linalg.norm(agree, axis=1, keepdims=True)]
    return np.concatenate([np.asarray(p, np.float64).reshape(n, -1) for p in parts], axis=1)


class NodeTable:
    """:func:`node_features` of one query with one gather per candidate set, for the wrapper's single queries.

    The node-only columns of every node are computed once per graph (stored float32, which is what
    :func:`node_features` casts them to), and what the query-relative columns read of a node is packed into one
    array (the graph's dtypes kept) beside the nodes' rotation matrices; a query then gathers candidate rows
    and runs :func:`relative_node_features`, the same arithmetic as :func:`node_features` on the same numbers
    (``tests/test_retrieval_fast.py``: equal within float32 rounding — numpy's small matrix products may round
    the last bit differently with the arrays' memory alignment, on either path; graph_builder stores these arrays
    as float32, and a graph that mixed dtypes would have them packed in the wider one). About
    330 bytes per node.
    """

    #: nodes per block while the table is built (bounds the float64 temporaries on big graphs)
    BLOCK = 65536

    def __init__(self, arrays: dict[str, np.ndarray], executed: int) -> None:
        n = len(arrays["node_key"])
        all_nodes = np.arange(n)
        self.own = np.concatenate([own_node_features(arrays, all_nodes[i:i + self.BLOCK]).astype(np.float32)
                                   for i in range(0, n, self.BLOCK)]) if n else np.zeros((0, OWN_FEATURE_DIM),
                                                                                         np.float32)
        states = NodeStates.of(arrays, all_nodes, executed)
        columns = [states.phase, states.gripper, states.ee_pos, states.key, states.future]
        widths = np.cumsum([0] + [c.shape[1] for c in columns])
        self._slices = [slice(a, b) for a, b in zip(widths[:-1], widths[1:])]
        self.packed = np.concatenate(columns, axis=1)
        self.rotation = states.rotation
        self.future_step = states.future_step

    def states(self, nodes: np.ndarray) -> NodeStates:
        rows = self.packed[nodes]
        phase, gripper, ee_pos, key, future = (rows[:, s] for s in self._slices)
        return NodeStates(phase=phase, gripper=gripper, ee_pos=ee_pos, key=key, future=future,
                          future_step=self.future_step, rotation=self.rotation[nodes])

    def features(self, nodes: np.ndarray, query_key: np.ndarray, now_pos: np.ndarray, r_now: np.ndarray,
                 now_gripper: float, phase: float, implied: np.ndarray) -> tuple[np.ndarray, NodeStates]:
        """``node_features`` of ``nodes`` ``(n, NODE_FEATURE_DIM)`` float32, and the gathered node states."""
        state = self.states(nodes)
        relative = relative_node_features(state, query_key, now_pos, r_now, now_gripper, phase, implied)
        return np.concatenate([self.own[nodes], relative.astype(np.float32)], axis=1), state


#: width of :func:`edge_features`
EDGE_FEATURE_DIM = 4


def edge_features(arrays: dict[str, np.ndarray], edges: np.ndarray) -> np.ndarray:
    """``(len(edges), 4)``: temporal, spatial, signed node offset / 16, key distance of the edge."""
    kind = arrays["edge_type"][edges]
    return np.stack([kind == 0, kind == 1, arrays["edge_offset"][edges] / 16.0, arrays["edge_dist"][edges]],
                    axis=1).astype(np.float32)


__all__ = ["EDGE_FEATURE_DIM", "FUTURE_SUMMARY", "NODE_FEATURE_DIM", "OWN_FEATURE_DIM", "POS_UNIT", "NodeStates",
           "NodeTable", "QueryLayout", "TIME_UNIT", "edge_features", "implied_displacements", "node_features",
           "own_node_features", "quat_matrices", "query_vector", "relative_node_features",
           "window_rotations"]
