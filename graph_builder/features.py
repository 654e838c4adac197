"""Per-node kinematic state and the normalized kinematic key that FAISS indexes.

The key is ``[ee_pos, ee_rot6d, gripper, phase]`` (phase only when its weight is > 0), each group z-scored with
one pooled scale and multiplied by its weight. The statistics travel in the manifest (:class:`KeySpec`) so the
run-time retriever computes query keys exactly as the builder did — via :meth:`KeySpec.make_key`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from graph_builder.config import FeatureConfig
from r2a_core.errors import R2AInputError
from r2a_core.rotations import canonical_quat, quat_to_rot6d

#: group name → width, in key order
KEY_GROUPS: tuple[tuple[str, int], ...] = (("ee_pos", 3), ("ee_rot6d", 6), ("gripper", 1), ("phase", 1))


@dataclass(frozen=True)
class KeyGroup:
    """One block of the key: ``(raw - mean) / std * weight``; ``std`` is pooled over the block's dims."""

    name: str
    mean: tuple[float, ...]
    std: float
    weight: float

    @property
    def dim(self) -> int:
        return len(self.mean)


@dataclass(frozen=True)
class KeySpec:
    """The feature spec of a kinematic key with its normalization statistics."""

    groups: tuple[KeyGroup, ...]

    @property
    def dim(self) -> int:
        return sum(g.dim for g in self.groups)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.groups)

    def without(self, name: str) -> "KeySpec":
        return KeySpec(tuple(g for g in self.groups if g.name != name))

    def columns(self, names: tuple[str, ...]) -> np.ndarray:
        """Key columns that belong to the named groups (to slice a sub-key out of a full key)."""
        cols, at = [], 0
        for g in self.groups:
            if g.name in names:
                cols.extend(range(at, at + g.dim))
            at += g.dim
        return np.asarray(cols, dtype=np.int64)

    def make_key(self, ee_pos: np.ndarray, ee_quat: np.ndarray, gripper: np.ndarray,
                 phase: np.ndarray | float | None = None) -> np.ndarray:
        """Normalized float32 keys ``(n, dim)`` from EE position, wxyz quaternion, opening and phase t/(T-1)."""
        pos = np.atleast_2d(np.asarray(ee_pos, dtype=np.float64))
        raw = {"ee_pos": pos, "ee_rot6d": quat_to_rot6d(np.atleast_2d(ee_quat)),
               "gripper": np.asarray(gripper, dtype=np.float64).reshape(-1, 1)}
        if "phase" in self.names:
            if phase is None:
                raise R2AInputError("make_key: this graph's key includes phase; pass phase = t/(T-1) "
                                    "(e.g. step / the task's median demo length from the manifest)")
            raw["phase"] = np.broadcast_to(np.asarray(phase, dtype=np.float64).reshape(-1, 1), (pos.shape[0], 1))
        return self.apply(raw)

    def apply(self, raw: dict[str, np.ndarray]) -> np.ndarray:
        blocks = [(raw[g.name] - np.asarray(g.mean)) * (g.weight / g.std) for g in self.groups]
        return np.ascontiguousarray(np.concatenate(blocks, axis=1), dtype=np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {"dim": self.dim,
                "groups": [{"name": g.name, "dim": g.dim, "mean": list(g.mean), "std": g.std, "weight": g.weight}
                           for g in self.groups],
                "formula": "concat over groups of (raw - mean) / std * weight"}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "KeySpec":
        return cls(tuple(KeyGroup(g["name"], tuple(float(v) for v in g["mean"]), float(g["std"]),
                                  float(g["weight"])) for g in d["groups"]))


def fit_key_spec(raw: dict[str, np.ndarray], cfg: FeatureConfig) -> KeySpec:
    """Fit group means and pooled, floored scales on the nodes' start states; zero-weight groups are left out."""
    weights = {"ee_pos": cfg.pos_weight, "ee_rot6d": cfg.rot_weight, "gripper": cfg.gripper_weight,
               "phase": cfg.phase_weight}
    floors = {"ee_pos": cfg.pos_min_std, "ee_rot6d": cfg.rot_min_std, "gripper": cfg.gripper_min_std,
              "phase": 0.05}
    groups = []
    for name, _ in KEY_GROUPS:
        if weights[name] <= 0:
            continue
        x = raw[name]
        std = float(np.sqrt(np.mean(np.var(x, axis=0)))) if x.shape[0] else 0.0
        groups.append(KeyGroup(name, tuple(float(v) for v in x.mean(axis=0)), max(std, floors[name]),
                               float(weights[name])))
    return KeySpec(tuple(groups))


@dataclass
class NodeStates:
    """Kinematic state of every node at its start frame, plus a velocity summary over its span."""

    ee_pos: np.ndarray  # (N, 3) float64
    ee_quat: np.ndarray  # (N, 4) float64, canonical wxyz
    ee_rot6d: np.ndarray  # (N, 6) float64
    gripper: np.ndarray  # (N,) float64
    phase: np.ndarray  # (N,) float64: start / (T - 1)
    velocity: np.ndarray  # (N, 5) float32: mean [vx, vy, vz] per frame, angular speed rad/frame, gripper rate

    def raw(self) -> dict[str, np.ndarray]:
        return {"ee_pos": self.ee_pos, "ee_rot6d": self.ee_rot6d, "gripper": self.gripper[:, None],
                "phase": self.phase[:, None]}


def compute_node_states(ee_pos: np.ndarray, ee_quat: np.ndarray, gripper: np.ndarray, g_start: np.ndarray,
                        g_end: np.ndarray, demo_first: np.ndarray, demo_last: np.ndarray) -> NodeStates:
    """States at the global start frames; velocities over ``[start, min(end, demo_last)]`` in units per frame.

    ``demo_first``/``demo_last`` are per node: the global first and last frame of the node's demo.
    """
    to = np.minimum(g_end, demo_last)
    steps = np.maximum(to - g_start, 1).astype(np.float64)
    q0, q1 = canonical_quat(ee_quat[g_start]), canonical_quat(ee_quat[to])
    angle = 2.0 * np.arccos(np.clip(np.abs(np.sum(q0 * q1, axis=1)), 0.0, 1.0))
    velocity = np.column_stack([
        (ee_pos[to] - ee_pos[g_start]) / steps[:, None],
        angle / steps,
        (gripper[to] - gripper[g_start]) / steps,
    ]).astype(np.float32)
    length = np.maximum(demo_last - demo_first, 1).astype(np.float64)
    return NodeStates(ee_pos=ee_pos[g_start], ee_quat=q0, ee_rot6d=quat_to_rot6d(q0), gripper=gripper[g_start],
                      phase=(g_start - demo_first) / length, velocity=velocity)
