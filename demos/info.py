"""A JSON-ready summary of a demonstration source, read without decoding images."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from demos.dataset import load_episodes, source_kind


def summarize(path: str | Path) -> dict[str, Any]:
    """Episodes, successes, frames, tasks, instructions, cameras with image shapes, action dimension."""
    kind = source_kind(path)
    episodes = load_episodes(path, load_images=False)
    cameras: dict[str, list[int]] = {}
    for ep in episodes:
        cameras.update(ep.meta.get("image_shapes", {}))
    lengths = [len(ep) for ep in episodes]
    return {
        "path": str(path),
        "format": kind,
        "episodes": len(episodes),
        "successes": sum(int(ep.success) for ep in episodes),
        "frames": int(sum(lengths)),
        "episode_length": {"min": min(lengths), "max": max(lengths), "mean": round(sum(lengths) / len(lengths), 2)},
        "tasks": dict(Counter(ep.task for ep in episodes)),
        "instructions": sorted({ep.instruction for ep in episodes}),
        "cameras": cameras,
        "action_dim": int(episodes[0].actions.shape[1]),
        "env_args": episodes[0].meta.get("env_args", {}),
        "perturbed": _perturbation_summary(episodes),
    }


def _perturbation_summary(episodes) -> dict[str, Any]:
    """How many episodes were recorded with a DART-style disturbance (``r2a demos collect --perturb-*``)."""
    perturbed = [ep.meta["perturbation"] for ep in episodes if "perturbation" in ep.meta]
    settings = {json.dumps({k: v for k, v in p.items() if k != "forced_drops_at"}, sort_keys=True)
                for p in perturbed}
    return {"episodes": len(perturbed),
            "forced_drops": sum(len(p.get("forced_drops_at", [])) for p in perturbed),
            "settings": [json.loads(text) for text in sorted(settings)]}

