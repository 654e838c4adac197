"""Scripted experts for LIBERO's pick-and-place suites (libero_spatial, libero_object).

The same closed-loop waypoint walker as the built-in tasks (:class:`demos.experts.scripted.ScriptedExpert`), on
plans made for LIBERO's objects. Every waypoint is re-evaluated every step from the simulator's current object
boxes (:meth:`sim.envs.libero_env.LiberoSimEnv.object_bounds`: LIBERO's meshes put their body origin anywhere, so
the plans work with the objects' real tops, bottoms and footprints). What makes them work (docs/experiments/
libero.md):

- **Bowls** (libero_spatial) are taken by the rim, 4.9 cm off centre and 5 mm below the top, with the fingers
  across the wall and the hand pitched by the wall's lean (15°) about the rim's tangent, so that the pads lie
  along the wall (vertical pads pinch it as a couple that turns the 5.6 g bowl out of the hand on long carries):
  on a ±y side where the open hand fits beside the scenery (a cabinet next to the bowl) and farther from the other
  objects; the bowl in the cabinet's drawer (task 4) from the −x side, the hand turned 90°, so that no finger
  enters the cabinet; the bowl on the cabinet (task 9) from −x too, where the pitched hand leans back toward the
  robot's base and the long carry stays within the arm's reach.
- **Lift and carry**: straight up until the held object clears what flanked it (a drawer's walls), then over the
  goal, coming down only as it closes in (not through the cabinet it came from).
- **Groceries** (libero_object) are taken across their short side (the footprint's minor axis), tall items 5 cm
  below the top and low boxes at mid-height, but never so low that the fingertips (1 cm below the grip site)
  touch the floor; they are carried with their bottom above the basket's rim and let go 2 cm above it.
- The hand points down and turns about the vertical; for a bowl it is also pitched (``Phase.tilt``) while it
  hovers, and keeps that pitch until the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from demos.experts.phase import CLOSED, OPEN, Phase
from r2a_core.rotations import quat_to_yaw

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.libero_env import LiberoSimEnv

Target = Callable[["LiberoSimEnv"], np.ndarray]
Height = Callable[["LiberoSimEnv"], float]

#: the grip site's position gain: 1 cm of error commands 2 cm/step (OSC_POSE's full scale is 5 cm)
LIBERO_GAIN = 1.0
BOWL_RIM = 0.049
#: how far below the bowl's top the grip site closes. Chosen when the pads were vertical (they touched the leaning
#: wall at the lip outside and at their lower edge inside, a couple that turned the bowl out of the hand ~30 steps
#: after the lift when held 1.5 cm down; 5 mm down the couple was smaller); the hand is pitched now
#: (``BOWL_WALL_LEAN``), and 1 cm down measured the same as 5 mm on task 0
BOWL_GRASP_DEPTH = 0.005
#: how far (rad) the bowl's wall leans out from the vertical at the rim: the hand is pitched by as much about the
#: rim's tangent, so that the finger pads lie along the wall instead of pinching it at the lip and the lower edge
BOWL_WALL_LEAN = 0.26
#: a bowl this far (m) from where it stood was dropped on the way: it is taken again RETRY_GRASP_DEPTH down
DROPPED = 0.03
RETRY_GRASP_DEPTH = 0.015
#: fingertips reach this far below the grip site
FINGER_REACH = 0.012
TALL_ITEM = 0.08
TALL_GRASP_DEPTH = 0.05
#: the least a grasped object is raised off its support before it is carried
MIN_LIFT = 0.05
#: things within this (m) of a resting object's footprint flank it: it rises SIDE_CLEARANCE above them first
FLANK_MARGIN = 0.01
SIDE_CLEARANCE = 0.015
#: while carried, the held object stays at most this high above its carry height per metre still to travel
CARRY_SLOPE = 1.0
#: how high (m) the held object's bottom clears the goal's top while carried, and where it is let go
CARRY_CLEARANCE = {"plate": 0.04, "basket": 0.05}
RELEASE_CLEARANCE = {"plate": 0.01, "basket": 0.02}
#: the open hand around its grip site, fingers along an axis: (half length along it, half width across it, bottom
#: and top relative to the grip site) of the two fingers, then of the hand above them (Panda's collision boxes)
OPEN_HAND_BOXES = ((0.07, 0.015, -0.013, 0.05), (0.105, 0.04, 0.024, 0.13))
#: tasks whose bowl is taken from another rim side: the bowl in the top drawer (fingers across the drawer); the
#: bowl on the cabinet (its carry to the plate is the longest): from −x the pitched hand leans back toward the base,
#: ~10 cm less reach than from ±y, where the straight elbow (its joint limit) stopped the bowl short of the plate
RIM_SIDE_OVERRIDES = {"libero_spatial/4": (-1.0, 0.0), "libero_spatial/9": (-1.0, 0.0)}
#: tasks whose bowl is held deeper: the bowl in the drawer, pulled against the drawer's front while the hand
#: closes, slips out of a shallow grasp; its carry is short
GRASP_DEPTH_OVERRIDES = {"libero_spatial/4": 0.015}


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
    """The horizontal unit offset from the bowl's centre to the rim point it is grasped at: a ±y side where the
    open hand fits (nothing of the scene in its way: a cabinet beside the bowl), farther from the other objects;
    a ±x side (the hand turned 90°) only when neither ±y side fits. Decided on the layout at rest, so that the
    side stays put while the hand closes in."""
    spec = sim.libero_spec
    if spec.name in RIM_SIDE_OVERRIDES:
        return np.array(RIM_SIDE_OVERRIDES[spec.name])
    centre = sim.initial_object_pos(spec.target)[:2]
    others = [sim.initial_object_pos(n)[:2] for n in sim.task.objects if n != spec.target]
    grasp_z = _rest_bounds(sim, spec.target)[1][2] - _grasp_depth(sim)

    def clearance(side: np.ndarray) -> float:
        point = centre + BOWL_RIM * side
        return min(float(np.linalg.norm(point - other)) for other in others)

    def intrusion(side: np.ndarray) -> float:
        return _hand_intrusion(sim, np.array([*(centre + BOWL_RIM * side), grasp_z]), side, spec.target)

    sides_y = [np.array([0.0, 1.0]), np.array([0.0, -1.0])]
    free = [side for side in sides_y if intrusion(side) <= 0.0]
    if free:
        return max(free, key=clearance)
    return min(sides_y + [np.array([1.0, 0.0]), np.array([-1.0, 0.0])], key=lambda side: (intrusion(side),
                                                                                          -clearance(side)))


def _hand_intrusion(sim: "LiberoSimEnv", grip: np.ndarray, side: np.ndarray, target: str) -> float:
    """How far (m) the scene, other than ``target``, reaches up into the open hand with its grip site at ``grip``
    and the fingers along the horizontal axis ``side`` (±x or ±y); negative where the hand fits."""
    across = np.array([-side[1], side[0]])
    worst = -np.inf
    for along_half, across_half, z_low, z_high in OPEN_HAND_BOXES:
        half = np.abs(side) * along_half + np.abs(across) * across_half
        low = np.array([*(grip[:2] - half), grip[2] + z_low])
        high = np.array([*(grip[:2] + half), grip[2] + z_high])
        worst = max(worst, sim.highest_in(low, high, exclude=target) - low[2])
    return worst


def _rest_bounds(sim: "LiberoSimEnv", name: str) -> tuple[np.ndarray, np.ndarray]:
    """The object's box where it rested after settling (its box now, shifted by how far it has been raised)."""
    low, high = sim.object_bounds(name)
    raised = np.array([0.0, 0.0, sim.object_pos(name)[2] - sim.initial_object_pos(name)[2]])
    return low - raised, high - raised


def _bowl_grasp(sim: "LiberoSimEnv") -> np.ndarray:
    bowl = sim.libero_spec.target
    low, high = sim.object_bounds(bowl)
    centre = (low + high) / 2.0
    side = _rim_side(sim)
    return np.array([centre[0] + BOWL_RIM * side[0], centre[1] + BOWL_RIM * side[1], high[2] - _grasp_depth(sim)])


def _grasp_depth(sim: "LiberoSimEnv") -> float:
    """How far below the top the bowl is taken: shallow for the long carry from where it stood; deeper once it has
    been dropped elsewhere (a shallow grasp often loses a bowl lifted off the flat table, and the carry left is
    short)."""
    spec = sim.libero_spec
    if spec.name in GRASP_DEPTH_OVERRIDES:
        return GRASP_DEPTH_OVERRIDES[spec.name]
    moved = np.linalg.norm(sim.object_pos(spec.target)[:2] - sim.initial_object_pos(spec.target)[:2])
    return RETRY_GRASP_DEPTH if moved > DROPPED else BOWL_GRASP_DEPTH


def _bowl_yaw(sim: "LiberoSimEnv") -> float:
    """Fingers across the rim wall: along the rim side's direction."""
    side = _rim_side(sim)
    return _closest_yaw([float(np.arctan2(side[1], side[0]))], float(quat_to_yaw(sim.ee_quat())))


def _bowl_tilt(sim: "LiberoSimEnv") -> np.ndarray:
    """Pitch the hand about the rim's tangent by the wall's lean, fingertips toward the bowl's centre, so that the
    pads lie along the leaning wall (vertical pads squeeze it as a couple that turns the bowl out of the hand)."""
    side = _rim_side(sim)
    tangent = np.cross([0.0, 0.0, 1.0], [side[0], side[1], 0.0])
    return BOWL_WALL_LEAN * tangent


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


def _lift_height(clear_z: Height) -> Height:
    """Where the lift takes the held object's bottom: to ``clear_z``, at least ``MIN_LIFT`` off its support and
    ``SIDE_CLEARANCE`` above whatever flanked it at rest (the walls of the drawer it lay in)."""
    def height(sim: "LiberoSimEnv") -> float:
        obj = sim.libero_spec.target
        rest_low, rest_high = _rest_bounds(sim, obj)
        margin = np.array([FLANK_MARGIN, FLANK_MARGIN, 0.0])
        flank = sim.highest_in(rest_low - margin, rest_high + margin, exclude=obj) + SIDE_CLEARANCE
        return max(clear_z(sim), rest_low[2] + MIN_LIFT, flank)
    return height


def _lift_to(height: Height) -> Target:
    """Straight up until the held object's bottom is at ``height``."""
    def target(sim: "LiberoSimEnv") -> np.ndarray:
        ee = sim.ee_pos()
        return np.array([ee[0], ee[1], ee[2] + height(sim) - sim.object_bounds(sim.libero_spec.target)[0][2]])
    return target


def _over_goal(clearance: float, ceiling: Height | None = None) -> Target:
    """Move the grip site so that the held object's bottom centre is ``clearance`` above the goal's top centre.

    With a ``ceiling`` (the lift's height) the object comes down only as it closes in, at most ``CARRY_SLOPE``
    metres above that point per metre still to go sideways and never above the ceiling: a straight line from the
    lift would cut down through the walls of the drawer or the cabinet top the bowl came from (the per-axis
    clipped action descends as fast as it travels), and a hand left to drift up stretches the arm into its
    singular pose on the long carries (a bowl on the cabinet).
    """
    def target(sim: "LiberoSimEnv") -> np.ndarray:
        spec = sim.libero_spec
        low, high = sim.object_bounds(spec.target)
        held = np.array([(low[0] + high[0]) / 2, (low[1] + high[1]) / 2, low[2]])
        goal_low, goal_high = sim.object_bounds(spec.goal)
        goal = np.array([(goal_low[0] + goal_high[0]) / 2, (goal_low[1] + goal_high[1]) / 2,
                         goal_high[2] + clearance])
        if ceiling is not None:
            sideways = float(np.linalg.norm(goal[:2] - held[:2]))
            goal[2] += min(CARRY_SLOPE * sideways, max(ceiling(sim) - goal[2], 0.0))
        return sim.ee_pos() + (goal - held)
    return target


def _goal_top(extra: float) -> Callable[["LiberoSimEnv"], float]:
    return lambda sim: float(sim.object_bounds(sim.libero_spec.goal)[1][2] + extra)


def pick_and_place(obj: str, grasp: Target, yaw: Callable[["LiberoSimEnv"], float], goal_kind: str,
                   tilt: Callable[["LiberoSimEnv"], np.ndarray] | None = None) -> list[Phase]:
    """Hover, descend, close, lift clear of the goal, carry over it, lower, release, retreat (``obj`` slips: again).

    ``tilt``: the hand's pitch from pointing down (world axis-angle), taken while hovering and kept to the end."""
    carry, release = CARRY_CLEARANCE[goal_kind], RELEASE_CLEARANCE[goal_kind]
    lift_height = _lift_height(_goal_top(carry + 0.02))
    return [
        Phase("hover", _hover(grasp, 0.10), OPEN, tolerance=0.015, yaw=yaw, tilt=tilt, from_above=True),
        Phase("descend", grasp, OPEN, tolerance=0.008, yaw=yaw, tilt=tilt, max_steps=60),
        Phase("close", grasp, CLOSED, tolerance=1.0, hold_steps=16),
        Phase("lift", _lift_to(lift_height), CLOSED, tolerance=0.02, max_steps=60, holding=obj),
        Phase("carry", _over_goal(carry, lift_height), CLOSED, tolerance=0.015, max_steps=100, holding=obj,
              from_above=True),
        Phase("lower", _over_goal(release), CLOSED, tolerance=0.008, max_steps=40, holding=obj, places=True),
        Phase("release", lambda sim: sim.ee_pos(), OPEN, tolerance=1.0, hold_steps=8),
        Phase("retreat", lambda sim: sim.ee_pos() + np.array([0.0, 0.0, 0.03]), OPEN, tolerance=1.0,
              hold_steps=10_000),
    ]


def libero_phases(sim: "LiberoSimEnv") -> list[Phase]:
    """The plan for the LIBERO task ``sim`` was built for."""
    spec = sim.libero_spec
    if spec.suite == "libero_spatial":
        return pick_and_place(spec.target, _bowl_grasp, _bowl_yaw, "plate", tilt=_bowl_tilt)
    if spec.suite == "libero_object":
        return pick_and_place(spec.target, _item_grasp, _item_yaw, "basket")
    raise ValueError(f"no scripted expert for LIBERO suite '{spec.suite}'")
