"""View canonicalization: warp a moved third-person camera's image back toward the training view before the base
policy sees it (issue 35, lever 2).

Under the benchmark's camera shift no action-side blend helps (docs/experiments/headroom.md): the base's chunks go
wrong because what it sees is not what it was trained on. The table is a plane, so the part of the scene on it
maps between two views of it by a homography; objects above it (the arm, the top of a cube) carry a parallax
error that grows with their height and with how far the camera moved.

* geometry: :class:`CameraView` (a MuJoCo pinhole camera), :func:`plane_homography`, :class:`Displacement` (the
  camera factor's parts, composed exactly as ``sim/shifts/camera.py`` composes them — ``r2a`` may not import
  ``sim``, a test checks both agree) and :class:`WarpMap` (a precomputed bilinear remap: well under 1 ms a frame
  at 64 px);
* :class:`OracleCanonicalizedPolicy` — NOT deployable, a headroom diagnostic: the homography from the TRUE shifted
  and clean poses read from the simulator handed to the policy (``oracle-canonicalize:BASE``);
* :class:`CanonicalizedPolicy` — deployable (``canonicalize:BASE``): :class:`DisplacementEstimator` estimates the
  displacement from the episode's first frame against a reference of the clean training scenes
  (:class:`CanonReference`, ``r2a/assets/r2a_canon_reference/``), gated so that clean views pass unchanged
  (docs/experiments/canonicalize.md).

Pixels of the canonical view with no source: outside the shifted image the edge is replicated (the nearest
observed colour: no hard border the base never saw); rays that miss the table plane in front of both cameras
(rare: above the horizon) take the frame's mean colour.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy
from r2a_core.rotations import quat_to_matrix, rotation_about
from r2a_core.types import PROMPT, image_key

log = logging.getLogger(__name__)

CAMERA = "agentview"


# ------------------------------------------------------------------------------------------------------ geometry

@dataclass(frozen=True)
class CameraView:
    """A pinhole camera as MuJoCo defines it: ``rot``'s columns are the camera's x (right), y (up) and z
    (backward) axes in the world; ``fovy_deg`` is the vertical field of view."""

    pos: np.ndarray
    rot: np.ndarray
    fovy_deg: float

    def intrinsics(self, size: tuple[int, int]) -> np.ndarray:
        """``K`` mapping camera coordinates to upright (OpenCV row order) pixel coordinates, pixel centres at
        ``index + 0.5``; the camera looks along −z and its y is up, hence the signs."""
        h, w = size
        f = 0.5 * h / np.tan(np.deg2rad(self.fovy_deg) / 2)
        return np.array([[f, 0.0, -w / 2], [0.0, -f, -h / 2], [0.0, 0.0, -1.0]])

    def plane_to_pixel(self, height: float, size: tuple[int, int]) -> np.ndarray:
        """``(3, 3)``: homogeneous ``(x, y, 1)`` on the plane ``z = height`` → homogeneous pixel ``(u, v, 1)``
        scaled by the point's depth (positive in front of the camera)."""
        rt = self.rot.T
        g = np.column_stack([rt[:, 0], rt[:, 1], rt @ (np.array([0.0, 0.0, height]) - self.pos)])
        return self.intrinsics(size) @ g

    def pivot(self, height: float) -> np.ndarray:
        """Where the optical axis meets the plane ``z = height`` (the camera factor's pivot)."""
        forward = -self.rot[:, 2]
        if forward[2] > -1e-3:
            return self.pos + forward
        return self.pos + forward * (self.pos[2] - height) / -forward[2]


def camera_view_of(sim: Any, camera: str = CAMERA) -> CameraView:
    """The camera's current pose in a simulator (duck-typed ``SimEnv``: ``mj_model`` and robosuite's name lookup)."""
    model = sim.mj_model
    cam = sim.sim.model.camera_name2id(camera)
    return CameraView(np.array(model.cam_pos[cam], np.float64), quat_to_matrix(np.array(model.cam_quat[cam])),
                      float(model.cam_fovy[cam]))


def plane_homography(src: CameraView, dst: CameraView, height: float, size: tuple[int, int]) -> np.ndarray:
    """``(3, 3)`` homography taking a pixel of ``src``'s image to the pixel of ``dst``'s image that sees the same
    point of the table plane ``z = height``."""
    return dst.plane_to_pixel(height, size) @ np.linalg.inv(src.plane_to_pixel(height, size))


@dataclass(frozen=True)
class Displacement:
    """A camera displacement in the camera factor's terms; the shift and the look-away are 2-D vectors (magnitude,
    direction) so that small displacements have no singular direction."""

    orbit_deg: float = 0.0
    elevation_deg: float = 0.0
    distance_scale: float = 1.0
    shift_x_m: float = 0.0
    shift_y_m: float = 0.0
    look_x_deg: float = 0.0
    look_y_deg: float = 0.0

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> "Displacement":
        """From the camera factor's sampled parameters (``sim/shifts/camera.py``)."""
        s, sd = float(p["shift_m"]), np.deg2rad(float(p["shift_dir_deg"]))
        la, ld = float(p["look_away_deg"]), np.deg2rad(float(p["look_dir_deg"]))
        return cls(float(p["orbit_deg"]), float(p["elevation_deg"]), float(p["distance_scale"]),
                   s * np.cos(sd), s * np.sin(sd), la * np.cos(ld), la * np.sin(ld))

    @classmethod
    def from_vector(cls, v: np.ndarray) -> "Displacement":
        return cls(*(float(x) for x in v))

    def vector(self) -> np.ndarray:
        return np.array([self.orbit_deg, self.elevation_deg, self.distance_scale, self.shift_x_m, self.shift_y_m,
                         self.look_x_deg, self.look_y_deg])

    def as_dict(self) -> dict[str, float]:
        return {"orbit_deg": round(self.orbit_deg, 2), "elevation_deg": round(self.elevation_deg, 2),
                "distance_scale": round(self.distance_scale, 3),
                "shift_m": round(float(np.hypot(self.shift_x_m, self.shift_y_m)), 4),
                "look_away_deg": round(float(np.hypot(self.look_x_deg, self.look_y_deg)), 2)}

    def apply(self, clean: CameraView, height: float) -> CameraView:
        """The displaced camera: the camera factor's composition (distance, elevation, orbit about the pivot, shift
        in the image plane, look-away in place)."""
        pivot = clean.pivot(height)
        pos, rot = pivot + self.distance_scale * (clean.pos - pivot), clean.rot
        axis = np.cross(pos - pivot, [0.0, 0.0, 1.0])
        if np.linalg.norm(axis) > 1e-6:
            tilt = rotation_about(axis, np.deg2rad(self.elevation_deg))
            pos, rot = pivot + tilt @ (pos - pivot), tilt @ rot
        orbit = rotation_about(np.array([0.0, 0.0, 1.0]), np.deg2rad(self.orbit_deg))
        pos, rot = pivot + orbit @ (pos - pivot), orbit @ rot
        pos = pos + self.shift_x_m * rot[:, 0] + self.shift_y_m * rot[:, 1]
        look = np.hypot(self.look_x_deg, self.look_y_deg)
        if look > 1e-9:
            axis_in_camera = np.array([self.look_x_deg / look, self.look_y_deg / look, 0.0])
            rot = rot @ rotation_about(axis_in_camera, np.deg2rad(look))
        return CameraView(pos, rot, clean.fovy_deg)


def pixel_displacement(homography: np.ndarray, size: tuple[int, int]) -> float:
    """Mean distance in pixels that ``homography`` moves the points of the central image grid (0: identity); inf
    where a point maps behind the camera."""
    h, w = size
    u, v = np.meshgrid(np.linspace(0.1 * w, 0.9 * w, 8), np.linspace(0.1 * h, 0.9 * h, 8))
    p = np.stack([u.ravel(), v.ravel(), np.ones(u.size)])
    q = homography @ p
    if np.any(q[2] <= 1e-9):
        return float("inf")
    return float(np.linalg.norm(q[:2] / q[2] - p[:2], axis=0).mean())


# ------------------------------------------------------------------------------------------------------- warping

@dataclass(frozen=True)
class WarpMap:
    """A precomputed bilinear remap of an ``(H, W, 3)`` image: for each output pixel the four source indexes and
    weights (edges replicated) and where no source exists (``invalid``: filled with the frame's mean colour)."""

    index: np.ndarray    # (H·W, 4) flat source pixel indexes
    weight: np.ndarray   # (H·W, 4) float32 bilinear weights
    invalid: np.ndarray  # (H·W,) bool
    size: tuple[int, int]

    @classmethod
    def from_homography(cls, dst_to_src: np.ndarray, size: tuple[int, int]) -> "WarpMap":
        """``dst_to_src`` takes an output pixel to the source pixel it shows (continuous, centres at +0.5)."""
        h, w = size
        u, v = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
        q = dst_to_src @ np.stack([u.ravel(), v.ravel(), np.ones(h * w)])
        invalid = ~(q[2] > 1e-9) | ~np.all(np.isfinite(q), axis=0)
        den = np.where(invalid, 1.0, q[2])
        x = np.clip(np.nan_to_num(q[0] / den) - 0.5, 0, w - 1)
        y = np.clip(np.nan_to_num(q[1] / den) - 0.5, 0, h - 1)
        x0, y0 = np.minimum(np.floor(x).astype(np.int64), w - 1), np.minimum(np.floor(y).astype(np.int64), h - 1)
        x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
        fx, fy = x - x0, y - y0
        index = np.stack([y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1], axis=1)
        weight = np.stack([(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy], axis=1).astype(np.float32)
        return cls(index, weight, invalid, (h, w))

    def apply(self, image: np.ndarray) -> np.ndarray:
        h, w = self.size
        flat = np.asarray(image, np.float32).reshape(h * w, -1)
        out = np.einsum("nk,nkc->nc", self.weight, flat[self.index])
        if self.invalid.any():
            out[self.invalid] = flat.mean(axis=0)
        return np.clip(out + 0.5, 0, 255).astype(np.uint8).reshape(image.shape)


def canonical_warp(shifted: CameraView, clean: CameraView, height: float, size: tuple[int, int]) -> WarpMap:
    """The remap showing ``shifted``'s image from ``clean``'s viewpoint (exact on the table plane)."""
    return WarpMap.from_homography(plane_homography(clean, shifted, height, size), size)


# --------------------------------------------------------------------------------- the reference (an asset)

REFERENCE_FORMAT, REFERENCE_VERSION = "r2a.canon.reference", 1
DEFAULT_REFERENCE = "r2a/assets/r2a_canon_reference"


@dataclass(frozen=True)
class CanonicalizeSettings:
    """How the base's agentview image is canonicalized (``canonicalize:`` in an R2A config)."""

    enabled: bool = False
    """warp the base's agentview image back to the training view (R2A config only; ``--policy canonicalize:BASE``
    always does)"""
    reference: str = DEFAULT_REFERENCE
    """the tasks' clean start views and camera calibration, with the gate's fitted threshold
    (scripts/build_canon_reference.py; docs/experiments/canonicalize.md)"""
    threshold_px: float | None = None
    """warp only when the estimated displacement moves the image's central grid by more than this many pixels at
    64 px (null: the reference's threshold, fitted on clean training frames)"""


@dataclass(frozen=True)
class SceneReference:
    """One task's clean training view: the camera's calibration, the table height, the mean of its clean start
    frames, the world point each pixel sees (NaN: nothing) and how much to trust each pixel (objects are placed at
    random: where the start frames differ, the pixel weighs little)."""

    task: str
    instruction: str
    view: CameraView
    height: float
    mean: np.ndarray    # (H, W, 3) float32, 0–255
    points: np.ndarray  # (H, W, 3) float32, world metres
    weight: np.ndarray  # (H, W) float32 in [0, 1]


@dataclass(frozen=True)
class CanonReference:
    scenes: list[SceneReference]
    threshold_px: float
    meta: dict[str, Any]


def scene_reference(task: str, instruction: str, view: CameraView, height: float, frames: np.ndarray,
                    points: np.ndarray, noise: float = 12.0) -> SceneReference:
    """A scene's reference from its clean start frames ``(N, H, W, 3)`` and the points its pixels see: their mean,
    and per pixel the weight ``1 / (1 + (std / noise)²)`` (a pixel whose colour depends on where the objects were
    placed says little about where the camera is), 0 where the pixel sees nothing."""
    frames = np.asarray(frames, np.float32)
    std = frames.std(axis=0).mean(axis=-1)
    weight = np.where(np.all(np.isfinite(points), axis=-1), 1.0 / (1.0 + (std / noise) ** 2), 0.0)
    return SceneReference(task, instruction, view, float(height), frames.mean(axis=0),
                          np.asarray(points, np.float32), weight.astype(np.float32))


def save_reference(path: str | Path, reference: CanonReference) -> None:
    """A directory: ``manifest.json`` (format name and version, the gate's threshold, per scene its task,
    instruction and calibration) and per scene ``<i>_mean.npy`` (uint8), ``<i>_points.npy`` and ``<i>_weight.npy``
    (float16: millimetres at the scene's distances)."""
    from r2a_core.files import atomic_dir, write_json_atomic

    scenes = [{"task": s.task, "instruction": s.instruction, "pos": s.view.pos.tolist(),
               "rot": s.view.rot.tolist(), "fovy_deg": s.view.fovy_deg, "height": s.height} for s in reference.scenes]
    with atomic_dir(path) as tmp:
        for i, s in enumerate(reference.scenes):
            np.save(tmp / f"{i}_mean.npy", np.clip(s.mean + 0.5, 0, 255).astype(np.uint8))
            np.save(tmp / f"{i}_points.npy", s.points.astype(np.float16))
            np.save(tmp / f"{i}_weight.npy", s.weight.astype(np.float16))
        write_json_atomic(tmp / "manifest.json", {**reference.meta, "format": REFERENCE_FORMAT,
                                                  "version": REFERENCE_VERSION, "threshold_px": reference.threshold_px,
                                                  "scenes": scenes})


def load_reference(path: str | Path) -> CanonReference:
    path = Path(path)
    manifest = path / "manifest.json"
    if not manifest.is_file():
        raise R2AInputError(f"{path}: no view-canonicalization reference here (manifest.json missing); build one "
                            "with scripts/build_canon_reference.py (docs/experiments/canonicalize.md)")
    meta = json.loads(manifest.read_text())
    if meta.get("format") != REFERENCE_FORMAT or meta.get("version") != REFERENCE_VERSION:
        raise R2AInputError(f"{path}: not a {REFERENCE_FORMAT} v{REFERENCE_VERSION} reference (format "
                            f"{meta.get('format')!r} v{meta.get('version')!r}); rebuild it with "
                            "scripts/build_canon_reference.py (docs/experiments/canonicalize.md)")
    scenes = [SceneReference(s["task"], s["instruction"],
                             CameraView(np.array(s["pos"]), np.array(s["rot"]), float(s["fovy_deg"])),
                             float(s["height"]), np.load(path / f"{i}_mean.npy").astype(np.float32),
                             np.load(path / f"{i}_points.npy").astype(np.float32),
                             np.load(path / f"{i}_weight.npy").astype(np.float32))
              for i, s in enumerate(meta["scenes"])]
    return CanonReference(scenes, float(meta["threshold_px"]), meta)


# ------------------------------------------------------------------------------------------------- the estimator

#: coarse grid of the search: orbit, elevation, distance and look-away (the shift starts at 0 and is refined)
COARSE_ORBIT = np.arange(-80.0, 80.1, 10.0)
COARSE_ELEVATION = np.array([-12.0, 0.0, 12.0])
COARSE_DISTANCE = np.array([1.0, 1.33, 1.67, 2.0])
COARSE_LOOK = [(lx, ly) for lx in (-7.0, 0.0, 7.0) for ly in (-7.0, 0.0, 7.0)]
#: units of the refinement's normalized parameters (orbit °, elevation °, distance ×, shift m, shift m, look °, °)
REFINE_SCALE = np.array([5.0, 4.0, 0.15, 0.04, 0.04, 3.0, 3.0])
LOW = np.array([-90.0, -25.0, 0.8, -0.2, -0.2, -15.0, -15.0])
HIGH = np.array([90.0, 25.0, 2.5, 0.2, 0.2, 15.0, 15.0])
#: robust loss: residuals (mean over channels, 0–255) are truncated here; the loss is their weighted mean over the
#: points the candidate camera sees, plus this much times the weight share it does not see (a camera moved away
#: from the scene must not win by seeing nothing, but points leaving the image are normal under a real shift)
TRUNCATE = 30.0
UNSEEN_COST = 10.0
#: blur passes of the reference's wide map, of the frame for the coarse stage and for the final refinement: the map
#: and the frame differ in resolution (and a moved camera in scale), so both are compared at a scale the 64-px
#: frame's aliasing and texture do not dominate
MAP_BLUR, COARSE_BLUR, FINE_BLUR = 2, 4, 2
#: the coverage grid (cells per side): coarse enough that the points of a subset fill every cell a camera sees
COVER = 8


@dataclass(frozen=True)
class Estimate:
    """The estimated displacement of one frame, the scene it was matched to and how well."""

    displacement: Displacement
    scene: int
    pixels: float       # how far the estimated warp moves the central grid, at the frame's resolution
    loss: float         # robust photometric loss at the estimate
    identity_loss: float
    seconds: float


def _blur(image: np.ndarray, passes: int) -> np.ndarray:
    """A cheap separable [1 2 1]/4 blur, ``passes`` times (edges replicated): widens the loss's basin."""
    out = np.asarray(image, np.float32)
    for _ in range(passes):
        p = np.pad(out, ((1, 1), (1, 1), (0, 0)), mode="edge")
        out = (p[:-2] + 2 * p[1:-1] + p[2:]) / 4
        out = (out[:, :-2] + 2 * out[:, 1:-1] + out[:, 2:]) / 4
    return out


def _projections(scene: SceneReference, size: tuple[int, int], vectors: np.ndarray) -> np.ndarray:
    """``(N, 3, 4)`` world → pixel projection of each displaced camera."""
    k = scene.view.intrinsics(size)
    out = np.empty((len(vectors), 3, 4))
    for i, v in enumerate(vectors):
        cam = Displacement.from_vector(v).apply(scene.view, scene.height)
        out[i] = k @ np.column_stack([cam.rot.T, -cam.rot.T @ cam.pos])
    return out


def _visible(depth: np.ndarray, x: np.ndarray, y: np.ndarray, ok: np.ndarray, size: tuple[int, int],
             cells: int = 32, slack: float = 0.05) -> np.ndarray:
    """``(N, P)``: which projected reference points are not hidden behind another reference point in the candidate
    camera (a z-buffer on a ``cells``² raster): a point the clean camera sees may be hidden from the moved one — the
    floor behind the table's edge, the wall behind the arm — and its colour there is the occluder's."""
    h, w = size
    n = len(depth)
    cell = ((y * cells / h).astype(np.int64) * cells + (x * cells / w).astype(np.int64)) + \
        (np.arange(n) * cells * cells)[:, None]
    zbuf = np.full(n * cells * cells, np.inf)
    np.minimum.at(zbuf, cell[ok], depth[ok])
    return depth <= zbuf[cell] + slack


def _distinct_starts(grid: np.ndarray, losses: np.ndarray, n: int) -> list[int]:
    """The ``n`` best grid cells that are not neighbours of a better one (more than a grid step apart in orbit,
    elevation or distance): starts in different basins, not ``n`` corners of one."""
    steps = np.array([np.diff(COARSE_ORBIT)[0], np.diff(COARSE_ELEVATION)[0], np.diff(COARSE_DISTANCE)[0]])
    chosen: list[int] = []
    for i in np.argsort(losses):
        if all(np.any(np.abs(grid[i, :3] - grid[j, :3]) > steps * 1.01) for j in chosen):
            chosen.append(int(i))
        if len(chosen) == n:
            break
    return chosen


class DisplacementEstimator:
    """Direct alignment of a frame to a task's clean start view: each clean pixel's world point (the reference's
    ray-cast scene) is projected into a candidate displaced camera and the frame sampled there, compared with the
    clean mean frame under a truncated (robust) loss weighted by the stable pixels. A coarse grid over orbit,
    elevation, distance and look-away on a sparse, blurred set, then Nelder–Mead over all seven parts from the
    best cells on every point. The base then sees the table-plane homography of the estimate."""

    def __init__(self, reference: CanonReference, coarse_points: int = 1500, refine_points: int = 3000,
                 refine_starts: int = 4) -> None:
        self.reference, self.refine_starts = reference, refine_starts
        self._scenes = [self._prepare(s, coarse_points, refine_points) for s in reference.scenes]
        self._coarse = np.array([(o, e, d, 0.0, 0.0, lx, ly) for o in COARSE_ORBIT for e in COARSE_ELEVATION
                                 for d in COARSE_DISTANCE for lx, ly in COARSE_LOOK])

    @staticmethod
    def _prepare(scene: SceneReference, coarse_points: int, refine_points: int) -> dict[str, Any]:
        weight = scene.weight.ravel().astype(np.float64)
        keep = np.flatnonzero(weight > 0)
        points = np.vstack([scene.points.reshape(-1, 3)[keep].T.astype(np.float64), np.ones(len(keep))])
        mean = _blur(scene.mean, MAP_BLUR).reshape(-1, 3)[keep]
        rng = np.random.default_rng(0)  # a fixed, spatially uniform subset: the loss is a deterministic function

        def subset(n: int) -> dict[str, np.ndarray]:
            idx = np.sort(rng.choice(len(keep), size=min(n, len(keep)), replace=False))
            return {"points": points[:, idx], "mean": mean[idx], "weight": weight[keep][idx] / weight[keep][idx].sum()}

        return {"coarse": subset(coarse_points), "refine": subset(refine_points)}

    @staticmethod
    def _losses(image: np.ndarray, points: dict[str, np.ndarray], projections: np.ndarray) -> np.ndarray:
        """Robust loss of each candidate ``(N, 3, 4)`` projection: ``image`` sampled at the projected reference
        points, the truncated residual's weighted mean over those the candidate sees (unhidden), plus
        ``UNSEEN_COST`` times the share of the image's ``COVER`` × ``COVER`` cells no reference point lands in (a
        candidate must explain the whole frame, not a uniform corner of it)."""
        h, w = image.shape[:2]
        flat = image.reshape(-1, 3)
        q = projections @ points["points"]                                   # (N, 3, P)
        ok = q[:, 2] > 1e-6
        den = np.where(ok, q[:, 2], 1.0)
        x, y = q[:, 0] / den - 0.5, q[:, 1] / den - 0.5
        ok &= (x > -0.5) & (x < w - 0.5) & (y > -0.5) & (y < h - 0.5)
        x, y = np.clip(x, 0, w - 1), np.clip(y, 0, h - 1)
        x0, y0 = np.minimum(x.astype(np.int64), w - 2), np.minimum(y.astype(np.int64), h - 2)
        fx, fy = (x - x0)[..., None], (y - y0)[..., None]
        i = y0 * w + x0
        sample = ((flat[i] * (1 - fx) + flat[i + 1] * fx) * (1 - fy)
                  + (flat[i + w] * (1 - fx) + flat[i + w + 1] * fx) * fy)
        ok &= _visible(q[:, 2], x, y, ok, (h, w))
        residual = np.where(ok, np.minimum(np.abs(sample - points["mean"]).mean(axis=-1), TRUNCATE), 0.0)
        seen = ok @ points["weight"]
        cells = (y * COVER / h).astype(np.int64) * COVER + (x * COVER / w).astype(np.int64)
        covered = np.zeros((len(q), COVER * COVER), bool)
        rows, cols = np.nonzero(ok)
        covered[rows, cells[rows, cols]] = True
        return residual @ points["weight"] / np.maximum(seen, 1e-6) + UNSEEN_COST * (1.0 - covered.mean(axis=1))

    def candidates(self, prompt: str | None) -> list[int]:
        """The scenes to match: those whose instruction is the prompt, else all."""
        named = [i for i, s in enumerate(self.reference.scenes) if prompt and s.instruction == prompt]
        return named or list(range(len(self.reference.scenes)))

    def _coarse_losses(self, image: np.ndarray, index: int) -> np.ndarray:
        scene, points = self.reference.scenes[index], self._scenes[index]["coarse"]
        size = tuple(np.shape(image)[:2])
        return np.concatenate([self._losses(image, points, _projections(scene, size, chunk))
                               for chunk in np.array_split(self._coarse, max(1, len(self._coarse) // 200))])

    def loss(self, image: np.ndarray, index: int, vector: np.ndarray) -> float:
        """The refinement's loss of one displacement on a frame already as :meth:`estimate` prepares it."""
        scene, points = self.reference.scenes[index], self._scenes[index]["refine"]
        return float(self._losses(image, points, _projections(scene, tuple(np.shape(image)[:2]),
                                                              np.asarray(vector)[None]))[0])

    def estimate(self, image: np.ndarray, prompt: str | None = None) -> Estimate:
        from scipy.optimize import minimize

        start_time = time.perf_counter()
        sharp, blurred = _blur(image, FINE_BLUR), _blur(image, COARSE_BLUR)
        best: tuple[float, int, np.ndarray] | None = None
        for index in self.candidates(prompt):
            coarse = self._coarse_losses(blurred, index)
            for start in _distinct_starts(self._coarse, coarse, self.refine_starts):
                z = self._coarse[start] / REFINE_SCALE
                for frame, step in ((blurred, 1.0), (sharp, 0.3)):  # coarse to fine
                    simplex = np.vstack([z, z + step * np.eye(len(z))])
                    result = minimize(lambda v, f=frame, i=index: self.loss(f, i, np.clip(v * REFINE_SCALE, LOW, HIGH)),
                                      z, method="Nelder-Mead", options={"maxfev": 300, "xatol": 0.02, "fatol": 1e-3,
                                                                        "initial_simplex": simplex})
                    z = result.x
                if best is None or result.fun < best[0]:
                    best = (float(result.fun), index, np.clip(z * REFINE_SCALE, LOW, HIGH))
        if best is None:
            raise R2AInputError("canonicalize: the reference has no scenes")
        loss, index, vector = best
        identity = self.loss(sharp, index, Displacement().vector())
        if identity <= loss:
            loss, vector = identity, Displacement().vector()
        scene, displacement = self.reference.scenes[index], Displacement.from_vector(vector)
        size = tuple(np.shape(image)[:2])
        moved = pixel_displacement(plane_homography(scene.view, displacement.apply(scene.view, scene.height),
                                                    scene.height, size), size)
        return Estimate(displacement, index, moved, loss, identity, time.perf_counter() - start_time)



# ------------------------------------------------------------------------------------------------- the policies

class _ViewWarpingPolicy:
    """``base`` seeing its ``camera`` image warped by a map decided at the episode's first frame (:meth:`_first_frame`
    sets ``_warp`` and ``_report``); every reply carries the report under ``canonicalize``."""

    KIND = ""

    def __init__(self, base: Policy, camera: str = CAMERA) -> None:
        self.base, self.camera = base, camera
        self.action_space = getattr(base, "action_space", None)
        self._warp: WarpMap | None = None
        self._report: dict[str, Any] = {}

    def _settings_metadata(self) -> dict[str, Any]:
        return {}

    @property
    def metadata(self) -> dict[str, Any]:
        base = getattr(self.base, "metadata", None) or {}
        return {**base, "canonicalize": {"kind": self.KIND, "camera": self.camera, **self._settings_metadata()}}

    @property
    def n_action_steps(self) -> int | None:
        return getattr(self.base, "n_action_steps", None)

    def reset(self) -> None:
        self._warp, self._report = None, {}
        self.base.reset()

    def close(self) -> None:
        close = getattr(self.base, "close", None)
        if callable(close):
            close()

    def _first_frame(self, image: np.ndarray, prompt: str | None) -> None:
        raise NotImplementedError

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        key = image_key(self.camera)
        image = obs.get(key)
        if image is not None and np.ndim(image) == 3 and np.shape(image)[-1] == 3:
            image = np.asarray(image).astype(np.uint8, copy=False)
            if not self._report:
                self._first_frame(image, obs.get(PROMPT))
            if self._warp is not None and self._warp.size == tuple(image.shape[:2]):
                obs = {**obs, key: self._warp.apply(image)}
        elif not self._report:
            self._report = {"active": False, "reason": f"no {key} image"}
        reply = self.base.infer(obs)
        out = dict(reply) if isinstance(reply, dict) else {"actions": reply}
        out["canonicalize"] = dict(self._report)
        return out


class CanonicalizedPolicy(_ViewWarpingPolicy):
    """``base`` seeing the agentview image warped back to the training view by the displacement estimated from the
    episode's first frame (:class:`DisplacementEstimator`), applied to every frame of the episode; gated: frames
    whose estimated warp moves the image by no more than the threshold (fitted on clean training frames) pass
    unchanged. A failed estimate never fails the episode: the images pass through and the reply says why."""

    KIND = "estimated"

    def __init__(self, base: Policy, reference: CanonReference, settings: CanonicalizeSettings | None = None,
                 camera: str = CAMERA) -> None:
        super().__init__(base, camera)
        self.reference = reference
        self.settings = settings or CanonicalizeSettings(enabled=True)
        self.threshold = float(self.settings.threshold_px if self.settings.threshold_px is not None
                               else reference.threshold_px)
        self.estimator = DisplacementEstimator(reference)

    def _settings_metadata(self) -> dict[str, Any]:
        return {"threshold_px": self.threshold}

    def _first_frame(self, image: np.ndarray, prompt: str | None) -> None:
        """Estimate the episode's displacement and decide whether to warp (once per episode)."""
        try:
            est = self.estimator.estimate(image, prompt)
            if not np.isfinite(est.pixels) or not np.all(np.isfinite(est.displacement.vector())):
                self._report = {"active": False, "reason": "non-finite estimate"}
                return
            report = {"pixels": round(est.pixels, 2), "estimate": est.displacement.as_dict(),
                      "scene": self.reference.scenes[est.scene].task, "loss": round(est.loss, 3),
                      "identity_loss": round(est.identity_loss, 3), "seconds": round(est.seconds, 3)}
            if est.pixels <= self.threshold:
                self._report = {"active": False, "reason": "below threshold", **report}
                return
            scene = self.reference.scenes[est.scene]
            size = tuple(np.shape(image)[:2])
            self._warp = canonical_warp(est.displacement.apply(scene.view, scene.height), scene.view, scene.height,
                                        size)
            self._report = {"active": True, **report}
        except Exception as err:  # noqa: BLE001 — a view estimate must never fail an episode; the reply says why
            log.warning("canonicalize: estimate failed, images pass through: %s", err)
            self._warp, self._report = None, {"active": False, "reason": f"failed: {type(err).__name__}: {err}"}


class OracleCanonicalizedPolicy(_ViewWarpingPolicy):
    """NOT deployable, a headroom diagnostic: ``base`` seeing the agentview image warped from the TRUE shifted pose
    to the clean one, both read from the simulator (privileged).

    The clean pose is read when the policy is built and again at every ``reset()``: the benchmark builds a policy
    per episode and the rollout loop resets it right after the simulator's reset and before the shift hooks move
    the camera (``demos.rollout.run_episode``), and every episode's shift is undone when it ends. The shifted pose
    is read at the episode's first query (the camera factor does not move the camera within an episode)."""

    KIND = "oracle"

    def __init__(self, base: Policy, sim: Any, camera: str = CAMERA) -> None:
        super().__init__(base, camera)
        self.sim = sim
        self.clean = camera_view_of(sim, camera)

    def reset(self) -> None:
        self.clean = camera_view_of(self.sim, self.camera)
        super().reset()

    def _first_frame(self, image: np.ndarray, prompt: str | None) -> None:
        size = tuple(np.shape(image)[:2])
        shifted = camera_view_of(self.sim, self.camera)
        height = float(self.sim.table_height())
        homography = plane_homography(shifted, self.clean, height, size)
        moved = pixel_displacement(homography, size)
        if moved < 1e-6:
            self._report = {"active": False, "reason": "clean pose", "pixels": 0.0}
            return
        self._warp = canonical_warp(shifted, self.clean, height, size)
        self._report = {"active": True, "pixels": round(moved, 2)}


__all__ = ["CAMERA", "CameraView", "CanonReference", "CanonicalizeSettings", "CanonicalizedPolicy", "Displacement",
           "DisplacementEstimator", "Estimate", "OracleCanonicalizedPolicy", "SceneReference", "WarpMap",
           "camera_view_of", "canonical_warp", "load_reference", "pixel_displacement", "plane_homography",
           "save_reference", "scene_reference"]
