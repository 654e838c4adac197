"""Scripted experts for the built-in tasks: privileged, closed-loop waypoint controllers.

An expert reads object poses from the simulator (it is bound to a :class:`~sim.envs.robosuite_env.SimEnv`) and
walks a list of phases — hover, descend, close, lift, carry, lower, open, retreat — each re-targeting on the
*current* object poses every step, so small slips are corrected rather than replayed. Actions are robosuite
OSC_POSE deltas in [-1, 1] (±5 cm and ±0.5 rad per step at full scale); the gripper is -1 open, +1 closed.
It implements the Policy protocol and returns a one-step chunk. Variants (``EXPERT_VARIANTS``) differ in how a
held object is lowered onto its base: ``scripted`` centres it within 8 mm above the base, then lowers it;
``scripted-funnel`` lowers it through a funnel (:func:`_funnel`), centring and lowering at once.

In *relabel* mode the expert labels states another policy reached (DAgger) instead of driving, and it follows
the learner's progress rather than its own script: a phase never times out (a time-out moves a driving expert
on, but would label "lower" or "release" wherever a hovering learner happens to be); a waypoint the learner
passed on its way down counts as reached, and the hand's yaw no longer holds a phase back (else a learner that
descends straight onto a cube is told to go back up), while a hand that drifts more than twice that waypoint's
tolerance sideways goes back to it; when the object of a later pick is already in the hand, the expert skips
ahead to lifting it instead of asking to open the hand again; and when the learner let go of the held object
where the place phase wanted it, the expert goes on to releasing instead of picking that object up again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from demos.experts.phase import CLOSED, OPEN, Phase
from r2a_core.errors import R2AInputError
from r2a_core.rotations import (
    axis_angle_to_matrix,
    matrix_to_axis_angle,
    matrix_to_yaw,
    quat_to_matrix,
    quat_to_yaw,
    rot_z,
)

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

POS_SCALE, ROT_SCALE = 0.05, 0.5  # OSC_POSE output_max for position (m) and rotation (rad)
YAW_TOLERANCE = 0.08  # rad; descend only once the hand is turned, or it sweeps neighbouring objects
PLACED = 0.02  # m; a let-go object this close to where the place phase lowers it to counts as placed
#: lowering a held object: the most height (m) above its rest allowed per metre of sideways error (a funnel)
FUNNEL_SLOPE = 2.0
#: grip site pointing straight down (world z flipped), fingers closing along world y at yaw 0
DOWN = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]])


class ScriptedExpert:
    """Walks ``phases`` in order; implements ``infer(obs) -> {"actions": (1, 7)}`` and ``reset()``."""

    def __init__(self, sim: "SimEnv", phases: list[Phase], gain: float = 2.0, relabel: bool = False) -> None:
        self.sim, self.phases, self.gain, self.relabel = sim, phases, gain, relabel
        self.reset()

    def reset(self) -> None:
        self._go_to(0)
        self._yaw_target: float | None = None
        self._tilt_target: np.ndarray | None = None

    @property
    def phase(self) -> Phase:
        return self.phases[min(self._index, len(self.phases) - 1)]

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        if self.relabel:
            self._catch_up()
            self._skip_placed()
            self._fall_back()
        phase = self.phase
        if phase.holding is not None and not self.sim.is_grasped(phase.holding):
            self._restart_pick()
            phase = self.phase
        target = phase.target(self.sim)
        error = target - self.sim.ee_pos()
        action = np.zeros(7, dtype=np.float32)
        action[:3] = np.clip(error / POS_SCALE * self.gain, -1.0, 1.0)
        rotation_error = self._rotation_error(phase)
        action[3:6] = np.clip(rotation_error / ROT_SCALE, -1.0, 1.0)
        action[6] = phase.gripper
        turns = phase.yaw_object is not None or phase.yaw is not None or phase.tilt is not None
        aligned = self.relabel or not turns or float(np.linalg.norm(rotation_error)) < YAW_TOLERANCE
        self._advance(phase, self._distance(phase, error) if aligned else np.inf)
        return {"actions": action[None, :], "phase": phase.name}

    def _advance(self, phase: Phase, distance: float) -> None:
        self._steps_in_phase += 1
        if distance < phase.tolerance:
            self._held += 1
        timed_out = self._steps_in_phase >= phase.max_steps and not self.relabel
        if self._held > phase.hold_steps or timed_out:
            self._go_to(min(self._index + 1, len(self.phases) - 1))

    def _go_to(self, index: int) -> None:
        self._index, self._steps_in_phase, self._held = index, 0, 0

    def _restart_pick(self) -> None:
        """Go back to the hover phase of the current pick (the object slipped or was never grasped)."""
        hover = max(i for i in range(self._index + 1) if self.phases[i].name == "hover")
        self._go_to(hover)
        self._yaw_target = None
        self._tilt_target = None

    def _distance(self, phase: Phase, error: np.ndarray) -> float:
        """How far the hand is from the phase's waypoint (relabel mode: horizontally, once below it)."""
        if self.relabel and phase.from_above and error[2] > 0:
            return float(np.linalg.norm(error[:2]))
        return float(np.linalg.norm(error))

    def _catch_up(self) -> None:
        """Skip to the next phase that holds an object when that object is in the hand already."""
        ahead = next((i for i in range(self._index, len(self.phases)) if self.phases[i].holding), None)
        if ahead is not None and ahead > self._index and self.sim.is_grasped(self.phases[ahead].holding):
            self._go_to(ahead)

    def _skip_placed(self) -> None:
        """Skip past the next place phase when the learner already put its object there (e.g. let it drop)."""
        ahead = next((i for i in range(self._index, len(self.phases)) if self.phases[i].places), None)
        if ahead is None:
            return
        place = self.phases[ahead]
        if any(p.holding not in (None, place.holding) for p in self.phases[self._index:ahead]):
            return  # another object's pick comes first
        if not self.sim.is_grasped(place.holding) \
                and np.linalg.norm(place.target(self.sim) - self.sim.ee_pos()) < PLACED:
            self._go_to(ahead + 1)

    def _fall_back(self) -> None:
        """Return to the waypoint above when the hand has drifted sideways from it while descending below it."""
        previous = self.phases[self._index - 1] if 0 < self._index < len(self.phases) else None
        if previous is None or not previous.from_above:
            return
        sideways = previous.target(self.sim)[:2] - self.sim.ee_pos()[:2]
        if float(np.linalg.norm(sideways)) > 2.0 * previous.tolerance:
            self._go_to(self._index - 1)

    def _rotation_error(self, phase: Phase) -> np.ndarray:
        """World-frame axis-angle from the current grip orientation to 'down, yaw-aligned with the object'
        (turned by the phase's tilt, kept until a later phase sets another, when the plan gives one)."""
        current = quat_to_matrix(self.sim.ee_quat())
        if phase.yaw is not None:
            self._yaw_target = phase.yaw(self.sim)
        elif phase.yaw_object is not None:
            self._yaw_target = self._aligned_yaw(phase.yaw_object, current)
        if self._yaw_target is None:
            self._yaw_target = float(matrix_to_yaw(current))
        desired = rot_z(self._yaw_target) @ DOWN
        if phase.tilt is not None:
            self._tilt_target = np.asarray(phase.tilt(self.sim), dtype=np.float64)
        if self._tilt_target is not None:
            desired = axis_angle_to_matrix(self._tilt_target) @ desired
        return matrix_to_axis_angle(desired @ current.T)

    def _aligned_yaw(self, obj: str, current: np.ndarray) -> float:
        """A yaw that puts the fingers across two faces of ``obj`` and away from its nearby neighbours.

        Cubes are symmetric under 90°, so there are two finger lines; take the one most perpendicular to the
        objects within 12 cm (fingers open 8 cm wide and would hit them), then the smaller rotation.
        """
        obj_yaw = float(quat_to_yaw(self.sim.object_quat(obj)))
        grip_yaw = float(matrix_to_yaw(current))
        candidates = obj_yaw + np.arange(-4, 5) * (np.pi / 2)
        rotation = np.abs(np.angle(np.exp(1j * (candidates - grip_yaw))))
        clutter = np.array([self._finger_clutter(obj, yaw) for yaw in candidates])
        best = np.lexsort((rotation, np.round(clutter, 3)))[0]
        return float(grip_yaw + np.angle(np.exp(1j * (candidates[best] - grip_yaw))))

    def _finger_clutter(self, obj: str, yaw: float) -> float:
        centre = self.sim.object_pos(obj)[:2]
        fingers = np.array([np.cos(yaw), np.sin(yaw)])
        score = 0.0
        for other in self.sim.task.objects:
            offset = self.sim.object_pos(other)[:2] - centre
            distance = float(np.linalg.norm(offset))
            if other != obj and distance < 0.12:
                score += abs(float(fingers @ offset)) / distance
        return score


# ------------------------------------------------------------------------------------------ phase builders
def _above(obj: str, height: float) -> Callable[["SimEnv"], np.ndarray]:
    return lambda sim: sim.object_pos(obj) + np.array([0.0, 0.0, height])


def _at(obj: str, dz: float = 0.0) -> Callable[["SimEnv"], np.ndarray]:
    return lambda sim: sim.object_pos(obj) + np.array([0.0, 0.0, dz])


def _raised(height: float) -> Callable[["SimEnv"], np.ndarray]:
    """Straight up to ``height`` above the table, staying where the grip site is."""
    return lambda sim: np.array([*sim.ee_pos()[:2], sim.table_height() + height])


def _carry(held: str, goal: Callable[["SimEnv"], np.ndarray]) -> Callable[["SimEnv"], np.ndarray]:
    """Move the grip site so that the *held object* (not the hand) ends at ``goal``."""
    return lambda sim: sim.ee_pos() + (goal(sim) - sim.object_pos(held))


def pick(obj: str, grasp_dz: float = 0.0, lift: float = 0.12, yaw: bool = True) -> list[Phase]:
    yaw_obj = obj if yaw else None
    return [
        Phase("hover", _above(obj, 0.10), OPEN, tolerance=0.015, yaw_object=yaw_obj, from_above=True),
        Phase("descend", _at(obj, grasp_dz), OPEN, tolerance=0.01, yaw_object=yaw_obj, max_steps=60),
        Phase("close", _at(obj, grasp_dz), CLOSED, tolerance=1.0, hold_steps=8),
        Phase("lift", _raised(lift), CLOSED, tolerance=0.02, holding=obj),
    ]


@dataclass(frozen=True)
class Placement:
    """How a held object is lowered onto its base."""

    #: how close (m) above the base the carried object must come before lowering starts
    carry_tolerance: float
    #: lower through :func:`_funnel` (centring on the way down) instead of straight onto the base
    funnel: bool


#: expert variants by name; ``scripted`` made every shipped demonstration file
EXPERT_VARIANTS: dict[str, Placement] = {
    "scripted": Placement(carry_tolerance=0.008, funnel=False),
    "scripted-funnel": Placement(carry_tolerance=0.02, funnel=True),
}


def _funnel(goal: Callable[["SimEnv"], np.ndarray], moving: Callable[["SimEnv"], np.ndarray],
            top: float) -> Callable[["SimEnv"], np.ndarray]:
    """Where ``moving`` goes on its way down to ``goal``: centred over it, and down only as far as its sideways
    error allows (``FUNNEL_SLOPE``, at most ``top`` above the goal), never back up.

    Descending and centring happen together, so the vertical command is a smooth function of the state. The
    "centre within a few mm, then lower" rule instead labels two nearly identical hover states (7 vs 9 mm off,
    the same pixel at 64 px) with opposite vertical motions.
    """
    def target(sim: "SimEnv") -> np.ndarray:
        end, now = goal(sim), moving(sim)
        sideways = float(np.linalg.norm(now[:2] - end[:2]))
        height = min(FUNNEL_SLOPE * sideways, top, max(float(now[2] - end[2]), 0.0))
        return end + np.array([0.0, 0.0, height])
    return target


def place_on(held: str, base: str, rest_height: float, placement: Placement, clearance: float = 0.04) -> list[Phase]:
    """Carry ``held`` above ``base``, lower until its centre is ``rest_height`` above ``base``'s, release."""
    above = lambda sim: sim.object_pos(base) + np.array([0.0, 0.0, rest_height + clearance])  # noqa: E731
    onto = lambda sim: sim.object_pos(base) + np.array([0.0, 0.0, rest_height + 0.005])  # noqa: E731
    lower = _funnel(onto, lambda sim: sim.object_pos(held), clearance) if placement.funnel else onto
    return [
        Phase("carry", _carry(held, above), CLOSED, tolerance=placement.carry_tolerance, max_steps=100,
              holding=held, from_above=True),
        Phase("lower", _carry(held, lower), CLOSED, tolerance=0.006, max_steps=50, holding=held, places=True),
        Phase("release", lambda sim: sim.ee_pos(), OPEN, tolerance=1.0, hold_steps=6),
        Phase("retreat", _raised(0.17), OPEN, tolerance=0.02, max_steps=40),
    ]


def _can_phases(sim: "SimEnv") -> list[Phase]:
    high_over_bin = lambda s: s.bin_target() + np.array([0.0, 0.0, 0.22])  # noqa: E731  clears the walls
    in_bin = lambda s: s.bin_target() + np.array([0.0, 0.0, 0.1])  # noqa: E731
    return pick("Can", grasp_dz=0.0, lift=0.25, yaw=False) + [
        Phase("carry", _carry("Can", high_over_bin), CLOSED, tolerance=0.035, max_steps=120, holding="Can"),
        Phase("lower", _carry("Can", in_bin), CLOSED, tolerance=0.03, max_steps=40, holding="Can"),
        Phase("release", lambda s: s.ee_pos(), OPEN, tolerance=1.0, hold_steps=10),
        Phase("retreat", lambda s: s.ee_pos() + np.array([0.0, 0.0, 0.05]), OPEN, tolerance=1.0,
              hold_steps=200),
    ]


def _hold(sim: "SimEnv") -> list[Phase]:
    return [Phase("hold", lambda s: s.ee_pos(), OPEN, tolerance=1.0, hold_steps=10_000)]


EXPERT_PHASES: dict[str, Callable[["SimEnv", Placement], list[Phase]]] = {
    "Lift": lambda sim, placement: pick("cube", lift=0.15) + [
        Phase("hold", _raised(0.15), CLOSED, tolerance=1.0, hold_steps=10_000)],
    "Stack": lambda sim, placement: pick("cubeA") + place_on("cubeA", "cubeB", 0.045, placement) + _hold(sim),
    "PickPlaceCan": lambda sim, placement: _can_phases(sim),
    "StackThree": lambda sim, placement: pick("cubeA") + place_on("cubeA", "cubeB", 0.045, placement)
    + pick("cubeC", lift=0.16) + place_on("cubeC", "cubeA", 0.04, placement) + _hold(sim),
}


def make_expert(sim: "SimEnv", relabel: bool = False, variant: str = "scripted") -> ScriptedExpert:
    """The scripted expert for the task ``sim`` was built for (``relabel``: labelling another policy's states)."""
    name = sim.task.name
    if getattr(sim.task, "backend", "robosuite") == "libero":
        from demos.experts.libero import LIBERO_GAIN, libero_phases

        return ScriptedExpert(sim, libero_phases(sim), gain=LIBERO_GAIN, relabel=relabel)
    if name not in EXPERT_PHASES:
        raise R2AInputError(f"no scripted expert for task '{name}'; experts exist for: {', '.join(EXPERT_PHASES)}")
    return ScriptedExpert(sim, EXPERT_PHASES[name](sim, expert_variant(variant)), relabel=relabel)


def expert_variant(name: str) -> Placement:
    """The named expert variant; an unknown name lists the valid ones."""
    if name not in EXPERT_VARIANTS:
        raise R2AInputError(f"unknown expert '{name}'; valid: {', '.join(EXPERT_VARIANTS)}")
    return EXPERT_VARIANTS[name]
