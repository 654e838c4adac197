"""The robosuite + MuJoCo simulator backend: Panda arm, OSC_POSE delta actions, agentview and wrist cameras.

``SimEnv`` hides robosuite behind the observation dict of :mod:`r2a_core.types` and adds what the benchmark
needs: exact seeding of an existing environment, a state fingerprint, get/set state, stage predicates.
Environments are built with ``hard_reset=False``: resets are ~10× faster, model edits persist, and robosuite's
default hard reset corrupts camera images once an old GL context is garbage-collected
(docs/architecture.md, "Platform notes").
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from dataclasses import asdict, dataclass
from typing import Any, Iterator

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.types import (
    CAMERAS,
    OSC_POSE_DELTA,
    PROMPT,
    STATE_EE_POS,
    STATE_EE_QUAT,
    STATE_GRIPPER,
    STATE_JOINT_POS,
    gripper_opening,
    image_key,
)
from sim.envs.rendering import apply_render_quality, configure_headless_gl
from sim.envs.tasks import Task, get_task

log = logging.getLogger(__name__)

#: canonical camera name → robosuite camera name
ROBOSUITE_CAMERAS = {"agentview": "agentview", "wrist": "robot0_eye_in_hand"}


@dataclass
class SimConfig:
    """How to build the simulator for one task."""

    task: str = "Lift"
    #: canonical cameras to render ("agentview", "wrist"); empty for state-only runs
    cameras: tuple[str, ...] = CAMERAS
    #: square image side in pixels
    image_size: int = 128
    #: control steps per second (robosuite's default)
    control_freq: int = 20
    #: episode length limit; None uses the task's default
    horizon: int | None = None
    shadows: bool = False
    reflections: bool = False
    antialias: bool = False
    #: leave the geoms outside a camera's view out of its frame: the same pixels in less time (applies only
    #: without shadows and reflections; sim/envs/rendering.py)
    frustum_culling: bool = True
    #: LIBERO training seeds only: standard deviation (rad) of a Gaussian offset on each arm joint at reset, drawn
    #: from the seed (robosuite's own default initialization noise is 0.02); 0: LIBERO's one default arm pose.
    #: Benchmark seeds start from LIBERO's recorded init states whatever this says; robosuite's built-in tasks
    #: draw robosuite's own noise and refuse this field
    start_joint_noise: float = 0.0

    def __post_init__(self) -> None:
        self.task = get_task(self.task).name  # any case on the command line; the registered name from here on
        self.cameras = tuple(self.cameras)
        unknown = [c for c in self.cameras if c not in ROBOSUITE_CAMERAS]
        if unknown:
            raise R2AInputError(f"unknown camera(s) {unknown}; valid cameras: {', '.join(ROBOSUITE_CAMERAS)}")
        if not 8 <= self.image_size <= 1024:
            raise R2AInputError(f"image_size={self.image_size}: expected 8..1024 pixels")
        if not 0.0 <= self.start_joint_noise <= 0.5:
            raise R2AInputError(f"start_joint_noise={self.start_joint_noise}: expected 0..0.5 rad")


#: robosuite's import-time warnings that concern nothing r2a uses (a private macro file, robots from
#: robosuite_models, the GR1 robot's IK): dropped, so that every simulator process does not print them again
_IMPORT_NOISE = ("No private macro file found", "It is recommended to use a private macro file",
                 "To setup, run: python", "Could not import robosuite_models", "Could not load the mink-based")


class _DropImportNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(_IMPORT_NOISE):
            log.debug("robosuite (filtered): %s", record.getMessage())
            return False
        return True


def quiet_robosuite_logs() -> None:
    """Install the filter on robosuite's logger (before robosuite is imported; installing it twice is harmless)."""
    logger = logging.getLogger("robosuite_logs")
    if not any(isinstance(f, _DropImportNoise) for f in logger.filters):
        logger.addFilter(_DropImportNoise())


def _import_robosuite():
    configure_headless_gl()
    quiet_robosuite_logs()
    try:
        import robosuite
        from robosuite import macros
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError("the simulator needs robosuite and mujoco: pip install 'r2a[sim]'") from err
    macros.IMAGE_CONVENTION = "opencv"  # upright images
    logging.getLogger("robosuite_logs").setLevel(logging.ERROR)
    return robosuite


def _register_custom_envs() -> None:
    from robosuite.environments.base import REGISTERED_ENVS

    if "StackThree" not in REGISTERED_ENVS:
        from sim.envs.stack_three import StackThree  # noqa: F401  (registration happens on class creation)


def _placement_sampler(task: Task):
    from robosuite.utils.placement_samplers import UniformRandomSampler

    half_x, half_y = task.placement
    return UniformRandomSampler(name="ObjectSampler", x_range=[-half_x, half_x], y_range=[-half_y, half_y],
                                rotation=None, ensure_object_boundary_in_range=False, ensure_valid_placement=True,
                                reference_pos=np.array((0, 0, 0.8)), z_offset=0.01)


def env_args_for(config: SimConfig) -> dict[str, Any]:
    """robomimic-style ``env_args`` of a simulator config: enough to rebuild it, plus the action space."""
    return {"env_name": config.task, "type": "r2a_robosuite", "env_kwargs": asdict(config),
            "robosuite_env": get_task(config.task).env_name, "action_space": OSC_POSE_DELTA.to_dict()}


@contextlib.contextmanager
def cameras_skipped(raw_env: Any, skip: bool) -> Iterator[None]:
    """While active (when ``skip``), robosuite's image observables return their last value instead of rendering.

    Their sampling clocks run as usual (only the sensor is swapped), so the next rendered image is sampled at
    the same physics substep as without skipping.
    """
    if not skip:
        yield
        return
    swapped = {}
    for observable in raw_env._observables.values():
        if observable.modality == "image":
            swapped[observable] = observable._sensor
            observable._sensor = _last_value_sensor(observable)
    try:
        yield
    finally:
        for observable, sensor in swapped.items():
            observable._sensor = sensor


def _last_value_sensor(observable: Any):
    """A sensor with ``observable``'s modality answering its current (last sampled) value."""

    def last_value(obs_cache: dict[str, Any]) -> np.ndarray:
        return observable._current_observed_value

    last_value.__modality__ = observable.modality
    return last_value


class SimEnv:
    """One task's simulator. ``reset(seed)`` gives the same initial state for the same seed, in any process."""

    action_space = OSC_POSE_DELTA

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.task = get_task(self.config.task)
        if self.task.backend != "robosuite" and type(self) is SimEnv:
            raise R2AInputError(f"task '{self.task.name}' runs on the {self.task.backend} backend: build it with "
                                "sim.envs.backends.make_sim")
        if self.task.backend == "robosuite" and self.config.start_joint_noise:
            raise R2AInputError(f"start_joint_noise={self.config.start_joint_noise}: '{self.task.name}' is a "
                                "robosuite task, whose resets draw robosuite's own initialization noise (0.02 rad); "
                                "the option is for LIBERO's tasks")
        self.horizon = self.config.horizon or self.task.horizon
        self.raw_env = self._make_raw_env()
        self._sync_sampler_rng()
        self.instruction = self.task.instruction
        self.seed: int | None = None
        self._obs: dict[str, Any] = {}
        self._initial_object_pos: dict[str, np.ndarray] = {}

    def _make_raw_env(self):
        suite = _import_robosuite()
        _register_custom_envs()
        cams = [ROBOSUITE_CAMERAS[c] for c in self.config.cameras]
        kwargs: dict[str, Any] = dict(
            robots="Panda", controller_configs=suite.load_composite_controller_config(controller="BASIC"),
            has_renderer=False, has_offscreen_renderer=bool(cams), use_camera_obs=bool(cams),
            use_object_obs=False, camera_names=cams or "agentview", camera_heights=self.config.image_size,
            camera_widths=self.config.image_size, control_freq=self.config.control_freq, horizon=self.horizon,
            ignore_done=True, hard_reset=False, reward_shaping=False, seed=0, **dict(self.task.env_kwargs))
        if self.task.placement is not None:
            kwargs["placement_initializer"] = _placement_sampler(self.task)
        env = suite.make(self.task.env_name, **kwargs)
        if cams:
            apply_render_quality(env.sim, shadows=self.config.shadows, reflections=self.config.reflections,
                                 antialias=self.config.antialias, culling=self.config.frustum_culling)
        return env

    def _sync_sampler_rng(self) -> None:
        """Make every placement sampler draw from the env's generator, so one re-seed controls them all."""
        sampler = self.raw_env.placement_initializer
        stack = [sampler]
        while stack:
            s = stack.pop()
            s.rng = self.raw_env.rng
            stack.extend(getattr(s, "samplers", {}).values())

    # ----------------------------------------------------------------------------------------------- episode
    def reset(self, seed: int) -> dict[str, Any]:
        """Re-seed in place (samplers keep a reference to the generator) and reset; return the observation."""
        self.seed = int(seed)
        self._activate_gl()
        self.raw_env.rng.bit_generator.state = np.random.default_rng(self.seed).bit_generator.state
        raw_obs = self.raw_env.reset()
        self._initial_object_pos = {name: self.object_pos(name) for name in self.task.objects}
        if self.config.cameras:
            apply_render_quality(self.raw_env.sim, shadows=self.config.shadows,
                                 reflections=self.config.reflections, antialias=self.config.antialias,
                                 culling=self.config.frustum_culling)
        self._obs = self._make_obs(raw_obs)
        return self._obs

    def step(self, action: np.ndarray, render_images: bool = True) -> dict[str, Any]:
        """Apply one 7-D OSC_POSE delta action (clipped to [-1, 1]); return the next observation.

        ``render_images=False`` skips the cameras for this step — rendering is most of a step's cost — and the
        observation carries the last rendered images again (same keys and shapes, so per-step image transforms
        draw the same randomness). For rollouts that know nobody looks at this step's images (a chunked policy
        between queries): the physics, and every image that is rendered, are exactly what they would have been.
        """
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != (self.action_space.dim,):
            raise R2AInputError(f"action has shape {action.shape}, expected ({self.action_space.dim},)")
        self._activate_gl()
        with cameras_skipped(self.raw_env, skip=not render_images and bool(self.config.cameras)):
            raw_obs, _, _, _ = self.raw_env.step(self.action_space.clip(action))
        self._obs = self._make_obs(raw_obs)
        return self._obs

    def _activate_gl(self) -> None:
        """Make this env's GL context current before rendering.

        Each robosuite render context makes itself current only when created, so with several simulators in
        one process (a benchmark worker keeps one per task) the others would render into the newest context —
        wrong images, or garbage once that context is freed.
        """
        ctx = self.render_context if self.config.cameras else None
        if ctx is not None:
            ctx.gl_ctx.make_current()

    def observe(self) -> dict[str, Any]:
        return self._obs

    def refresh_observation(self) -> dict[str, Any]:
        """Recompute the observation from the current model and state without stepping, and return it.

        Call after editing the model or the state between steps (the shift factors do, right after ``reset``):
        cameras are re-rendered and proprio is re-read; the physics is untouched. robosuite's own forced update
        would also advance each observable's sampling clock by one physics substep, so that every later image
        is sampled one substep early; the clocks are restored here so later observations stay as they were.
        """
        self._activate_gl()
        env = self.raw_env
        clocks = {name: (o._time_since_last_sample, o._sampled, o._current_delay)
                  for name, o in env._observables.items()}
        try:
            for observable in env._observables.values():
                observable.update(timestep=0.0, obs_cache=env._obs_cache, force=True)
            raw_obs = env._get_observations()
        finally:
            for name, (since, sampled, delay) in clocks.items():
                o = env._observables[name]
                o._time_since_last_sample, o._sampled, o._current_delay = since, sampled, delay
        self._obs = self._make_obs(raw_obs)
        return self._obs

    def mark_initial_state(self) -> None:
        """Re-record where the task objects rest (``initial_object_pos``) after moving them post-reset."""
        self._initial_object_pos = {name: self.object_pos(name) for name in self.task.objects}

    def sync_controller(self) -> None:
        """Re-anchor the arm controller at the current joint positions after they were written directly.

        robosuite's OSC keeps the goal pose and the nullspace posture of its last reset; without this call it
        pulls the arm back toward the old start pose. Afterwards zero actions hold the new pose.
        """
        controller = self.robot.composite_controller
        controller.update_state()
        for part, part_controller in controller.part_controllers.items():
            if part in self.robot.arms:
                part_controller.update_initial_joints(self.sim.data.qpos[part_controller.qpos_index])
        controller.reset()

    def _make_obs(self, raw_obs: dict[str, Any]) -> dict[str, Any]:
        obs: dict[str, Any] = {
            STATE_EE_POS: self.ee_pos().astype(np.float32),
            STATE_EE_QUAT: self.ee_quat().astype(np.float32),
            STATE_GRIPPER: np.float32(gripper_opening(self.gripper_qpos())),
            STATE_JOINT_POS: self.joint_pos().astype(np.float32),
            PROMPT: self.instruction,
        }
        for cam in self.config.cameras:
            obs[image_key(cam)] = np.ascontiguousarray(raw_obs[f"{ROBOSUITE_CAMERAS[cam]}_image"])
        return obs

    # ------------------------------------------------------------------------------------------------ state
    @property
    def sim(self):
        return self.raw_env.sim

    @property
    def robot(self):
        return self.raw_env.robots[0]

    @property
    def mj_model(self):
        """The ``mujoco.MjModel`` behind robosuite's wrapper (the shift factors edit its arrays in place)."""
        return self.sim.model._model

    @property
    def mj_data(self):
        """The ``mujoco.MjData`` behind robosuite's wrapper."""
        return self.sim.data._data

    @property
    def render_context(self):
        """robosuite's offscreen render context (scene flags, GL context), or None for a camera-less simulator."""
        return getattr(self.sim, "_render_context_offscreen", None)

    def arm_joint_indexes(self) -> tuple[np.ndarray, np.ndarray]:
        """Indexes of the arm joints in ``qpos`` and in ``qvel`` (the robot_init factor writes them)."""
        return np.asarray(self.robot._ref_joint_pos_indexes), np.asarray(self.robot._ref_joint_vel_indexes)

    def ee_pos(self) -> np.ndarray:
        return np.array(self.sim.data.site_xpos[self.robot.eef_site_id["right"]])

    def ee_quat(self) -> np.ndarray:
        """Grip-site orientation, wxyz."""
        import mujoco

        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, np.asarray(self.sim.data.site_xmat[self.robot.eef_site_id["right"]]))
        return quat

    def gripper_qpos(self) -> np.ndarray:
        return np.array(self.sim.data.qpos[self.robot._ref_gripper_joint_pos_indexes["right"]])

    def joint_pos(self) -> np.ndarray:
        return np.array(self.sim.data.qpos[self.arm_joint_indexes()[0]])

    def robot_state(self) -> np.ndarray:
        """LIBERO's ``robot_states`` row: gripper finger qpos (2), EE position (3), EE quaternion (4, wxyz)."""
        return np.concatenate([self.gripper_qpos(), self.ee_pos(), self.ee_quat()])

    def get_state(self) -> np.ndarray:
        """Flattened MuJoCo state (time, qpos, qvel) — robomimic's ``states`` row."""
        return np.array(self.sim.get_state().flatten())

    def set_state(self, state: np.ndarray) -> None:
        expected = self.get_state().shape
        state = np.asarray(state, dtype=np.float64)
        if state.shape != expected:
            raise R2AInputError(f"simulator state has shape {state.shape}, expected {expected}")
        self.sim.set_state_from_flattened(state)
        self.sim.forward()

    def control_state(self) -> dict[str, np.ndarray]:
        """What robosuite's controllers carry from one step to the next besides the MuJoCo state: each gripper's
        ramped command (it moves 0.2 per step towards the commanded side), each arm controller's nullspace
        posture target (the joints at reset) and whether its cached kinematics are stale. Right after a reset
        robosuite steps once on the cache it filled before the fingers were placed (``new_update`` is False), so
        a stale controller's cached arrays travel too. With :meth:`set_state` it makes another simulator step
        identically."""
        state = {f"gripper/{arm}": np.array(g.current_action) for arm, g in self.robot.gripper.items()}
        for part, controller in self.robot.composite_controller.part_controllers.items():
            if getattr(controller, "initial_joint", None) is not None:
                state[f"posture/{part}"] = np.array(controller.initial_joint)
            stale = not getattr(controller, "new_update", True)
            state[f"stale/{part}"] = np.array(stale)
            if stale:
                state.update({f"cache/{part}/{name}": value.copy() for name, value in vars(controller).items()
                              if isinstance(value, np.ndarray)})
        return state

    def set_control_state(self, state: dict[str, np.ndarray]) -> None:
        controllers = self.robot.composite_controller.part_controllers
        for key, value in state.items():
            kind, name = key.split("/", 1)
            if kind == "gripper":
                self.robot.gripper[name].current_action = np.array(value)
            elif kind == "posture":
                controllers[name].initial_joint = np.array(value)
            elif kind == "stale":
                controllers[name].new_update = not bool(value)
            else:  # cache/<part>/<attribute>
                part, attribute = name.split("/", 1)
                setattr(controllers[part], attribute, np.array(value))

    def scene_state(self) -> dict[str, Any]:
        """What places the scene besides the MuJoCo state: every body's pose in the model (LIBERO samples its
        fixtures' poses there, and shift factors edit them) and where the objects rested after the reset (stages
        read it). With :meth:`set_scene_state`, :meth:`set_state` and :meth:`set_control_state` another simulator
        of the same task stands exactly where this one stands (the expert lookahead's shadow)."""
        model = self.mj_model
        return {"body_pos": np.array(model.body_pos), "body_quat": np.array(model.body_quat),
                "initial_object_pos": {k: np.array(v) for k, v in self._initial_object_pos.items()}}

    def set_scene_state(self, scene: dict[str, Any]) -> None:
        model = self.mj_model
        if scene["body_pos"].shape != model.body_pos.shape:
            raise R2AInputError(f"{self.task.name}: scene of {len(scene['body_pos'])} bodies, this model has "
                                f"{model.nbody} (another task's simulator?)")
        model.body_pos[:], model.body_quat[:] = scene["body_pos"], scene["body_quat"]
        self._initial_object_pos = dict(scene["initial_object_pos"])  # scene_state's arrays are copies already

    def fingerprint(self) -> str:
        """Hash of the full simulator state: equal fingerprints mean identical initial conditions."""
        return hashlib.sha256(self.get_state().tobytes()).hexdigest()[:16]

    # ------------------------------------------------------------------------------------ task predicates
    def object_model(self, name: str):
        """robosuite's model object of task object ``name`` (its joints, geoms, root body, size)."""
        env = self.raw_env
        if hasattr(env, "objects"):  # PickPlace
            for obj in env.objects:
                if obj.name == name:
                    return obj
        return getattr(env, name)

    def object_pos(self, name: str) -> np.ndarray:
        body = self.sim.model.body_name2id(self.object_model(name).root_body)
        return np.array(self.sim.data.body_xpos[body])

    def initial_object_pos(self, name: str) -> np.ndarray:
        """Where ``name`` rested right after the last reset."""
        return self._initial_object_pos[name]

    def object_quat(self, name: str) -> np.ndarray:
        body = self.sim.model.body_name2id(self.object_model(name).root_body)
        return np.array(self.sim.data.body_xquat[body])

    def is_grasped(self, name: str) -> bool:
        return bool(self.raw_env._check_grasp(gripper=self.robot.gripper["right"],
                                              object_geoms=self.object_model(name)))

    def in_contact(self, a: str, b: str) -> bool:
        return bool(self.raw_env.check_contact(self.object_model(a), self.object_model(b)))

    def table_height(self) -> float:
        env = self.raw_env
        offset = getattr(env, "table_offset", None)
        return float(offset[2]) if offset is not None else float(env.bin1_pos[2])

    def can_in_bin(self) -> bool:
        return not self.raw_env.not_in_bin(self.object_pos("Can"), 3)

    def bin_target(self) -> np.ndarray:
        """Centre of the can's target bin quadrant at the bin floor (PickPlaceCan only)."""
        return np.array(self.raw_env.target_bin_placements[3])

    def stage_flags(self) -> dict[str, bool]:
        """Current stage predicates (not latched) in stage order."""
        return self.task.stage_fn(self)

    def success(self) -> bool:
        return self.evaluate()[1]

    def evaluate(self) -> tuple[dict[str, bool], bool]:
        """Stage predicates (not latched) and success, with the predicates computed once."""
        flags = self.stage_flags()
        return flags, self.task.success_fn(self, flags)

    def env_args(self) -> dict[str, Any]:
        """What is needed to rebuild this environment (robomimic's ``env_args``)."""
        return env_args_for(self.config)

    def close(self) -> None:
        """Free the simulator; its GL objects are freed in its own context, not in another env's."""
        try:
            self._activate_gl()
            self.raw_env.close()
        except Exception as err:  # noqa: BLE001 - teardown must not mask the real error
            log.debug("closing the robosuite env failed: %s", err)
