"""Offline: does harmonizing a shifted image bring a frozen policy's chunk back to its chunk on the clean image?

``r2a policy harmonize-check``: on demo files re-rendered under shifts (``r2a demos rerender --shift``: the same
recorded states, other pictures), every episode is replayed frame by frame through each harmonization variant —
so the start estimate sees the episode's first frame and the detector's hysteresis runs as it would — and every
``stride``-th frame's chunk is compared with the policy's chunk on the clean render of the same state: commanded
translation (mm) and rotation (degrees) per executed step, 95 % intervals over episodes. Zero on clean frames is
what no harmonization scores; a variant that moves clean chunks costs that much where nothing was wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from r2a.observation.harmonize import HarmonizedPolicy, HarmonizeSettings
from r2a_core.errors import R2AInputError

#: the variants compared: name → settings (None: the raw images)
VARIANTS: dict[str, HarmonizeSettings | None] = {
    "none": None,
    "frame hist": HarmonizeSettings(enabled=True, mode="always", normalizer="hist", reference="frame"),
    "frame meanstd": HarmonizeSettings(enabled=True, mode="always", normalizer="meanstd", reference="frame"),
    "start hist": HarmonizeSettings(enabled=True, mode="always", normalizer="hist", reference="start"),
    "start meanstd (always)": HarmonizeSettings(enabled=True, mode="always", normalizer="meanstd", reference="start"),
    "gated (defaults)": HarmonizeSettings(enabled=True),
}


def harmonize_check(policy_spec: str, stats_path: str | Path, clean: str | Path, shifted: Sequence[str | Path],
                    episodes: int = 12, stride: int = 4, steps: int = 8, seed: int = 0,
                    n_boot: int = 2000) -> list[dict[str, Any]]:
    """Rows per (condition, variant): frames, episodes, the chunk's deviation from the clean-render chunk
    (``trans_mm``, ``rot_deg``: [mean, lo, hi]) and the share of frames harmonized (``active``)."""
    from demos.image_stats import training_split_renders
    from r2a.policies import make_policy
    from r2a_core.visual_ood import load_image_stats
    from training.retriever.offline import mean_ci
    from training.retriever.queries import chunks_of_observations

    if episodes < 1 or stride < 1 or steps < 1:
        raise R2AInputError(f"--episodes, --stride and --steps must be >= 1, got {episodes}, {stride}, {steps}")
    stats = load_image_stats(stats_path)
    policy = make_policy(policy_spec, None, seed)
    clean_eps = training_split_renders([clean])[:episodes]
    reference = chunks_of_observations(policy, [o for ep in clean_eps for o in _replay(ep, None, stats, stride)[0]])
    episode_of = np.concatenate([np.full(len(range(0, len(ep), stride)), i) for i, ep in enumerate(clean_eps)])
    conditions = [("clean", clean_eps)] + [
        (_condition(p), _paired(training_split_renders([p])[:episodes], clean_eps, p)) for p in shifted]
    fitted = bool(stats.thresholds) and all(v is not None for v in stats.thresholds.values())
    variants = {name: s for name, s in VARIANTS.items() if fitted or s is None or s.mode != "gated"}
    rng, rows = np.random.default_rng(seed), []
    for condition, eps in tqdm(conditions, desc="harmonize check", unit="condition"):
        for name, settings in variants.items():
            replays = [_replay(ep, settings, stats, stride) for ep in eps]
            chunks = chunks_of_observations(policy, [o for obs, _ in replays for o in obs])
            errors = np.array([_deviation(a, b, steps) for a, b in zip(chunks, reference)])
            rows.append({"condition": condition, "variant": name, "frames": int(len(errors)), "episodes": len(eps),
                         "trans_mm": mean_ci(errors[:, 0], episode_of, rng, n_boot),
                         "rot_deg": mean_ci(errors[:, 1], episode_of, rng, n_boot),
                         "active": round(float(np.mean([a for _, act in replays for a in act])), 3)})
    return rows


def _condition(path: str | Path) -> str:
    from demos.dataset import episode_condition, load_episodes

    eps = load_episodes(path)
    names = {episode_condition(ep) for ep in eps}
    if len(names) != 1:
        raise R2AInputError(f"{path}: expected the episodes of one shift condition, got {sorted(names)}")
    return names.pop()


def _paired(shifted: list, clean: list, path: str | Path) -> list:
    """``shifted`` checked to be a re-render of ``clean``: the same episodes, states and lengths, in order."""
    if len(shifted) != len(clean) or any(len(a) != len(b) or not np.allclose(a.ee_pos, b.ee_pos, atol=1e-6)
                                         for a, b in zip(shifted, clean)):
        raise R2AInputError(f"{path}: not a re-render of the clean file's episodes (r2a demos rerender SOURCE "
                            "--shift ...): episode count, lengths or recorded states differ")
    return shifted


def _replay(episode: Any, settings: HarmonizeSettings | None, stats: Any, stride: int) -> tuple[list, list]:
    """Every ``stride``-th observation of ``episode`` as the base would receive it, and per frame whether any
    camera was harmonized; every frame passes through the harmonizer, in order, from a reset."""
    from training.retriever.queries import frame_observation

    harmonizer = None if settings is None else HarmonizedPolicy(_NoBase(), stats, settings)
    observations, active = [], []
    for t in range(len(episode)):
        obs = frame_observation(episode, t)
        if harmonizer is not None:
            obs, report = harmonizer.harmonize(obs)
            active.append(any(r.get("active", False) for r in report.values()))
        else:
            active.append(False)
        if t % stride == 0:
            observations.append(obs)
    return observations, active


def _deviation(chunk: np.ndarray, clean_chunk: np.ndarray, steps: int) -> tuple[float, float]:
    from training.retriever.offline import chunk_errors

    return chunk_errors(np.asarray(chunk)[:steps], np.asarray(clean_chunk)[:steps])


class _NoBase:
    """Harmonization is exercised alone: the base's chunks are computed in batches afterwards."""

    def reset(self) -> None:
        return None

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("harmonize-check calls harmonize(), never infer()")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """Translation deviation (mm, [95 % CI]) per condition (rows) and variant (columns); share harmonized."""
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    lines = ["| condition | " + " | ".join(variants) + " |", "|---" * (len(variants) + 1) + "|"]
    for condition in dict.fromkeys(r["condition"] for r in rows):
        cells = []
        for v in variants:
            r = next(r for r in rows if r["condition"] == condition and r["variant"] == v)
            m, lo, hi = r["trans_mm"]
            cells.append(f"{m:.1f} [{lo:.1f}, {hi:.1f}]" + (f" ({r['active']:.0%})" if v != "none" else ""))
        lines.append(f"| {condition} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["VARIANTS", "harmonize_check", "markdown_table"]
