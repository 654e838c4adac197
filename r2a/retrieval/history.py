"""What the wrapper remembers of the ongoing execution: EE poses, gripper openings and executed actions.

The wrapper sees an observation only when it is queried — every executed chunk in the benchmark, every
``replan_steps`` through a proxy — so the history is kept per control step and the steps in between are filled
in: the executed actions are the ones the wrapper returned (the client executes a prefix of its chunk), the poses
are interpolated linearly between the observed ones. ``state/step`` (when the observation carries it) says how
many steps passed; without it, the returned chunk's length is assumed to have been executed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from r2a_core.rotations import canonical_quat


@dataclass
class ExecutionHistory:
    """Per-step rows of the current episode, oldest first (``capacity`` bounds the memory)."""

    action_dim: int
    capacity: int = 256
    steps: list[int] = field(default_factory=list)
    ee_pos: list[np.ndarray] = field(default_factory=list)
    ee_quat: list[np.ndarray] = field(default_factory=list)
    gripper: list[float] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)  # actions[i] executed at steps[i]
    _planned: list[np.ndarray] = field(default_factory=list)

    def reset(self) -> None:
        for rows in (self.steps, self.ee_pos, self.ee_quat, self.gripper, self.actions, self._planned):
            rows.clear()

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def last_step(self) -> int | None:
        return self.steps[-1] if self.steps else None

    def observe(self, step: int, ee_pos: np.ndarray, ee_quat: np.ndarray, gripper: float) -> None:
        """Record the pose at ``step``; steps since the last observation are filled (see the module docstring)."""
        pos, quat = np.asarray(ee_pos, np.float64).reshape(3), canonical_quat(np.asarray(ee_quat).reshape(4))
        if self.steps:
            gap = step - self.steps[-1]
            if gap <= 0:  # the same step observed again, or a new episode without reset: start over
                if gap < 0:
                    self.reset()
                else:
                    self._replace_last(pos, quat, gripper)
                    return
            else:
                self._fill(gap, pos, quat, float(gripper))
        self._append(step, pos, quat, float(gripper))
        self._trim()

    def plan(self, actions: np.ndarray) -> None:
        """The actions just returned, which the client is expected to execute from the current step on."""
        self._planned = list(np.asarray(actions, np.float64).reshape(-1, self.action_dim))

    def _fill(self, gap: int, pos: np.ndarray, quat: np.ndarray, gripper: float) -> None:
        """Executed actions of the ``gap`` steps since the last observation, and poses between the two."""
        planned = self._planned + [self._planned[-1] if self._planned else np.zeros(self.action_dim)] * gap
        self.actions.append(planned[0])
        start_pos, start_q, start_g = self.ee_pos[-1], self.ee_quat[-1], self.gripper[-1]
        for k in range(1, gap):
            t = k / gap
            q = start_q * (1 - t) + quat * t * (1.0 if np.dot(start_q, quat) >= 0 else -1.0)
            self._append(self.steps[-1] + 1, start_pos * (1 - t) + pos * t, canonical_quat(q),
                         start_g * (1 - t) + gripper * t)
            self.actions.append(planned[k])
        self._planned = []

    def _append(self, step: int, pos: np.ndarray, quat: np.ndarray, gripper: float) -> None:
        self.steps.append(int(step))
        self.ee_pos.append(pos)
        self.ee_quat.append(quat)
        self.gripper.append(gripper)

    def _replace_last(self, pos: np.ndarray, quat: np.ndarray, gripper: float) -> None:
        self.ee_pos[-1], self.ee_quat[-1], self.gripper[-1] = pos, quat, float(gripper)

    def _trim(self) -> None:
        extra = len(self.steps) - self.capacity
        if extra > 0:
            for rows in (self.steps, self.ee_pos, self.ee_quat, self.gripper):
                del rows[:extra]
            del self.actions[:max(0, len(self.actions) - (len(self.steps) - 1))]

    # ---------------------------------------------------------------------------------------------- reading
    def window(self, length: int) -> "HistoryWindow":
        """The last ``length`` steps before the current one (padded with the oldest known row at the start of
        an episode) plus the current pose; actions are those executed at those steps (zeros when unknown)."""
        n = len(self.steps)
        if n == 0:
            raise ValueError("the history is empty: observe a step first")
        idx = np.clip(np.arange(n - 1 - length, n - 1), 0, n - 1)
        actions = np.zeros((length, self.action_dim))
        known = np.arange(n - 1 - length, n - 1)
        have = (known >= 0) & (known < len(self.actions))
        if np.any(have):
            actions[have] = np.array([self.actions[i] for i in known[have]])
        # np.array of the rows rather than np.stack: the same copy, without stack's per-row dispatch (every query)
        return HistoryWindow(
            ee_pos=np.array([self.ee_pos[i] for i in idx]), ee_quat=np.array([self.ee_quat[i] for i in idx]),
            gripper=np.array([self.gripper[i] for i in idx]), actions=actions,
            valid=int(min(length, n - 1)), now_pos=self.ee_pos[-1], now_quat=self.ee_quat[-1],
            now_gripper=self.gripper[-1], step=self.steps[-1])


def window_from_arrays(ee_pos: np.ndarray, ee_quat: np.ndarray, gripper: np.ndarray, actions: np.ndarray, t: int,
                       length: int) -> "HistoryWindow":
    """The window an :class:`ExecutionHistory` would give at frame ``t`` of a recorded episode (every step
    observed): rows ``t-length .. t-1`` (padded with frame 0), the actions executed there, frame ``t`` as now."""
    idx = np.clip(np.arange(t - length, t), 0, max(t, 0))
    acts = np.zeros((length, actions.shape[1]))
    known = np.arange(t - length, t)
    have = known >= 0
    acts[have] = actions[known[have]]
    if t == 0:
        idx = np.zeros(length, int)
    return HistoryWindow(ee_pos=np.asarray(ee_pos[idx], np.float64), ee_quat=canonical_quat(ee_quat[idx]),
                         gripper=np.asarray(gripper[idx], np.float64), actions=acts, valid=int(min(length, t)),
                         now_pos=np.asarray(ee_pos[t], np.float64), now_quat=canonical_quat(ee_quat[t]),
                         now_gripper=float(gripper[t]), step=int(t))


@dataclass(frozen=True)
class HistoryWindow:
    """A fixed-length view of the history, ready to be encoded into a query."""

    ee_pos: np.ndarray  # (H, 3)
    ee_quat: np.ndarray  # (H, 4) wxyz
    gripper: np.ndarray  # (H,)
    actions: np.ndarray  # (H, A)
    valid: int  # how many of the H rows are real (the rest repeat the oldest)
    now_pos: np.ndarray  # (3,)
    now_quat: np.ndarray  # (4,)
    now_gripper: float
    step: int


__all__ = ["ExecutionHistory", "HistoryWindow", "window_from_arrays"]
