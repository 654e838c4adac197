"""Core data types shared by every package.

Conventions (stated once, used everywhere):

* quaternions are **wxyz** (scalar first); robosuite's xyzw is converted at the simulator boundary;
* ``gripper`` is the normalized gripper *opening* in [0, 1] (0 closed, 1 fully open);
* images are upright (OpenCV convention), ``uint8``, ``(H, W, 3)``;
* observation dicts use the keys below: ``images/<camera>``, ``state/ee_pos``, ``state/ee_quat``,
  ``state/gripper``, ``state/joint_pos``, ``state/step`` (elapsed control steps), and ``prompt`` for the
  language instruction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from r2a_core.errors import R2AInputError

#: canonical camera names of the built-in simulator: third-person and wrist.
CAMERAS: tuple[str, ...] = ("agentview", "wrist")

STATE_EE_POS = "state/ee_pos"
STATE_EE_QUAT = "state/ee_quat"
STATE_GRIPPER = "state/gripper"
STATE_JOINT_POS = "state/joint_pos"
PROMPT = "prompt"
#: control steps elapsed in the episode (added by the rollout loop; lets a policy know the time)
STATE_STEP = "state/step"


def image_key(camera: str) -> str:
    """Observation-dict key of a camera image."""
    return f"images/{camera}"


@dataclass(frozen=True)
class ActionSpace:
    """What the numbers of an action mean, so wrappers can convert and clip.

    ``kind`` is ``delta_ee`` (robosuite OSC_POSE: dx dy dz, axis-angle drot, gripper), ``abs_ee`` or ``joint``.
    """

    kind: str
    names: tuple[str, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    gripper_dims: tuple[int, ...]

    @property
    def dim(self) -> int:
        return len(self.names)

    def clip(self, actions: np.ndarray) -> np.ndarray:
        """Clip to the bounds and replace non-finite values by 0 (never emit NaN)."""
        clean = np.nan_to_num(np.asarray(actions, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
        return np.clip(clean, np.asarray(self.low, np.float32), np.asarray(self.high, np.float32))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "names": list(self.names), "low": list(self.low), "high": list(self.high),
                "gripper_dims": list(self.gripper_dims)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ActionSpace":
        return cls(d["kind"], tuple(d["names"]), tuple(d["low"]), tuple(d["high"]), tuple(d["gripper_dims"]))


#: robosuite OSC_POSE delta actions, normalized to [-1, 1]; gripper -1 open, +1 close.
OSC_POSE_DELTA = ActionSpace(
    kind="delta_ee",
    names=("dx", "dy", "dz", "drx", "dry", "drz", "gripper"),
    low=(-1.0,) * 7,
    high=(1.0,) * 7,
    gripper_dims=(6,),
)


@dataclass
class Episode:
    """One demonstration or rollout, one row per control step.

    ``sim_states`` (robomimic ``states``) and ``robot_states`` are optional flattened simulator/robot states
    that allow replay; ``gripper_qpos`` holds the raw finger joint positions when the source has them.
    ``label_chunks`` (T, H, A), when present, is the labeller's own next H actions from each state (DAgger
    lookahead): the chunk target where the executed future is another policy's.
    """

    task: str
    instruction: str
    actions: np.ndarray
    ee_pos: np.ndarray
    ee_quat: np.ndarray
    gripper: np.ndarray
    joint_pos: np.ndarray | None = None
    gripper_qpos: np.ndarray | None = None
    images: dict[str, np.ndarray] = field(default_factory=dict)
    sim_states: np.ndarray | None = None
    robot_states: np.ndarray | None = None
    label_chunks: np.ndarray | None = None
    success: bool = True
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def validate(self, where: str = "episode") -> "Episode":
        """Check shapes and dtypes; raise :class:`R2AInputError` naming the field and what was expected."""
        n = _expect_2d(self.actions, f"{where}: actions", None)
        _expect_2d(self.ee_pos, f"{where}: ee_pos", 3, n)
        _expect_2d(self.ee_quat, f"{where}: ee_quat", 4, n)
        if self.gripper.shape != (n,):
            raise R2AInputError(f"{where}: gripper has shape {self.gripper.shape}, expected ({n},)")
        for name in ("joint_pos", "gripper_qpos", "sim_states", "robot_states"):
            value = getattr(self, name)
            if value is not None:
                _expect_2d(value, f"{where}: {name}", None, n)
        chunks, width = self.label_chunks, self.actions.shape[1]
        if chunks is not None and (chunks.ndim != 3 or chunks.shape[0] != n or chunks.shape[2] != width):
            raise R2AInputError(f"{where}: label_chunks has shape {chunks.shape}, expected ({n}, H, {width})")
        for cam, frames in self.images.items():
            if frames.ndim != 4 or frames.shape[0] != n or frames.shape[-1] != 3 or frames.dtype != np.uint8:
                raise R2AInputError(
                    f"{where}: images/{cam} has shape {frames.shape} dtype {frames.dtype}, "
                    f"expected ({n}, H, W, 3) uint8")
        return self


def _expect_2d(arr: np.ndarray, what: str, width: int | None, length: int | None = None) -> int:
    if not isinstance(arr, np.ndarray) or arr.ndim != 2:
        shape = getattr(arr, "shape", type(arr).__name__)
        raise R2AInputError(f"{what} has shape {shape}, expected a 2-D array (T, {width or 'D'})")
    if width is not None and arr.shape[1] != width:
        raise R2AInputError(f"{what} has shape {arr.shape}, expected (T, {width})")
    if length is not None and arr.shape[0] != length:
        raise R2AInputError(f"{what} has {arr.shape[0]} rows, expected {length} (one per action)")
    return int(arr.shape[0])


#: Panda finger joints each travel 0–0.04 m; the opening is their difference.
PANDA_GRIPPER_MAX_OPENING = 0.08


def gripper_opening(finger_qpos: np.ndarray) -> np.ndarray:
    """Normalized gripper opening in [0, 1] from the two finger joint positions ``(..., 2)``."""
    q = np.asarray(finger_qpos, dtype=np.float64)
    return np.clip((q[..., 0] - q[..., 1]) / PANDA_GRIPPER_MAX_OPENING, 0.0, 1.0)
