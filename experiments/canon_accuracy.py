"""Estimator accuracy on the benchmark's own first frames: for each (task, condition, episode) of
`configs/bench/headroom.yaml` with factors {camera: [1, 3]} and 4 episodes (seeds 90000..90003), the camera factor's
true displacement (the same draw as the benchmark's: ShiftHooks seeded by the episode's seed) against the estimate
of `canonicalize:builtin` from the first frame; errors as the table-plane homography's mean pixel error on the
image's central grid (64 px). Writes runs/canon/accuracy.json.

    MUJOCO_GL=egl PYOPENGL_PLATFORM=egl .venv/bin/python experiments/canon_accuracy.py [LEVELS [EPISODES [OUT]]]

LEVELS is comma-separated (default 0,1,3; 0 = clean), EPISODES per task and level (default 4).
"""
import json
import sys

import numpy as np

from r2a.observation.canonicalize import DisplacementEstimator, load_reference
from r2a_core.camera import Displacement, camera_view_of, pixel_displacement, plane_homography
from sim.envs.backends import make_sim
from sim.envs.robosuite_env import SimConfig
from sim.shifts import ShiftHooks

if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0)
TASKS = ["Lift", "Stack", "PickPlaceCan", "StackThree"]
LEVELS = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else [0, 1, 3]
EPISODES = int(sys.argv[2]) if len(sys.argv) > 2 else 4
OUT = sys.argv[3] if len(sys.argv) > 3 else "runs/canon/accuracy.json"
ref = load_reference("r2a/assets/r2a_canon_reference")
est = DisplacementEstimator(ref)
rows = []
for task in TASKS:
    sim = make_sim(SimConfig(task=task, image_size=64))
    for level in LEVELS:
        for ep in range(EPISODES):
            seed = 90000 + ep
            obs = sim.reset(seed)
            clean = camera_view_of(sim)
            h = sim.table_height()
            hooks = ShiftHooks("camera", level) if level else None
            if hooks:
                obs = hooks.after_reset(sim) or sim.observe()
                obs = hooks.transform(obs)
            true = Displacement.from_params(hooks.params) if hooks else Displacement()
            e = est.estimate(obs["images/agentview"], sim.instruction)
            scene = ref.scenes[e.scene]
            ht = plane_homography(clean, true.apply(clean, h), h, (64, 64))
            he = plane_homography(scene.view, e.displacement.apply(scene.view, scene.height), scene.height, (64, 64))
            row = {"task": task, "level": level, "episode": ep, "seed": seed, "true": true.as_dict(),
                   "estimate": e.displacement.as_dict(), "scene": scene.task,
                   "true_px": round(pixel_displacement(ht, (64, 64)), 2), "estimated_px": round(e.pixels, 2),
                   "error_px": round(pixel_displacement(np.linalg.inv(ht) @ he, (64, 64)), 2),
                   "active": bool(e.pixels > ref.threshold_px), "seconds": round(e.seconds, 2)}
            rows.append(row)
            print(json.dumps(row))
            if hooks:
                hooks.close()
    sim.close()
json.dump({"threshold_px": ref.threshold_px, "rows": rows}, open(OUT, "w"), indent=1)
