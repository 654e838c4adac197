"""Scripted experts for LIBERO's pick-and-place suites (libero_spatial, libero_object).

The same closed-loop waypoint walker as the built-in tasks (:class:`demos.experts.scripted.ScriptedExpert`), on
plans made for LIBERO's objects. Every waypoint is re-evaluated every step from the simulator's current object
boxes (:meth:`sim.envs.libero_env.LiberoSimEnv.object_bounds`: LIBERO's meshes put their body origin anywhere, so
the plans work with the objects' real tops, bottoms and footprints). What makes them work (docs/experiments/
libero.md):

- **Bowls** (libero_spatial) are taken by the rim, 4.5 cm off centre and 2 cm below the top, with the fingers
  across the wall: on the ±y side with the start yaw, on the side farther from the other objects; the bowl in the
  cabinet's drawer (task 4) from the −x side, the hand turned 90°, so that no finger enters the cabinet.
- **Groceries** (libero_object) are taken across their short side (the footprint's minor axis), tall items 5 cm
  below the top and low boxes at mid-height, but never so low that the fingertips (1 cm below the grip site)
  touch the floor; they are carried with their bottom above the basket's rim and let go 2 cm above it.
- The hand holds its start orientation (pointing down) and turns only about the vertical.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from demos.experts.phase import CLOSED, OPEN, Phase
from r2a_core.rotations import quat_to_yaw

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.libero_env import LiberoSimEnv

Target = Callable[["LiberoSimEnv"], np.ndarray]

#: the grip site's position gain: 1 cm of error commands 2 cm/step (OSC_POSE's full scale is 5 cm)
LIBERO_GAIN = 1.0
BOWL_RIM = 0.049
BOWL_GRASP_DEPTH = 0.015
#: fingertips reach this far below the grip site
FINGER_REACH = 0.012
TALL_ITEM = 0.08
TALL_GRASP_DEPTH = 0.05
#: the least a grasped object is raised off its support before it is carried
MIN_LIFT = 0.05
#: how high (m) the held object's bottom clears the goal's top while carried, and where it is let go
CARRY_CLEARANCE = {"plate": 0.04, "basket": 0.05}
RELEASE_CLEARANCE = {"plate": 0.01, "basket": 0.02}
#: tasks whose bowl is taken from another rim side: the bowl in the top drawer (fingers across the drawer)
RIM_SIDE_OVERRIDES = {"libero_spatial/4": (-1.0, 0.0)}


def _centre(sim: "LiberoSimEnv", name: str) -> np.ndarray:
    low, high = sim.object_bounds(name)
    return (low + high) / 2.0


def _footprint_axis(sim: "LiberoSimEnv", name: str) -> tuple[float, float]:
    """(yaw of the footprint's long axis, long/short ratio) from the horizontal spread of the object's geom boxes
    (all eight corners: a mesh's local axes may lie any way up)."""
    xy = sim.object_corners(name)[:, :2]
    xy = xy - xy.mean(axis=0)
    values, vectors = np.linalg.eigh(xy.T @ xy)
    long_axis = vectors[:, 1]
    return float(np.arctan2(long_axis[1], long_axis[0])), float(np.sqrt(values[1] / max(values[0], 1e-12)))


def _closest_yaw(candidates: list[float], current: float) -> float:
    """The candidate (or its half-turn: the gripper is symmetric) reached by the smallest rotation from current."""
    options = [c + k * np.pi for c in candidates for k in (-2, -1, 0, 1, 2)]
    return float(min(options, key=lambda yaw: abs(yaw - current)))


# ----------------------------------------------------------------------------------------------- bowls
def _rim_side(sim: "LiberoSimEnv") -> np.ndarray:
    """The horizontal unit offset from the bowl's centre to the rim point it is grasped at."""
    spec = sim.libero_spec
    if spec.name in RIM_SIDE_OVERRIDES:
        return np.array(RIM_SIDE_OVERRIDES[spec.name])
    centre = sim.initial_object_pos(spec.target)[:2]
    others = [sim.initial_object_pos(n)[:2] for n in sim.task.objects if n != spec.target]

    def clearance(side: np.ndarray) -> float:
        point = centre + BOWL_RIM * side
        return min(float(np.linalg.norm(point - other)) for other in others)

    sides = [np.array([0.0, 1.0]), np.array([0.0, -1.0])]
    return max(sides, key=clearance)


def _bowl_grasp(sim: "LiberoSimEnv") -> np.ndarray:
    bowl = sim.libero_spec.target
    low, high = sim.object_bounds(bowl)
    centre = (low + high) / 2.0
    side = _rim_side(sim)
    return np.array([centre[0] + BOWL_RIM * side[0], centre[1] + BOWL_RIM * side[1], high[2] - BOWL_GRASP_DEPTH])


def _bowl_yaw(sim: "LiberoSimEnv") -> float:
    """Fingers across the rim wall: along the rim side's direction."""
    side = _rim_side(sim)
    return _closest_yaw([float(np.arctan2(side[1], side[0]))], float(quat_to_yaw(sim.ee_quat())))


# ----------------------------------------------------------------------------------------------- groceries
def _item_grasp(sim: "LiberoSimEnv") -> np.ndarray:
    item = sim.libero_spec.target
    low, high = sim.object_bounds(item)
    centre = (low + high) / 2.0
    height = high[2] - low[2]
    z = high[2] - TALL_GRASP_DEPTH if height > TALL_ITEM else centre[2]
    return np.array([centre[0], centre[1], max(z, low[2] + FINGER_REACH + 0.004)])


def _item_yaw(sim: "LiberoSimEnv") -> float:
    """Fingers along the footprint's short axis (round items: keep the current yaw)."""
    long_yaw, ratio = _footprint_axis(sim, sim.libero_spec.target)
    current = float(quat_to_yaw(sim.ee_quat()))
    if ratio < 1.15:
        return current
    return _closest_yaw([long_yaw + np.pi / 2], current)


# ---------------------------------------------------------------------------------------------- plans
def _hover(grasp: Target, height: float) -> Target:
    return lambda sim: grasp(sim) + np.array([0.0, 0.0, height])


def _lift_to(clear_z: Callable[["LiberoSimEnv"], float]) -> Target:
    """Straight up until the held object's bottom is at ``clear_z``, and at least ``MIN_LIFT`` off its support."""
    def target(sim: "LiberoSimEnv") -> np.ndarray:
        ee = sim.ee_pos()
        obj = sim.libero_spec.target
        bottom = sim.object_bounds(obj)[0][2]
        lowest = bottom + (sim.initial_object_pos(obj)[2] + MIN_LIFT - sim.object_pos(obj)[2])
        return np.array([ee[0], ee[1], ee[2] + max(clear_z(sim), lowest) - bottom])
    return target


def _over_goal(clearance: float) -> Target:
    """Move the grip site so that the held object's bottom centre is ``clearance`` above the goal's top centre."""
    def target(sim: "LiberoSimEnv") -> np.ndarray:
        spec = sim.libero_spec
        low, high = sim.object_bounds(spec.target)
        held = np.array([(low[0] + high[0]) / 2, (low[1] + high[1]) / 2, low[2]])
        goal_low, goal_high = sim.object_bounds(spec.goal)
        goal = np.array([(goal_low[0] + goal_high[0]) / 2, (goal_low[1] + goal_high[1]) / 2,
                         goal_high[2] + clearance])
        return sim.ee_pos() + (goal - held)
    return target


def _goal_top(extra: float) -> Callable[["LiberoSimEnv"], float]:
    return lambda sim: float(sim.object_bounds(sim.libero_spec.goal)[1][2] + extra)


def pick_and_place(obj: str, grasp: Target, yaw: Callable[["LiberoSimEnv"], float], goal_kind: str) -> list[Phase]:
    """Hover, descend, close, lift clear of the goal, carry over it, lower, release, retreat (``obj`` slips: again)."""
    carry, release = CARRY_CLEARANCE[goal_kind], RELEASE_CLEARANCE[goal_kind]
    return [
        Phase("hover", _hover(grasp, 0.10), OPEN, tolerance=0.015, yaw=yaw, from_above=True),
        Phase("descend", grasp, OPEN, tolerance=0.008, yaw=yaw, max_steps=60),
        Phase("close", grasp, CLOSED, tolerance=1.0, hold_steps=16),
        Phase("lift", _lift_to(_goal_top(carry + 0.02)), CLOSED, tolerance=0.02, max_steps=60, holding=obj),
        Phase("carry", _over_goal(carry), CLOSED, tolerance=0.015, max_steps=100, holding=obj, from_above=True),
        Phase("lower", _over_goal(release), CLOSED, tolerance=0.008, max_steps=40, holding=obj, places=True),
        Phase("release", lambda sim: sim.ee_pos(), OPEN, tolerance=1.0, hold_steps=8),
        Phase("retreat", lambda sim: sim.ee_pos() + np.array([0.0, 0.0, 0.03]), OPEN, tolerance=1.0,
              hold_steps=10_000),
    ]


def libero_phases(sim: "LiberoSimEnv") -> list[Phase]:
    """The plan for the LIBERO task ``sim`` was built for."""
    spec = sim.libero_spec
    if spec.suite == "libero_spatial":
        return pick_and_place(spec.target, _bowl_grasp, _bowl_yaw, "plate")
    if spec.suite == "libero_object":
        return pick_and_place(spec.target, _item_grasp, _item_yaw, "basket")
    raise ValueError(f"no scripted expert for LIBERO suite '{spec.suite}'")
