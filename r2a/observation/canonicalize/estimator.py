"""The camera displacement of a frame, estimated against the clean training scenes of a
:class:`~r2a.observation.canonicalize.reference.CanonReference` (:class:`DisplacementEstimator`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from r2a.observation.canonicalize.reference import CanonReference, SceneReference
from r2a_core.camera import Displacement, pixel_displacement, plane_homography
from r2a_core.errors import R2AInputError

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


__all__ = ["DisplacementEstimator", "Estimate"]
