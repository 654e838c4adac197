"""The layout shift on LIBERO's scenes: objects moved beyond their LIBERO init regions, visual clones as distractors.

**Placement.** LIBERO samples each object's centre in a small box of its BDDL region (±1 cm on libero_spatial's
table; ±2.5 cm for libero_object's groceries, ±1 cm for its basket), as the scene's placement samplers hold it. At
level L every object that stands on the table or the floor is moved after reset (LIBERO's settling steps have run),
through its free joint, to a point of the ring *outside* its own init box and inside that box widened by
``extra_m`` — the built-in scenes' definition (:mod:`sim.shifts.layout`) with LIBERO's boxes. Objects stacked on a
moved one (the bowl on the cookie box or on the ramekin) move with it; objects on a fixture (in the cabinet's
drawer, on its top, on the stove) stay, like the fixtures, which have no free joint. A candidate is taken only if
the moved objects' footprints stay on the table (libero_spatial; the floor is unbounded) and their collision geoms
stay :data:`GAP` from every other object, fixture and the robot — or, for a pair closer than that before the move,
no closer than it was. Height and orientation are kept, so every object still rests on what it stood on. Up to
:data:`N_TRIES` candidates per object come from the episode's ``placement_seed``; an object none fits stays put.

**Distractors.** No body can be added to a built LIBERO scene (its init states are flattened states of exactly these
bodies), and the meshes of LIBERO's other objects are not in the compiled model. As in the built-in scenes, the four
visual-only geoms of the arena's mocap targets become the distractors — here *visual clones* of the scene's own
objects: a task object's mesh, material and texture, set on the table or floor at a free spot with a random yaw.
With ``lookalike_prob`` one clone copies the target (a third black bowl; a second alphabet soup), the others copy the
goal and the distractor objects. They collide with nothing: the gripper passes through them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.rotations import matrix_to_quat, rotation_about
from sim.shifts.base import ArraySnapshot, Undo, raw_data, raw_model, uniform

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.libero_env import LiberoSimEnv

log = logging.getLogger(__name__)

N_TRIES = 64  # candidate positions per object (and per distractor)
GAP = 0.01  # m kept between a moved object's collision geoms and anything else
EDGE_MARGIN = 0.03  # m kept between an object's footprint and the table edge
DISTRACTOR_GAP = 0.02  # m between a clone's footprint and any object's
DISTRACTOR_SPREAD = 0.02  # m the clones' area reaches beyond the objects' (moved) positions
_UNIT_CORNERS = np.array([[x, y, z] for x in (-1.0, 1.0) for y in (-1.0, 1.0) for z in (-1.0, 1.0)])
_CLONED_ARRAYS = ("geom_pos", "geom_quat", "geom_size", "geom_rgba", "geom_type", "geom_sameframe", "geom_rbound",
                  "geom_aabb", "geom_dataid", "geom_matid")


def sample(spec: dict[str, Any], rng: np.random.Generator, task: str) -> dict[str, Any]:
    """Pure: a seed for the placement (resolved against the scene by :func:`apply`) and the distractors' sources."""
    from sim.envs.libero_tasks import LIBERO_TASKS

    libero = LIBERO_TASKS[task]
    placement_seed = int(rng.integers(2**31))
    count = spec["distractors"]
    lookalike = int(rng.integers(count)) if (count and rng.random() < spec["lookalike_prob"]) else -1
    pool = [libero.goal, *libero.distractors]
    distractors = []
    for i in range(count):
        source = libero.target if i == lookalike else pool.pop(int(rng.integers(len(pool))))
        distractors.append({"source": source, "lookalike": i == lookalike, "yaw_deg": uniform(rng, [-180.0, 180.0])})
    return {"extra_m": spec["extra_m"], "placement_seed": placement_seed, "distractors": distractors}


def apply(sim: "LiberoSimEnv", params: dict[str, Any], distractor_geoms: Sequence[str]) -> Undo:
    """Move the objects (state; the next reset undoes it) and dress the spare geoms as clones (model; ``undo``)."""
    scene = LiberoLayoutScene(sim)
    seed = int(params["placement_seed"])
    for i, root in enumerate(scene.roots):
        scene.move_beyond_init_region(root, float(params["extra_m"]), np.random.default_rng([seed, i]))
    sim.sim.forward()

    model = raw_model(sim)
    snapshot = ArraySnapshot()
    for name in _CLONED_ARRAYS:
        snapshot.save(getattr(model, name))
    placed: list[tuple[np.ndarray, float]] = []
    for i, (spec, geom_name) in enumerate(zip(params["distractors"], distractor_geoms)):
        scene.place_clone(spec, geom_name, float(params["extra_m"]), placed, np.random.default_rng([seed, 1000 + i]))
    sim.sim.forward()
    sim.mark_initial_state()
    return snapshot.undo_for(sim)


class LiberoLayoutScene:
    """What the layout shift needs to know of one LIBERO scene: which objects stand free, on what, in which box."""

    def __init__(self, sim: "LiberoSimEnv") -> None:
        import mujoco

        self.sim, self.model, self.data = sim, raw_model(sim), raw_data(sim)
        env = sim.raw_env
        self.objects = [n for n in sim.task.objects if n in env.objects_dict]
        problem = env.parsed_problem
        regions = problem.get("regions", {})
        support: dict[str, str] = {}
        where_of: dict[str, str] = {}
        for predicate, obj, where, *_ in (p for p in problem["initial_state"] if len(p) >= 3):
            if predicate.lower() in ("on", "in") and obj in env.objects_dict:
                where_of[obj] = where
                support[obj] = where if where in env.objects_dict or where in env.fixtures_dict else \
                    regions.get(where, {}).get("target", where)
        #: objects on an object ride along with it; those on a fixture stay; the rest stand on the table or floor
        self.riders = {o: s for o, s in support.items() if s in env.objects_dict}
        self.on_fixture = [o for o, s in support.items() if s in env.fixtures_dict]
        self.boxes = {o: self._init_boxes(o, where_of.get(o), regions) for o in self.objects}
        self.roots = [o for o in self.objects if o not in self.riders and o not in self.on_fixture and self.boxes[o]]

        table = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, "table_collision")
        floor = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, "floor")
        rootid = self.model.body_rootid[self.model.geom_bodyid]
        surface_roots = {0} | {int(rootid[g]) for g in (table, floor) if g >= 0}
        if table >= 0:
            centre, half = self.data.geom_xpos[table], self.model.geom_size[table]
            self.surface_z = float(centre[2] + half[2])
            self.bounds: tuple[np.ndarray, np.ndarray] | None = (centre[:2] - half[:2] + EDGE_MARGIN,
                                                                 centre[:2] + half[:2] - EDGE_MARGIN)
        elif floor >= 0:
            self.surface_z, self.bounds = float(self.data.geom_xpos[floor][2]), None
        else:
            raise R2AInputError(f"layout: task '{sim.task.name}' has neither a table nor a floor geom")
        colliding = (self.model.geom_contype != 0) | (self.model.geom_conaffinity != 0)
        self.geoms = np.flatnonzero(colliding & ~np.isin(rootid, list(surface_roots)))
        self.geom_root = rootid

    # ------------------------------------------------------------------------------------------ placement
    def _init_boxes(self, obj: str, where: str | None, regions: dict) -> list[tuple[np.ndarray, np.ndarray]]:
        """The xy boxes LIBERO sampled ``obj``'s centre in: its placement sampler's ranges, else its BDDL region's."""
        sampler = getattr(self.sim.raw_env.placement_initializer, "samplers", {}).get(obj)
        if sampler is not None and getattr(sampler, "x_ranges", None):
            ref = np.asarray(getattr(sampler, "reference_pos", (0.0, 0.0, 0.0)), dtype=np.float64)[:2]
            return [(np.array([x[0], y[0]]) + ref, np.array([x[1], y[1]]) + ref)
                    for x, y in zip(sampler.x_ranges, sampler.y_ranges)]
        ranges = regions.get(where, {}).get("ranges") or []
        return [(np.array(r[:2], dtype=np.float64), np.array(r[2:4], dtype=np.float64)) for r in ranges]

    def group(self, root: str) -> list[str]:
        """``root`` and every object resting on it, directly or on another rider."""
        members = [root]
        for obj in self.objects:
            chain, seen = obj, set()
            while chain in self.riders and chain not in seen:
                seen.add(chain)
                chain = self.riders[chain]
            if obj != root and chain == root:
                members.append(obj)
        return members

    def move_beyond_init_region(self, root: str, extra: float, rng: np.random.Generator) -> bool:
        """Move ``root`` (with its riders) into the ring outside its init box(es) and inside them widened by
        ``extra``; True if a candidate fit (else everything stays where it was)."""
        members = self.group(root)
        roots = {int(self.model.body_rootid[self.sim.raw_env.obj_body_id[m]]) for m in members}
        joints = [self.sim.sim.model.joint_name2id(self.sim.object_model(m).joints[0]) for m in members]
        adr = [int(self.model.jnt_qposadr[j]) for j in joints]
        start = np.array([self.data.qpos[a: a + 2] for a in adr])
        before = self._distances(roots)
        boxes = self.boxes[root]
        lows = np.array([lo for lo, _ in boxes]) - extra
        highs = np.array([hi for _, hi in boxes]) + extra
        centre = self.sim.object_pos(root)[:2]
        for _ in range(N_TRIES):
            k = int(rng.integers(len(boxes)))
            xy = rng.uniform(lows[k], highs[k])
            if any(np.all(lo <= xy) and np.all(xy <= hi) for lo, hi in boxes):
                continue  # inside the clean range
            for a, xy0 in zip(adr, start):
                self.data.qpos[a: a + 2] = xy0 + (xy - centre)
            self._kinematics()
            if self._on_surface(members) and self._clear(roots, before):
                for j in joints:
                    dof = int(self.model.jnt_dofadr[j])
                    self.data.qvel[dof: dof + 6] = 0.0
                return True
        for a, xy0 in zip(adr, start):
            self.data.qpos[a: a + 2] = xy0
        self._kinematics()
        log.debug("layout: no free spot beyond the init region of '%s'; it stays", root)
        return False

    def _kinematics(self) -> None:
        import mujoco

        mujoco.mj_kinematics(self.model, self.data)

    def _on_surface(self, members: list[str]) -> bool:
        if self.bounds is None:
            return True
        for m in members:
            lo, hi = self.sim.object_bounds(m)
            if np.any(lo[:2] < self.bounds[0]) or np.any(hi[:2] > self.bounds[1]):
                return False
        return True

    def _world_aabbs(self, geoms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        aabb = self.model.geom_aabb[geoms]
        corners = aabb[:, None, :3] + _UNIT_CORNERS[None] * aabb[:, None, 3:]
        rot = self.data.geom_xmat[geoms].reshape(-1, 3, 3)
        world = self.data.geom_xpos[geoms][:, None, :] + np.einsum("gij,gkj->gki", rot, corners)
        return world.min(axis=1), world.max(axis=1)

    def _distances(self, roots: set[int]) -> dict[int, float]:
        """Smallest distance (capped at GAP) from the bodies under ``roots`` to every other entity within GAP."""
        import mujoco

        lo, hi = self._world_aabbs(self.geoms)
        mine = np.isin(self.geom_root[self.geoms], list(roots))
        out: dict[int, float] = {}
        for i in np.flatnonzero(mine):
            near = ~mine & np.all(lo <= hi[i] + GAP, axis=1) & np.all(hi >= lo[i] - GAP, axis=1)
            for j in np.flatnonzero(near):
                d = mujoco.mj_geomDistance(self.model, self.data, int(self.geoms[i]), int(self.geoms[j]), GAP, None)
                root = int(self.geom_root[self.geoms[j]])
                out[root] = min(out.get(root, GAP), float(d))
        return out

    def _clear(self, roots: set[int], before: dict[int, float]) -> bool:
        after = self._distances(roots)
        return all(d >= min(GAP, before.get(root, GAP)) - 1e-4 for root, d in after.items())

    # ---------------------------------------------------------------------------------------- distractors
    def place_clone(self, spec: dict[str, Any], geom_name: str, extra: float, placed: list[tuple[np.ndarray, float]],
                    rng: np.random.Generator) -> bool:
        """Dress the spare geom ``geom_name`` as a copy of ``spec['source']`` at a free spot; False if none was free."""
        import mujoco

        model, data = self.model, self.data
        g = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, geom_name)
        if g < 0:
            raise R2AInputError(f"layout: the arena has no geom '{geom_name}' to use as a distractor")
        source = spec["source"]
        src = self._visual_mesh(source)
        body = self.sim.raw_env.obj_body_id[source]
        lo, hi = self.sim.object_bounds(source)
        radius = 0.5 * float(np.max(hi[:2] - lo[:2]))
        above_bottom = float(data.xpos[body][2] - lo[2])
        positions = np.array([self.sim.object_pos(o)[:2] for o in self.objects])
        area_lo, area_hi = positions.min(0) - extra - DISTRACTOR_SPREAD, positions.max(0) + extra + DISTRACTOR_SPREAD
        if self.bounds is not None:
            area_lo = np.maximum(area_lo, self.bounds[0] + radius)
            area_hi = np.minimum(area_hi, self.bounds[1] - radius)
        footprints = [self.sim.object_bounds(n) for n in self._solid_names()]
        for _ in range(N_TRIES):
            xy = rng.uniform(area_lo, area_hi)
            if all(_box_distance(xy, f_lo[:2], f_hi[:2]) >= radius + DISTRACTOR_GAP for f_lo, f_hi in footprints) and \
                    all(np.linalg.norm(xy - other) >= radius + r + DISTRACTOR_GAP for other, r in placed):
                break
        else:
            log.debug("layout: no free spot for a copy of '%s'", source)
            return False
        placed.append((xy, radius))
        yaw = rotation_about(np.array([0.0, 0.0, 1.0]), np.deg2rad(spec["yaw_deg"]))
        origin = np.array([xy[0], xy[1], self.surface_z + above_bottom])
        world_pos = origin + yaw @ (data.geom_xpos[src] - data.xpos[body])
        world_rot = yaw @ data.geom_xmat[src].reshape(3, 3)
        parent = int(model.geom_bodyid[g])
        parent_rot = data.xmat[parent].reshape(3, 3)
        for name in ("geom_type", "geom_size", "geom_rgba", "geom_rbound", "geom_aabb", "geom_dataid", "geom_matid"):
            getattr(model, name)[g] = getattr(model, name)[src]
        model.geom_sameframe[g] = 0  # else MuJoCo copies the body pose and ignores geom_pos/quat
        model.geom_pos[g] = parent_rot.T @ (world_pos - data.xpos[parent])
        model.geom_quat[g] = matrix_to_quat(parent_rot.T @ world_rot)
        return True

    def _visual_mesh(self, name: str) -> int:
        """The visual mesh geom of object ``name`` (LIBERO's objects have one each)."""
        import mujoco

        model = self.model
        root = self.sim.raw_env.obj_body_id[name]
        visual = ((model.geom_contype == 0) & (model.geom_conaffinity == 0)
                  & (model.geom_type == mujoco.mjtGeom.mjGEOM_MESH))
        in_object = model.body_rootid[model.geom_bodyid] == model.body_rootid[root]
        found = np.flatnonzero(visual & in_object)
        if not len(found):
            raise R2AInputError(f"layout: object '{name}' has no visual mesh to copy as a distractor")
        return int(found[0])

    def _solid_names(self) -> list[str]:
        env = self.sim.raw_env
        return [n for n in (*env.objects_dict, *env.fixtures_dict) if n in env.obj_body_id]


def _box_distance(xy: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Distance from the point ``xy`` to the box [lo, hi] (0 inside)."""
    return float(np.linalg.norm(np.maximum(np.maximum(lo - xy, 0.0), xy - hi)))
