"""Background shift: recolour and re-texture the table, the floor and the walls.

Per episode, ``surfaces`` of the three surface groups are changed. Each gets a colour (random hue, saturation
and value from the level's ranges; MuJoCo multiplies it with the surface's texture) and, with probability
``swap_prob``, another texture: its geoms take another of the arena's existing materials (swapping a geom's
material needs no render-context rebuild; changing a material's texture would). Task objects and the robot keep
their look. In PickPlaceCan the "table" is the two bins and their legs. Only visual geoms are edited.

LIBERO's scenes (:func:`sim.shifts.base.scene_of`): libero_spatial's main table (its top and legs), floor and
walls, with LIBERO's arena materials (its table, legs, floor, wall and robosuite table textures); libero_object's
scenes have no table, so only the floor and the walls change (a level asking for more surfaces recolours both),
and the floor may take the walls', the living-room, the table or the legs' texture. The fixtures (cabinet,
stove) are scene objects, not background, and keep their look.
"""

from __future__ import annotations

import colorsys
from typing import TYPE_CHECKING, Any

import numpy as np

from r2a_core.errors import R2AInputError
from sim.shifts.base import (
    BINS,
    INT,
    LIBERO_FLOOR,
    LIBERO_TABLE,
    PROB,
    RANGE,
    TABLE,
    ArraySnapshot,
    ShiftFactor,
    Undo,
    band,
    raw_model,
    scene_of,
    uniform,
)

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

SURFACES = ("table", "floor", "walls")
#: the surfaces each scene kind has (LIBERO's floor scenes have no table)
SCENE_SURFACES = {TABLE: SURFACES, BINS: SURFACES, LIBERO_TABLE: SURFACES, LIBERO_FLOOR: ("floor", "walls")}
#: textured materials of each scene's arena that a surface may take (objects' and robot's materials excluded)
ARENA_MATERIALS = {
    TABLE: ("table_ceramic", "table_mat", "table_legs_metal", "floorplane", "walls_mat"),
    BINS: ("light-wood", "dark-wood", "table_legs_metal", "floorplane", "walls_mat"),
    LIBERO_TABLE: ("table_texture", "table_legs", "table_mat", "floorplane", "walls_mat"),
    LIBERO_FLOOR: ("floorplane", "walls_mat", "living_room", "table_texture", "table_legs"),
}
#: each surface's own material per scene (a swap picks another one)
NATIVE_MATERIAL = {
    TABLE: {"table": "table_ceramic", "floor": "floorplane", "walls": "walls_mat"},
    BINS: {"table": "light-wood", "floor": "floorplane", "walls": "walls_mat"},
    LIBERO_TABLE: {"table": "table_texture", "floor": "floorplane", "walls": "walls_mat"},
    LIBERO_FLOOR: {"floor": "floorplane", "walls": "walls_mat"},
}


class BackgroundShift(ShiftFactor):
    name = "background"
    index = 4
    modifies_state = False
    summary = "table / floor / wall colour and texture swaps"
    level_schema = {"surfaces": INT, "saturation": RANGE, "value": RANGE, "swap_prob": PROB}

    def _sample(self, spec: dict[str, Any], rng: np.random.Generator, task: str) -> dict[str, Any]:
        count = spec["surfaces"]
        if not 1 <= count <= len(SURFACES):
            raise R2AInputError(f"background.surfaces must be 1..{len(SURFACES)}, got {count}")
        arena = scene_of(task)
        surfaces = SCENE_SURFACES[arena]
        count = min(count, len(surfaces))
        chosen = sorted(rng.choice(len(surfaces), size=count, replace=False).tolist())
        changes = {}
        for i in chosen:
            materials = [m for m in ARENA_MATERIALS[arena] if m != NATIVE_MATERIAL[arena][surfaces[i]]]
            rgb = colorsys.hsv_to_rgb(rng.uniform(0.0, 1.0), uniform(rng, spec["saturation"]),
                                      uniform(rng, spec["value"]))
            swap = bool(rng.random() < spec["swap_prob"])
            material = materials[int(rng.integers(len(materials)))] if swap else None
            changes[surfaces[i]] = {"rgb": [float(c) for c in rgb], "material": material}
        return {"surfaces": changes}

    knobs = ("background",)

    def _params_at(self, knobs: dict[str, float]) -> dict[str, Any]:
        """Severity 1: every surface recoloured at full saturation, value down to 0.3, textures always swapped."""
        s = knobs.get("background", 0.0)
        return {"surfaces": int(np.clip(np.ceil(len(SURFACES) * s - 1e-9), 1, len(SURFACES))),
                "saturation": band(s, 1.0), "value": [1.0 - 0.7 * s, 1.0], "swap_prob": s}

    def describe(self, params: dict[str, Any]) -> str:
        return " ".join(s + ("*" if c["material"] else "") for s, c in params["surfaces"].items())

    def apply(self, sim: "SimEnv", params: dict[str, Any]) -> Undo:
        import mujoco

        model = raw_model(sim)
        snapshot = ArraySnapshot()
        snapshot.save(model.geom_rgba)
        snapshot.save(model.geom_matid)
        groups = surface_geoms(sim)
        for surface, change in params["surfaces"].items():
            geoms = groups[surface]
            if change["material"] is not None:
                mat = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MATERIAL, change["material"])
                if mat < 0:
                    raise R2AInputError(f"background: material '{change['material']}' does not exist in task "
                                        f"'{sim.task.name}'s scene")
                model.geom_matid[geoms] = mat
            # a geom rgba other than MuJoCo's default (0.5, 0.5, 0.5, 1) overrides the material colour and
            # multiplies its texture
            model.geom_rgba[geoms] = [*change["rgb"], 1.0]
        sim.sim.forward()
        return snapshot.undo_for(sim)


def surface_geoms(sim: "SimEnv") -> dict[str, list[int]]:
    """Visual geoms of each surface group of the scene: table (or bins) with legs, floor, walls."""
    model = raw_model(sim)
    names = sim.sim.model
    groups: dict[str, list[int]] = {s: [] for s in SCENE_SURFACES[scene_of(sim.task.name)]}
    for g in range(model.ngeom):
        name = names.geom_id2name(g) or ""
        body = names.body_id2name(int(model.geom_bodyid[g])) or ""
        visual = model.geom_contype[g] == 0 and model.geom_conaffinity[g] == 0
        if name == "floor":
            groups["floor"].append(g)
        elif name.startswith("wall_"):
            groups["walls"].append(g)
        elif visual and (body == "table" or body in ("bin1", "bin2")) and "table" in groups:
            groups["table"].append(g)
    empty = [s for s, geoms in groups.items() if not geoms]
    if empty:
        raise R2AInputError(f"background: no geoms found for {', '.join(empty)} in task '{sim.task.name}'")
    return groups
