"""Robot-initialization shift: start the arm from a different joint configuration.

The offset has a fixed L2 norm (``norm_rad``, LIBERO-Plus tiers 0.1–0.5 rad) in a random unit direction of the
7-D arm joint space. It is written into ``qpos`` after reset (velocities zeroed) and the controller is re-anchored
there (:meth:`SimEnv.sync_controller`), so the start pose really changes and the OSC does not pull the arm back
(LIBERO-Plus only biased the controller's posture reference; docs/architecture.md, "The shift benchmark").

``sample`` draws several candidate directions; ``apply`` takes the first one whose offset keeps every joint
inside its limits (with a margin) and the grip site at least ``MIN_CLEARANCE`` above the table without touching
anything. If none qualifies, it takes the candidate with the most clearance, scaled down until it fits.
The robot's state is rebuilt by the next reset; the model is not edited, so ``undo`` has nothing to restore.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from sim.shifts.base import NUMBER, ShiftFactor, Undo, raw_data, raw_model

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

N_CANDIDATES = 8
LIMIT_MARGIN = 0.05  # rad kept from every joint limit
MIN_CLEARANCE = 0.08  # m between the grip site and the table top


class RobotInitShift(ShiftFactor):
    name = "robot_init"
    index = 1
    modifies_state = True
    summary = "arm start pose: joint offset of fixed L2 norm in a random direction; controller re-anchored"
    level_schema = {"norm_rad": NUMBER}

    def _sample(self, spec: dict[str, Any], rng: np.random.Generator, task: str) -> dict[str, Any]:
        directions = rng.normal(size=(N_CANDIDATES, 7))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
        return {"norm_rad": spec["norm_rad"], "directions": directions.round(8).tolist()}

    #: severity 1: LIBERO-Plus's largest start-pose perturbation
    OUTER_NORM_RAD = 0.5
    knobs = ("robot_init",)

    def _params_at(self, knobs: dict[str, float]) -> dict[str, Any]:
        return {"norm_rad": self.OUTER_NORM_RAD * knobs.get("robot_init", 0.0)}

    def describe(self, params: dict[str, Any]) -> str:
        return f"|dq| {params['norm_rad']:.2f} rad"

    def apply(self, sim: "SimEnv", params: dict[str, Any]) -> Undo:
        model, data = raw_model(sim), raw_data(sim)
        qpos_idx, qvel_idx = sim.arm_joint_indexes()
        joint_ids = [sim.sim.model.joint_name2id(n) for n in sim.robot.robot_model.joints]
        low = model.jnt_range[joint_ids, 0] + LIMIT_MARGIN
        high = model.jnt_range[joint_ids, 1] - LIMIT_MARGIN
        q0 = np.array(data.qpos[qpos_idx])
        clean_contacts = _robot_contacts(sim)

        def clearance(q: np.ndarray) -> float:
            """Set the arm to ``q`` (zero velocity); the smallest margin to a limit (negative: infeasible)."""
            data.qpos[qpos_idx] = q
            data.qvel[qvel_idx] = 0.0
            sim.sim.forward()
            if _robot_contacts(sim) - clean_contacts:
                return -1.0
            to_limits = float(np.min(np.minimum(q - low, high - q)))
            return min(to_limits, float(sim.ee_pos()[2] - sim.table_height() - MIN_CLEARANCE))

        norm = float(params["norm_rad"])
        directions = [np.asarray(d, dtype=np.float64) / np.linalg.norm(d) for d in params["directions"]]
        scores = [clearance(q0 + norm * d) for d in directions]
        feasible = [i for i, score in enumerate(scores) if score >= 0]
        direction = directions[feasible[0] if feasible else int(np.argmax(scores))]
        scale = 1.0
        while not feasible and scale > 0.05 and clearance(q0 + scale * norm * direction) < 0:
            scale *= 0.8  # no candidate fits: shrink the best one until it does
        clearance(q0 + scale * norm * direction)
        sim.sync_controller()
        return lambda: None


def _robot_contacts(sim: "SimEnv") -> set[tuple[int, int]]:
    """Geom pairs in contact where one side belongs to the robot or its gripper."""
    model, data = raw_model(sim), raw_data(sim)
    robot_bodies = {b for b in range(model.nbody)
                    if sim.sim.model.body_id2name(b).startswith(("robot0_", "gripper0_"))}
    pairs = set()
    for contact in data.contact[: data.ncon]:
        g1, g2 = int(contact.geom1), int(contact.geom2)
        if model.geom_bodyid[g1] in robot_bodies or model.geom_bodyid[g2] in robot_bodies:
            pairs.add((min(g1, g2), max(g1, g2)))
    return pairs
