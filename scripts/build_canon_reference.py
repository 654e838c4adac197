"""Build r2a/assets/r2a_canon_reference/: per built-in task, a wide view of its clean start scene from the
training camera's position (fovy 100°, 96 px: what any displaced camera of the camera factor may see, with the
world point under each pixel by MuJoCo ray casting) averaged over the clean start frames of training seeds 0..15,
the training camera's calibration, and the gate threshold fitted on clean 64-px start frames of seeds 16..23.

    MUJOCO_GL=egl PYOPENGL_PLATFORM=egl .venv/bin/python scripts/build_canon_reference.py [--out PATH]
"""
import argparse
import json
import logging
import time

import numpy as np

from r2a.observation.canonicalize import (
    CAMERA,
    CanonReference,
    DisplacementEstimator,
    load_reference,
    save_reference,
    scene_reference,
)
from r2a_core.camera import CameraView, camera_view_of
from sim.envs.backends import make_sim
from sim.envs.robosuite_env import SimConfig

TASKS = ["Lift", "Stack", "PickPlaceCan", "StackThree"]
REF_SEEDS, FIT_SEEDS = range(0, 16), range(16, 24)
MAP_FOVY, MAP_PX = 90.0, 128


def scene_points(sim, view, size: tuple[int, int]) -> np.ndarray:
    """(H, W, 3) world point that each pixel of ``view`` sees, by MuJoCo ray casting; NaN where it sees nothing."""
    import mujoco

    h, w = size
    kinv = np.linalg.inv(view.intrinsics(size))
    points = np.full((h, w, 3), np.nan, np.float32)
    geomid = np.zeros(1, np.int32)
    for r in range(h):
        for c in range(w):
            d = view.rot @ (kinv @ np.array([c + 0.5, r + 0.5, 1.0]))
            d = d / np.linalg.norm(d)
            dist = mujoco.mj_ray(sim.mj_model, sim.mj_data, view.pos, d, None, 1, -1, geomid)
            if dist > 0:
                points[r, c] = view.pos + dist * d
    return points


def wide_scene(task: str, seeds=REF_SEEDS):
    """A task's reference: the wide start frames of ``seeds`` and the points of the first one's scene."""
    sim = make_sim(SimConfig(task=task, image_size=MAP_PX))
    model, cam = sim.mj_model, sim.sim.model.camera_name2id(CAMERA)
    clean = camera_view_of(sim)
    fovy = float(model.cam_fovy[cam])
    try:
        model.cam_fovy[cam] = MAP_FOVY
        frames = np.stack([sim.reset(s)[f"images/{CAMERA}"] for s in seeds])
        sim.reset(seeds[0])
        points = scene_points(sim, CameraView(clean.pos, clean.rot, MAP_FOVY), (MAP_PX, MAP_PX))
    finally:
        model.cam_fovy[cam] = fovy
    scene = scene_reference(task, sim.instruction, clean, sim.table_height(), frames, points)
    sim.close()
    return scene


def clean_frames(task: str, seeds=FIT_SEEDS):
    sim = make_sim(SimConfig(task=task, image_size=64))
    out = [(task, s, sim.reset(s)[f"images/{CAMERA}"], sim.instruction) for s in seeds]
    sim.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="r2a/assets/r2a_canon_reference")
    ap.add_argument("--margin", type=float, default=1.5)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    # saved first, so that the threshold is fitted on the reference exactly as it is shipped (uint8, float16)
    save_reference(args.out, CanonReference([wide_scene(task) for task in TASKS], 1e9, {"threshold": "not fitted yet"}))
    scenes = load_reference(args.out).scenes
    est = DisplacementEstimator(CanonReference(scenes, 0.0, {}))
    clean = []
    for task in TASKS:
        for _, seed, image, prompt in clean_frames(task):
            t = time.perf_counter()
            e = est.estimate(image, prompt)
            clean.append(e.pixels)
            logging.info("%s %d: %.2f px %s %.2f s", task, seed, e.pixels, e.displacement.as_dict(),
                         time.perf_counter() - t)
    threshold = max(1.0, args.margin * max(clean))
    meta = {"tasks": TASKS, "reference_seeds": [REF_SEEDS.start, REF_SEEDS.stop - 1],
            "fit_seeds": [FIT_SEEDS.start, FIT_SEEDS.stop - 1], "image_size": 64, "camera": CAMERA,
            "map_fovy_deg": MAP_FOVY, "map_px": MAP_PX, "clean_pixels": [round(p, 3) for p in clean],
            "margin": args.margin, "built_by": "scripts/build_canon_reference.py"}
    save_reference(args.out, CanonReference(scenes, threshold, meta))
    logging.info("%s", json.dumps({"threshold_px": threshold, "clean_max_px": max(clean)}))


if __name__ == "__main__":
    main()
