"""What observation harmonization adds per frame: ``r2a bench perf harmonize``.

On one thread, per image size: the photometric detector (what every gated frame pays); each normalizer matched
per frame (``reference: frame``, ``mode: always``: hist, meanstd); the default ``reference: start`` — an episode's
first frame (the map estimated and applied) and every later frame (the map applied); and a gated frame that fires
with the defaults (detector + map) — p50/p99 ms per frame against the shipped statistics — beside the built-in
VLA's own query on the same image size, measured in the same run. Target: ≤ 0.5 ms per frame at 128 px.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

TARGET_MS_AT_128 = 0.5
#: (column, mode, normalizer, reference) timed per frame in steady state (an episode's later frames)
VARIANTS = (("frame: hist", "always", "hist", "frame"), ("frame: meanstd", "always", "meanstd", "frame"),
            ("start: later frame (map)", "always", "meanstd", "start"),
            ("gated frame that fires (detector + start map)", "gated", "meanstd", "start"))


def measure_harmonize_latency(sizes: tuple[int, ...] = (64, 128), frames: int = 300, warmup: int = 30,
                              seed: int = 0) -> dict[str, Any]:
    import torch

    from r2a.observation.harmonize import HarmonizedPolicy, HarmonizeSettings
    from r2a.vla.policy import BuiltinVLAPolicy
    from r2a.wrapper.config import resolve_path
    from r2a_core.visual_ood import load_image_stats, pooled_image_features

    torch.set_num_threads(1)
    stats = load_image_stats(resolve_path(HarmonizeSettings().image_stats))
    rng = np.random.default_rng(seed)
    vla = BuiltinVLAPolicy(threads=1)
    rows = []
    for size in sizes:
        image = _demo_like(stats.cameras["agentview"].histogram, size, rng)  # pixels drawn from the demos' colours
        camera = stats.cameras["agentview"]
        # each timed call binds this size's objects as default arguments (it runs within this iteration)
        row: dict[str, Any] = {"size": size, "detector": _time(
            lambda camera=camera, image=image: camera.score(pooled_image_features(image), photometric=True),
            frames, warmup)}
        for name, mode, normalizer, reference in VARIANTS:
            policy = HarmonizedPolicy(_Nothing(), stats, HarmonizeSettings(enabled=True, mode=mode,
                                                                           normalizer=normalizer, reference=reference))
            row[name] = _time(lambda policy=policy, image=image: policy.harmonize({"images/agentview": image}),
                              frames, warmup)
        first = HarmonizedPolicy(_Nothing(), stats, HarmonizeSettings(enabled=True, mode="always"))
        row["start: first frame (estimate + map)"] = _time(
            lambda first=first, image=image: (first.reset(), first.harmonize({"images/agentview": image})),
            frames, warmup)
        obs = {f"images/{cam}": rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for cam in vla.config.cameras}
        obs.update({"state/ee_pos": np.array([0.0, 0.0, 1.0]), "state/ee_quat": np.array([0.0, 1.0, 0.0, 0.0]),
                    "state/gripper": np.float32(1.0), "prompt": "pick up the red cube", "state/step": 0})
        row["base query"] = _time(lambda obs=obs: vla.infer(obs), max(frames // 3, 30), 10)
        rows.append(row)
    return {"rows": rows, "target_ms_at_128": TARGET_MS_AT_128, "machine": _machine()}


def _demo_like(histogram: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """An image whose per-channel values follow the demos' pooled histograms, smoothed so it is not pure noise."""
    img = np.stack([rng.choice(256, size=(size, size), p=h / h.sum()) for h in np.asarray(histogram)], axis=-1)
    return img.astype(np.uint8)


class _Nothing:
    def reset(self) -> None:
        return None

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {"actions": np.zeros((16, 7), np.float32)}


def _time(fn: Any, n: int, warmup: int) -> dict[str, float]:
    times = []
    for i in range(warmup + n):
        start = time.perf_counter()
        fn()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    ms = 1e3 * np.asarray(times)
    return {"p50": round(float(np.median(ms)), 4), "p99": round(float(np.percentile(ms, 99)), 4)}


def _machine() -> dict[str, Any]:
    import os
    import platform

    return {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "load_avg": list(os.getloadavg())}


def format_table(result: dict[str, Any]) -> str:
    keys = [k for k in result["rows"][0] if k != "size"]
    load = result["machine"]["load_avg"][0]
    lines = [f"Observation harmonization per frame (agentview), one thread — load {load:.2f}; "
             f"target ≤ {result['target_ms_at_128']} ms per frame at 128 px", "",
             "| px | " + " | ".join(f"{k} p50 / p99 ms" for k in keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for row in result["rows"]:
        cells = " | ".join(f"{row[k]['p50']:.3f} / {row[k]['p99']:.3f}" for k in keys)
        lines.append(f"| {row['size']} | {cells} |")
    return "\n".join(lines) + "\n"


__all__ = ["format_table", "measure_harmonize_latency"]
