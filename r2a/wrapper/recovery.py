"""Start-pose recovery: bring an out-of-distribution start pose back to where the demonstrations started.

A base policy cloned from demonstrations has only seen the demos' start poses; a start far from all of them
(the robot_init shift) makes its first chunks extrapolate. Before the first base query, the current EE pose is
compared with the demos' start poses through the graph (the kinematic key's position and rot6d groups, with the
graph's own normalization). When its distance to the nearest demo start exceeds ``threshold_scale`` × the largest
distance between a demo start and its nearest other demo start (the spread of the demos' own starts) — and the
nearest start lies farther than an absolute floor (``min_position_offset`` metres or ``min_rotation_offset`` radians,
the starts robosuite's own initialization noise makes: demos that all start close together would otherwise servo a
start a few millimetres off, as they did on LIBERO before the floor) — the wrapper
servos the EE to that nearest start pose with proportional delta-EE commands — closed loop, one step per query, gripper
open — until it is within tolerance or the step budget is spent. Only the EE pose from the observation is used.
"""

from __future__ import annotations

import numpy as np

from graph_builder.motion_graph import MotionGraph
from r2a.retrieval.motion import DELTA_EE_SCALE
from r2a.wrapper.config import RecoverySettings
from r2a_core.rotations import matrix_to_axis_angle, quat_to_matrix
from r2a_core.types import ActionSpace


class StartPoseRecovery:
    """Decides whether a start needs recovery and produces the servo's actions."""

    def __init__(self, graph: MotionGraph, settings: RecoverySettings, action_space: ActionSpace,
                 steady_gain: tuple[float, float] = (1.0, 1.0)) -> None:
        self.settings, self.action_space = settings, action_space
        a = graph.arrays
        starts = a["demo_node_ptr"][:-1]
        spec = graph.key_spec
        self._cols = spec.columns(("ee_pos", "ee_rot6d"))  # the pose only: neither the gripper nor the phase
        self._spec = spec
        self._keys = a["node_key"][starts][:, self._cols].astype(np.float64)
        self._pos = a["node_ee_pos"][starts].astype(np.float64)
        self._quat = a["node_ee_quat"][starts].astype(np.float64)
        self.threshold = settings.threshold_scale * _start_spread(self._keys)
        #: metres (radians) one unit of action moves per step at steady state: commands are divided by it
        self._unit = (DELTA_EE_SCALE[0] * steady_gain[0], DELTA_EE_SCALE[1] * steady_gain[1])

    def distance(self, ee_pos: np.ndarray, ee_quat: np.ndarray, gripper: float) -> tuple[float, int]:
        """Key distance to the nearest demo start, and which start that is."""
        key = self._spec.make_key(ee_pos, ee_quat, gripper, 0.0)[0, self._cols]
        d = np.linalg.norm(self._keys - key, axis=1)
        i = int(np.argmin(d))
        return float(d[i]), i

    def needed(self, ee_pos: np.ndarray, ee_quat: np.ndarray, gripper: float) -> tuple[bool, int, float]:
        """Recover when the start lies beyond the demos' own start spread *and* beyond the absolute floor (a
        usual start is never servoed, however tightly the demos' starts cluster)."""
        d, target = self.distance(ee_pos, ee_quat, gripper)
        return self.settings.enabled and d > self.threshold and self.beyond_floor(ee_pos, ee_quat, target), target, d

    def beyond_floor(self, ee_pos: np.ndarray, ee_quat: np.ndarray, target: int) -> bool:
        """Whether the pose lies farther from start ``target`` than the settings' absolute floor (metres, radians)."""
        pos_err, rot_err = self.errors(ee_pos, ee_quat, target)
        return bool(np.linalg.norm(pos_err) > self.settings.min_position_offset
                    or np.linalg.norm(rot_err) > self.settings.min_rotation_offset)

    def errors(self, ee_pos: np.ndarray, ee_quat: np.ndarray, target: int) -> tuple[np.ndarray, np.ndarray]:
        """Position error (m) and world-frame rotation error (axis-angle, rad) to start ``target``."""
        rot_err = matrix_to_axis_angle(quat_to_matrix(self._quat[target]) @ quat_to_matrix(ee_quat).T)
        return self._pos[target] - np.asarray(ee_pos, np.float64), rot_err

    def done(self, ee_pos: np.ndarray, ee_quat: np.ndarray, target: int, steps: int) -> bool:
        pos_err, rot_err = self.errors(ee_pos, ee_quat, target)
        close = (np.linalg.norm(pos_err) <= self.settings.position_tolerance
                 and np.linalg.norm(rot_err) <= self.settings.rotation_tolerance)
        return close or steps >= self.settings.max_steps

    def action(self, ee_pos: np.ndarray, ee_quat: np.ndarray, target: int) -> np.ndarray:
        """One proportional delta-EE command toward start ``target``, gripper open, inside the bounds."""
        pos_err, rot_err = self.errors(ee_pos, ee_quat, target)
        act = np.zeros(self.action_space.dim)
        act[0:3] = self.settings.gain * pos_err / self._unit[0]
        act[3:6] = self.settings.gain * rot_err / self._unit[1]
        act[list(self.action_space.gripper_dims)] = -1.0  # open (OSC_POSE: -1 open, +1 close)
        return self.action_space.clip(act)


def _start_spread(keys: np.ndarray) -> float:
    """The largest nearest-other-start distance among the demo starts (how far apart the demos' own starts lie)."""
    if len(keys) < 2:
        return 0.0
    best = np.full(len(keys), np.inf)
    for lo in range(0, len(keys), 1024):  # bounded memory for graphs with many demos
        d = np.linalg.norm(keys[lo:lo + 1024, None] - keys[None], axis=-1)
        d[np.arange(len(d)), np.arange(lo, lo + len(d))] = np.inf
        best[lo:lo + len(d)] = d.min(axis=1)
    return float(best.max())


__all__ = ["StartPoseRecovery"]
