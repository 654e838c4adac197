"""Observation harmonization: a policy wrapper that makes camera images look like the demonstrations' before the
base sees them — only when a visual-OOD detector says they do not.

R2A corrects actions with kinematic priors and cannot see that the pictures are off; a global photometric shift
(light, a recoloured background) is undone well by matching each image's per-channel statistics to the
demonstrations', but the same matching hurts where the image is in distribution or the shift is geometric. So:

* **detector** (:mod:`r2a_core.visual_ood`, one implementation with the learned gate's image signal): per camera
  and frame, how *photometrically* unlike the demos the image is (the embedding's colour statistics); the
  threshold is fitted on training-split renders so that it fires under light and background shifts and not on
  clean frames or under geometric shifts (``r2a demos image-stats --fit-clean ... --fit-shifted ...``) and is
  stored with the statistics;
* **hysteresis**: a camera turns harmonization on when its score exceeds the threshold and off only when it falls
  below ``release`` × the threshold, so it does not flicker within an episode;
* **normalizers** (per camera, 256-entry lookup tables per channel): ``hist`` — per-channel histogram matching;
  ``meanstd`` — per-channel mean and standard deviation (an affine map), cheaper and gentler;
* **reference**: ``start`` (default) — the shift is estimated once per episode, from its first frame against the
  start reference of the demo scene it resembles most (the demos' first frames: same scene, same start pose), and
  that one map is applied to every frame; ``frame`` — every frame is matched to the demos' pooled statistics over
  all frames. Matching each frame on its own also "corrects" the natural changes of an episode (a wrist camera
  close to the table, then above it) — on the training split's clean held-out demos that moved the frozen VLA's
  chunk far more than the start estimate does (docs/experiments/harmonize.md);
* ``mode``: ``gated`` (the above), ``always``, ``never`` (for ablations).

:class:`HarmonizedPolicy` is a policy like every other: it transforms ``images/<camera>`` of each observation and
calls the base; its reply carries ``harmonize`` (per camera: score, active).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy
from r2a_core.types import image_key
from r2a_core.visual_ood import CameraStats, ImageStats, channel_histograms, histogram_moments, pooled_image_features

MODES = ("gated", "always", "never")
NORMALIZERS = ("hist", "meanstd")
REFERENCES = ("start", "frame")


@dataclass(frozen=True)
class HarmonizeSettings:
    """How a base policy's observations are harmonized (``harmonize:`` in an R2A config)."""

    enabled: bool = False
    """harmonize the base's observations (R2A config only; ``--policy harmonize:BASE`` always does)"""
    image_stats: str = "r2a/assets/r2a_harmonize_stats.json"
    """the demos' image statistics with the detector's fitted threshold (r2a demos image-stats --fit-clean ...
    --fit-shifted ...)"""
    mode: Literal["gated", "always", "never"] = "gated"
    """gated: only while the detector fires; always / never: ablations"""
    normalizer: Literal["hist", "meanstd"] = "meanstd"
    """hist: per-channel histogram matching; meanstd: per-channel mean and standard deviation"""
    reference: Literal["start", "frame"] = "start"
    """start: one map per episode, from its first frame to the demos' first frames; frame: each frame to all demo
    frames"""
    release: float = 0.5
    """hysteresis: a firing camera turns off below release × threshold"""


def match_histogram_lut(image: np.ndarray, target_cdf: np.ndarray) -> np.ndarray:
    """Per-channel lookup tables ``(3, 256)`` mapping ``image``'s value distribution onto ``target_cdf`` (3, 256)."""
    luts = np.empty((3, 256), np.uint8)
    n = image.shape[0] * image.shape[1]
    for c in range(3):
        cdf = np.cumsum(np.bincount(image[..., c].ravel(), minlength=256)) / n
        luts[c] = np.clip(np.searchsorted(target_cdf[c], cdf - 1e-9, side="left"), 0, 255)
    return luts


def apply_luts(image: np.ndarray, luts: np.ndarray) -> np.ndarray:
    out = np.empty_like(image)
    for c in range(3):
        out[..., c] = luts[c][image[..., c]]
    return out


def mean_std_lut(image: np.ndarray, target_mean: np.ndarray, target_std: np.ndarray) -> np.ndarray:
    """Per-channel lookup tables ``(3, 256)`` of the affine map taking ``image``'s (uint8) mean and standard deviation
    to the target's (0–255 units); the statistics come from each channel's 256-bin histogram (no float image)."""
    mean, std = histogram_moments(channel_histograms(image))
    levels = np.arange(256.0)
    return np.clip((levels[None, :] - mean[:, None]) * (np.asarray(target_std) / std)[:, None]
                   + np.asarray(target_mean)[:, None] + 0.5, 0, 255).astype(np.uint8)


def match_mean_std(image: np.ndarray, target_mean: np.ndarray, target_std: np.ndarray) -> np.ndarray:
    """``image`` mapped per channel to the target mean and standard deviation (see :func:`mean_std_lut`)."""
    return apply_luts(image, mean_std_lut(image, target_mean, target_std))


@dataclass
class CameraHarmonizer:
    """One camera: its demo statistics, the detector's threshold, the normalizer, and per episode the hysteresis
    state and (reference ``start``) the map estimated from the episode's first frame."""

    stats: CameraStats
    threshold: float
    normalizer: str
    release: float
    reference: str = "start"
    active: bool = False
    episode_luts: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.reference == "start" and not self.stats.starts:
            raise R2AInputError("harmonize (reference start): the image stats have no start references (format "
                                "v1); recompute them with 'r2a demos image-stats' or use reference frame")
        hist = np.asarray(self.stats.histogram, np.float64)
        self.cdf = np.cumsum(hist, axis=1) / np.maximum(hist.sum(axis=1, keepdims=True), 1e-12)
        self.mean, self.std = histogram_moments(hist)

    def reset(self) -> None:
        self.active, self.episode_luts = False, None

    def observe_first(self, image: np.ndarray) -> None:
        """Reference ``start``: estimate the episode's map from its first frame (once; later frames keep it)."""
        if self.reference == "start" and self.episode_luts is None:
            ref = self.stats.start_reference(image)
            if self.normalizer == "hist":
                self.episode_luts = match_histogram_lut(image, np.cumsum(ref.histogram, axis=1))
            else:
                self.episode_luts = mean_std_lut(image, ref.mean, ref.std)

    def update(self, score: float) -> bool:
        """Schmitt trigger on the score: on above the threshold, off below ``release`` × the threshold."""
        if not np.isfinite(score):
            return self.active
        if self.active:
            self.active = score >= self.release * self.threshold
        else:
            self.active = score > self.threshold
        return self.active

    def normalize(self, image: np.ndarray) -> np.ndarray:
        if self.reference == "start":
            self.observe_first(image)
            return apply_luts(image, self.episode_luts)
        if self.normalizer == "hist":
            return apply_luts(image, match_histogram_lut(image, self.cdf))
        return match_mean_std(image, self.mean, self.std)


class HarmonizedPolicy:
    """``base`` behind an observation normalizer gated by a visual-OOD detector (see the module docstring)."""

    def __init__(self, base: Policy, stats: ImageStats, settings: HarmonizeSettings | None = None) -> None:
        settings = settings or HarmonizeSettings(enabled=True)
        if settings.mode not in MODES or settings.normalizer not in NORMALIZERS or settings.reference not in REFERENCES:
            raise R2AInputError(f"harmonize: mode must be one of {', '.join(MODES)}, normalizer one of "
                                f"{', '.join(NORMALIZERS)} and reference one of {', '.join(REFERENCES)}; got "
                                f"{settings.mode!r}, {settings.normalizer!r}, {settings.reference!r}")
        missing = [cam for cam, th in stats.thresholds.items() if th is None]
        if settings.mode == "gated" and (not stats.thresholds or missing):
            raise R2AInputError("harmonize (gated): the image stats carry no fitted detector threshold; fit one "
                                "with 'r2a demos image-stats ... --fit-clean ... --fit-shifted ...' "
                                "or use mode always/never")
        self.base, self.settings = base, settings
        self.cameras = {cam: CameraHarmonizer(s, float(stats.thresholds.get(cam) or np.inf), settings.normalizer,
                                              settings.release, settings.reference) for cam, s in stats.cameras.items()}
        self.action_space = getattr(base, "action_space", None)

    @property
    def metadata(self) -> dict[str, Any]:
        base = getattr(self.base, "metadata", None) or {}
        return {**base, "harmonize": {"mode": self.settings.mode, "normalizer": self.settings.normalizer,
                                      "reference": self.settings.reference, "cameras": sorted(self.cameras)}}

    @property
    def n_action_steps(self) -> int | None:
        return getattr(self.base, "n_action_steps", None)

    def reset(self) -> None:
        for cam in self.cameras.values():
            cam.reset()
        self.base.reset()

    def close(self) -> None:
        close = getattr(self.base, "close", None)
        if callable(close):
            close()

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        obs, report = self.harmonize(obs)
        reply = self.base.infer(obs)
        out = dict(reply) if isinstance(reply, dict) else {"actions": reply}
        out["harmonize"] = report
        return out

    def harmonize(self, obs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The observation with its camera images normalized where this frame calls for it, and what was done."""
        out, report = dict(obs), {}
        for name, cam in self.cameras.items():
            key = image_key(name)
            image = obs.get(key)
            if image is None or np.ndim(image) != 3:
                continue
            image = np.asarray(image).astype(np.uint8, copy=False)
            if self.settings.mode == "never":
                report[name] = {"active": False}
                continue
            cam.observe_first(image)  # the episode's first frame, whether or not it fires
            score = None
            if self.settings.mode == "gated":
                score = cam.stats.score(pooled_image_features(image), photometric=True)
                active = cam.update(score)
            else:
                active = True
            if active:
                out[key] = cam.normalize(image)
            report[name] = {"active": bool(active), "score": None if score is None else round(float(score), 3)}
        return out, report


def summarize_harmonize(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One episode's harmonization summary from the ``result["harmonize"]`` dicts of its queries (for the
    benchmark records): how many queries, and the share of them harmonized per camera and on any camera."""
    cameras = sorted({cam for r in reports for cam in r})
    active = [{cam: bool((r.get(cam) or {}).get("active")) for cam in cameras} for r in reports]
    n = len(active)
    return {"queries": n,
            "active_share": {cam: (sum(a[cam] for a in active) / n if n else None) for cam in cameras},
            "any_active_share": sum(any(a.values()) for a in active) / n if n else None}


def trace_harmonize(steps: list[int], reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One episode's per-query harmonization trace: each query's control step and the cameras harmonized there."""
    return {"step": [int(s) for s in steps],
            "active": [sorted(cam for cam, r in report.items() if (r or {}).get("active")) for report in reports]}


__all__ = ["HarmonizeSettings", "HarmonizedPolicy", "MODES", "NORMALIZERS", "REFERENCES", "apply_luts",
           "match_histogram_lut", "match_mean_std", "mean_std_lut", "summarize_harmonize", "trace_harmonize"]
