"""Layout shift: task objects placed beyond the clean placement range, plus visual distractors.

**Placement.** The clean episode places object centres uniformly in a box around the table centre (±12 cm for
the cube tasks; the can anywhere in its bin). At level L every task object is re-placed after reset, through its
free joint, in the ring *outside* the clean box and inside the box widened by ``extra_m`` (≈ 3 cm × L,
LIBERO-Plus's region shifts), never overlapping another object; height and orientation are kept from the reset.
The widened box is clipped to where objects stay on the table and graspable (in PickPlaceCan the bin walls
allow only ~3–4 cm more than the clean range, so L2 and L3 place the can alike and differ by distractors).

**Distractors.** robosuite cannot add bodies at run time and adding bodies at construction would change the
state vector of every episode. Every robosuite arena carries two visual-only mocap bodies (the GUI's end-effector
targets, a box and a sphere each, parked 1 m under the floor). Their four geoms (contype = conaffinity = 0) are
re-shaped (box, cylinder or sphere), coloured and set onto the table near the objects: they look like objects
but do not collide, so the gripper passes through them and a privileged expert is not affected. With
``lookalike_prob`` one distractor takes the target object's colour. This is a *visual* distractor test, honestly
weaker than LIBERO-Plus's physical distractor objects.

**LIBERO's scenes** (:func:`sim.shifts.base.scene_of`) follow the same two rules with LIBERO's own ranges: every
object leaves its LIBERO init box for the ring widened by ``extra_m``, and the distractors are visual clones of the
scene's own objects; :mod:`sim.shifts.layout_libero` says how.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from r2a_core.errors import R2AInputError
from sim.shifts import layout_libero
from sim.shifts.base import (
    INT,
    NUMBER,
    PROB,
    RANGE,
    ArraySnapshot,
    ShiftFactor,
    Undo,
    is_libero_scene,
    raw_data,
    raw_model,
    scene_of,
    uniform,
)

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

#: the arena's visual-only geoms that become distractors, in order of use
DISTRACTOR_GEOMS = ("right_eef_target_box", "left_eef_target_sphere", "left_eef_target_box",
                    "right_eef_target_sphere")
SHAPES = ("box", "cylinder", "sphere")
PALETTE = {"yellow": (0.95, 0.85, 0.1), "orange": (1.0, 0.5, 0.05), "purple": (0.5, 0.2, 0.7),
           "cyan": (0.1, 0.8, 0.85), "white": (0.95, 0.95, 0.95), "black": (0.08, 0.08, 0.08),
           "pink": (1.0, 0.45, 0.7), "brown": (0.45, 0.28, 0.12)}
LOOKALIKE_RGB = (0.75, 0.08, 0.08)  # every built-in task's target (red cube, red can) is red
OBJECT_GAP = 0.01  # m between task objects' footprints (robosuite's sampler uses 0)
DISTRACTOR_GAP = 0.03  # m between a distractor and anything else


@dataclass(frozen=True)
class PlacementRegion:
    """Where a task's objects go (world xy): centre, clean half-range of object centres, and a hard bound."""

    centre: tuple[float, float]
    clean_half: tuple[float, float]
    bound_half: tuple[float, float]
    #: horizontal footprint radius of each task object (robosuite's ``horizontal_radius``)
    radii: dict[str, float]


_TABLE = dict(centre=(0.0, 0.0), clean_half=(0.12, 0.12), bound_half=(0.30, 0.30))
#: measured on robosuite 1.5.2 (a test checks them against the simulator)
REGIONS: dict[str, PlacementRegion] = {
    "Lift": PlacementRegion(**_TABLE, radii={"cube": 0.0296}),
    "Stack": PlacementRegion(**_TABLE, radii={"cubeA": 0.0283, "cubeB": 0.0354}),
    "StackThree": PlacementRegion(**_TABLE, radii={"cubeA": 0.0283, "cubeB": 0.0354, "cubeC": 0.0283}),
    # bin1 at (0.1, -0.25); robosuite samples the can within ±(0.145, 0.195) minus its radius; inner walls at
    # ±(0.19, 0.24); the fingers close along y and need ~5 cm beside the can
    "PickPlaceCan": PlacementRegion(centre=(0.1, -0.25), clean_half=(0.12, 0.17), bound_half=(0.155, 0.18),
                                    radii={"Can": 0.025}),
}


class LayoutShift(ShiftFactor):
    name = "layout"
    index = 6
    modifies_state = True
    summary = "objects placed beyond the clean range (+extra_m), visual distractors on the table"
    level_schema = {"extra_m": NUMBER, "distractors": INT, "distractor_size_m": RANGE, "lookalike_prob": PROB}

    def _sample(self, spec: dict[str, Any], rng: np.random.Generator, task: str) -> dict[str, Any]:
        libero = is_libero_scene(scene_of(task))
        if task not in REGIONS and not libero:
            raise R2AInputError(f"layout: no placement region for task '{task}'; known: {', '.join(REGIONS)} "
                                "and the LIBERO tasks")
        if spec["distractors"] > len(DISTRACTOR_GEOMS):
            raise R2AInputError(f"layout.distractors: at most {len(DISTRACTOR_GEOMS)}, got {spec['distractors']}")
        if libero:
            return layout_libero.sample(spec, rng, task)
        region = REGIONS[task]
        centre, clean = np.array(region.centre), np.array(region.clean_half)
        outer = np.minimum(clean + spec["extra_m"], region.bound_half)
        placed: list[tuple[np.ndarray, float]] = []
        positions = {}
        for name, radius in region.radii.items():
            xy = _draw(rng, centre, outer, lambda p, r=radius: not _inside(p - centre, clean)
                       and _clear(p, r, placed, OBJECT_GAP))
            placed.append((xy, radius))
            positions[name] = xy.tolist()
        distractors = []
        palette = list(PALETTE)
        lookalike = int(rng.integers(spec["distractors"])) if (
            spec["distractors"] and rng.random() < spec["lookalike_prob"]) else -1
        for i in range(spec["distractors"]):
            half = uniform(rng, spec["distractor_size_m"])
            shape = SHAPES[int(rng.integers(len(SHAPES)))]
            colour = palette.pop(int(rng.integers(len(palette))))
            rgb = LOOKALIKE_RGB if i == lookalike else PALETTE[colour]
            radius = half * np.sqrt(2.0) if shape == "box" else half
            xy = _draw(rng, centre, outer, lambda p, r=radius: _clear(p, r, placed, DISTRACTOR_GAP))
            placed.append((xy, radius))
            distractors.append({"shape": shape, "half_size": half, "rgb": list(rgb),
                                "colour": "lookalike" if i == lookalike else colour, "xy": xy.tolist(),
                                "yaw_deg": uniform(rng, [0.0, 90.0])})
        return {"extra_m": spec["extra_m"], "positions": positions, "distractors": distractors}

    #: severity 1: objects up to 10 cm beyond the clean range, four distractors, half of them episodes a look-alike
    OUTER = {"extra_m": 0.10, "distractors": 4, "lookalike_prob": 0.5}
    knobs = ("layout",)

    def _params_at(self, knobs: dict[str, float]) -> dict[str, Any]:
        s = knobs.get("layout", 0.0)
        return {"extra_m": self.OUTER["extra_m"] * s, "distractors": int(round(self.OUTER["distractors"] * s)),
                "distractor_size_m": [0.02, 0.03], "lookalike_prob": self.OUTER["lookalike_prob"] * s}

    def describe(self, params: dict[str, Any]) -> str:
        lookalike = any(d.get("lookalike") or d.get("colour") == "lookalike" for d in params["distractors"])
        return (f"+{100 * params['extra_m']:.1f}cm, {len(params['distractors'])} distractors"
                + (" (1 look-alike)" if lookalike else ""))

    def apply(self, sim: "SimEnv", params: dict[str, Any]) -> Undo:
        import mujoco

        if is_libero_scene(scene_of(sim.task.name)):
            return layout_libero.apply(sim, params, DISTRACTOR_GEOMS)

        model, data = raw_model(sim), raw_data(sim)
        for name, xy in params["positions"].items():
            joint = sim.object_model(name).joints[0]
            qpos = np.array(sim.sim.data.get_joint_qpos(joint))
            qpos[:2] = xy
            sim.sim.data.set_joint_qpos(joint, qpos)
            sim.sim.data.set_joint_qvel(joint, np.zeros(6))
        sim.sim.forward()

        snapshot = ArraySnapshot()
        for array in (model.geom_pos, model.geom_quat, model.geom_size, model.geom_rgba, model.geom_type,
                      model.geom_sameframe, model.geom_rbound):
            snapshot.save(array)
        for spec, geom_name in zip(params["distractors"], DISTRACTOR_GEOMS):
            g = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, geom_name)
            if g < 0:
                raise R2AInputError(f"layout: the arena has no geom '{geom_name}' to use as a distractor")
            half = spec["half_size"]
            shape = {"box": (mujoco.mjtGeom.mjGEOM_BOX, [half, half, half]),
                     "cylinder": (mujoco.mjtGeom.mjGEOM_CYLINDER, [half, half, 0.0]),
                     "sphere": (mujoco.mjtGeom.mjGEOM_SPHERE, [half, 0.0, 0.0])}[spec["shape"]]
            world = np.array([*spec["xy"], _surface_height(sim, spec["xy"]) + half])
            body = int(model.geom_bodyid[g])
            model.geom_type[g] = shape[0]
            model.geom_size[g] = shape[1]
            model.geom_rgba[g] = [*spec["rgb"], 1.0]
            model.geom_sameframe[g] = 0  # else MuJoCo copies the body pose and ignores geom_pos/quat
            model.geom_pos[g] = data.xmat[body].reshape(3, 3).T @ (world - data.xpos[body])
            yaw = np.deg2rad(spec["yaw_deg"])
            model.geom_quat[g] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
            model.geom_rbound[g] = float(np.linalg.norm(model.geom_size[g]))
        sim.sim.forward()
        sim.mark_initial_state()
        return snapshot.undo_for(sim)


def _inside(offset: np.ndarray, half: np.ndarray) -> bool:
    return bool(np.all(np.abs(offset) <= half))


def _clear(xy: np.ndarray, radius: float, placed: list[tuple[np.ndarray, float]], gap: float) -> bool:
    return all(np.linalg.norm(xy - other) >= radius + r + gap for other, r in placed)


def _draw(rng: np.random.Generator, centre: np.ndarray, half: np.ndarray, accept, tries: int = 2000) -> np.ndarray:
    """A uniform point of the box ``centre ± half`` that ``accept`` accepts (rejection sampling)."""
    for _ in range(tries):
        xy = centre + rng.uniform(-half, half)
        if accept(xy):
            return xy
    raise R2AInputError("layout: could not place the objects without overlap; widen extra_m or use fewer "
                        "distractors")


def _surface_height(sim: "SimEnv", xy: list[float]) -> float:
    """Height of the support surface (table top or bin floor) under ``xy``: a ray down onto collision geoms."""
    import mujoco

    start = np.array([xy[0], xy[1], sim.table_height() + 0.15])
    geom_id = np.array([-1], dtype=np.int32)
    groups = np.array([1, 0, 0, 0, 0, 0], dtype=np.uint8)  # robosuite keeps collision geoms in group 0
    distance = mujoco.mj_ray(raw_model(sim), raw_data(sim), start, np.array([0.0, 0.0, -1.0]), groups, 1, -1,
                             geom_id)
    return float(start[2] - distance) if distance >= 0 else sim.table_height()
