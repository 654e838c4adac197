"""The view warp's gate, measured on training seeds (issue 49, lever 1): for each built-in task, training seeds
40000..40000+N-1 and every condition of the image factors (clean; camera, light, background, noise at levels 1-3,
drawn exactly as the benchmark draws them), the first frame's displacement estimate (pixels, the best loss, the
identity's loss) and the photometric detector's score on it (harmonization's agentview statistics). Appends one JSON
line per frame, a condition at a time (run it again to resume: conditions already in the file are skipped);
`experiments/canon_gate_rows.py --fit ROWS.jsonl` then prints how candidate gates split camera frames
(should warp) from the others (should not).

    MUJOCO_GL=egl PYOPENGL_PLATFORM=egl .venv/bin/python experiments/canon_gate_rows.py runs/canon/gate_rows.jsonl 12
    .venv/bin/python experiments/canon_gate_rows.py --fit runs/canon/gate_rows.jsonl
"""
import json
import sys
from pathlib import Path

import numpy as np

TASKS = ["Lift", "Stack", "PickPlaceCan", "StackThree"]
CONDITIONS = [("clean", 0)] + [(f, lv) for f in ("camera", "light", "background", "noise") for lv in (1, 2, 3)]
SEED0 = 40000


def collect(out: str, episodes: int) -> None:
    from r2a.observation.canonicalize import DisplacementEstimator, load_reference
    from r2a_core.visual_ood import load_image_stats
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig
    from sim.shifts import ShiftHooks

    done = {(r["task"], r["factor"], r["level"]) for r in _read(out)}
    reference = load_reference("r2a/assets/r2a_canon_reference")
    estimator = DisplacementEstimator(reference)
    stats = load_image_stats("r2a/assets/r2a_harmonize_stats.json")
    for task in TASKS:
        sim = make_sim(SimConfig(task=task, image_size=64))
        for factor, level in CONDITIONS:
            if (task, factor, level) in done:
                continue
            rows = []
            for ep in range(episodes):
                seed = SEED0 + ep
                obs = sim.reset(seed)
                hooks = ShiftHooks(None if factor == "clean" else factor, level)
                obs = hooks.after_reset(sim) or obs
                obs = hooks.transform({**obs, "state/step": 0})
                image = np.asarray(obs["images/agentview"])
                est = estimator.estimate(image, sim.instruction)
                rows.append({"task": task, "factor": factor, "level": level, "seed": seed,
                             "pixels": float(est.pixels), "loss": float(est.loss),
                             "identity_loss": float(est.identity_loss),
                             "photometric": float(stats.photometric_score("agentview", image)),
                             "threshold": float(stats.thresholds["agentview"]),
                             "warp_threshold": float(reference.threshold_px)})
                hooks.close()
            with open(out, "a") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in rows)
            print(task, factor, level, flush=True)
        sim.close()


def _read(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()] if Path(path).exists() else []


def fit(path: str) -> None:
    rows = _read(path)
    camera = [r for r in rows if r["factor"] == "camera"]
    other = [r for r in rows if r["factor"] != "camera"]

    def gain(r):
        return (r["identity_loss"] - r["loss"]) / max(r["identity_loss"], 1e-9)

    def rule(r, margin, veto):
        vetoed = veto and r["photometric"] > r["threshold"]
        return r["pixels"] > r["warp_threshold"] and gain(r) >= margin and not vetoed

    print(f"{len(camera)} camera frames, {len(other)} others")
    for veto in (False, True):
        for margin in (0.0, 0.02, 0.05, 0.08, 0.1, 0.15, 0.2, 0.3):
            rec = np.mean([rule(r, margin, veto) for r in camera])
            false = {f: np.mean([rule(r, margin, veto) for r in other if r["factor"] == f])
                     for f in ("clean", "light", "background", "noise")}
            print(f"veto={veto!s:5} margin={margin:.2f}: camera warped {rec:.2f}; others "
                  + ", ".join(f"{f} {v:.2f}" for f, v in false.items()))
    gains = {f: np.percentile([gain(r) for r in rows if r["factor"] == f and r["pixels"] > r["warp_threshold"]]
                              or [0], [50, 90, 100]).round(3).tolist() for f in ("camera", "light", "background",
                                                                                   "noise", "clean")}
    print("gain over the identity where pixels > threshold (p50, p90, max):", gains)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    if sys.argv[1] == "--fit":
        fit(sys.argv[2])
    else:
        collect(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12)
