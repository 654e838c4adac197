"""The canonical-view reference (an asset, ``r2a.canon.reference`` v1): per task a wide clean start view, its camera
calibration and table height, the world point each pixel sees, and the gate's pixel threshold
(``r2a/assets/r2a_canon_reference/``, built by ``scripts/build_canon_reference.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from r2a_core.camera import CameraView
from r2a_core.files import read_manifest_json

REFERENCE_FORMAT, REFERENCE_VERSION = "r2a.canon.reference", 1
DEFAULT_REFERENCE = "r2a/assets/r2a_canon_reference"


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
    """Read a reference written by :func:`save_reference`; another format or version is refused."""
    path = Path(path)
    meta = read_manifest_json(path, "manifest.json", REFERENCE_FORMAT, "version", (REFERENCE_VERSION,),
                              "a view-canonicalization reference",
                              "build one with scripts/build_canon_reference.py (docs/experiments/canonicalize.md)")
    scenes = [SceneReference(s["task"], s["instruction"],
                             CameraView(np.array(s["pos"]), np.array(s["rot"]), float(s["fovy_deg"])),
                             float(s["height"]), np.load(path / f"{i}_mean.npy").astype(np.float32),
                             np.load(path / f"{i}_points.npy").astype(np.float32),
                             np.load(path / f"{i}_weight.npy").astype(np.float32))
              for i, s in enumerate(meta["scenes"])]
    return CanonReference(scenes, float(meta["threshold_px"]), meta)


__all__ = ["DEFAULT_REFERENCE", "REFERENCE_FORMAT", "REFERENCE_VERSION", "CanonReference", "SceneReference",
           "load_reference", "save_reference", "scene_reference"]
