"""``r2a demos image-stats``: the demonstrations' image statistics that visual-OOD scores are measured against."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.seeds import TEST_SEED_START
from r2a_core.visual_ood import (
    ImageStats,
    fit_camera_stats,
    fit_start_reference,
    fit_threshold,
    pooled_image_features,
    roc_auc,
    save_image_stats,
)

log = logging.getLogger(__name__)


def image_stats_from_files(paths: Sequence[str | Path], cameras: Sequence[str] = ("agentview",),
                           stride: int = 5) -> ImageStats:
    """Statistics of every ``stride``-th frame of ``cameras`` in the demo files (HDF5 or LeRobot v3), and per file
    the start reference of its episodes' first frames."""
    from demos.dataset import load_episodes
    from r2a_core.provenance import sha256_path

    if stride < 1:
        raise R2AInputError(f"--stride must be >= 1, got {stride}")
    episodes = [(str(p), load_episodes(p)) for p in paths]
    stats = {}
    for camera in cameras:
        frames = list(_frames(episodes, camera, stride))
        if not frames:
            raise R2AInputError(f"no '{camera}' images in {', '.join(str(p) for p in paths)}; record the demos "
                                "with cameras (r2a demos collect --cameras ...) or re-render them")
        stats[camera] = fit_camera_stats(frames)
        stats[camera].starts = [fit_start_reference([ep.images[camera][0] for ep in eps if camera in ep.images
                                                     and len(ep.images[camera])], path)
                                for path, eps in episodes if any(camera in ep.images for ep in eps)]
        log.info("image stats: %s from %d frames", camera, len(frames))
    sources = [{"path": path, "fingerprint": sha256_path(path), "episodes": len(eps)} for path, eps in episodes]
    return ImageStats(cameras=stats, sources=sources)


def _frames(episodes: list[tuple[str, list]], camera: str, stride: int) -> Iterator[np.ndarray]:
    for _, eps in episodes:
        for ep in eps:
            images = ep.images.get(camera)
            if images is not None:
                yield from images[::stride]


#: shift factors a photometric normalizer can undo: the detector should fire on these, not on the others
PHOTOMETRIC_FACTORS = ("light", "background")


def fit_detector(stats: ImageStats, clean: Sequence[str | Path], shifted: Sequence[str | Path],
                 stride: int = 5, photometric_factors: Sequence[str] = PHOTOMETRIC_FACTORS) -> dict[str, Any]:
    """Fit each camera's harmonization threshold into ``stats`` on training-split renders (seeds below 100000):
    the photometric score should exceed it under ``photometric_factors`` and not on clean frames or under the
    other factors (geometric or non-visual shifts, where normalizing hurts), each condition weighing the same in the
    fit however many frames it has. Returns the record: frames, the
    threshold, ROC-AUC of clean vs each condition and the share of each condition's frames that fire."""
    clean_eps, shifted_eps = training_split_renders(clean), training_split_renders(shifted)
    record: dict[str, Any] = {}
    for camera, cam_stats in stats.cameras.items():
        by_condition = _scores(cam_stats, _features_by_condition(camera, clean_eps, shifted_eps, stride),
                               photometric=True)
        positive = [c for c in by_condition if c.split(":")[0] in photometric_factors]
        if len(by_condition["clean"]) < 2 or not positive:
            raise R2AInputError(f"fitting the '{camera}' detector needs clean frames and frames under "
                                f"{' or '.join(photometric_factors)}")
        threshold = fit_threshold([v for c, v in by_condition.items() if c not in positive],
                                  [by_condition[c] for c in positive])  # every condition weighs the same
        stats.thresholds[camera] = threshold
        clean_scores = by_condition["clean"]
        record[camera] = {"score": "photometric", "threshold": round(threshold, 4), "positives": sorted(positive),
                          "frames": {c: int(len(v)) for c, v in sorted(by_condition.items())},
                          "roc_auc": {c: round(roc_auc(clean_scores, v), 4) for c, v in sorted(by_condition.items())
                                      if c != "clean"},
                          "fires": {c: round(float(np.mean(v > threshold)), 4)
                                    for c, v in sorted(by_condition.items())},
                          "fitted_on": {"clean": [str(p) for p in clean], "shifted": [str(p) for p in shifted]}}
    stats.detector = record
    return record


def evaluate_detector(stats: ImageStats, clean: Sequence[str | Path], shifted: Sequence[str | Path],
                      stride: int = 5, cameras: Sequence[str] | None = None) -> dict[str, Any]:
    """Score fitted statistics on renders they were not fitted on: per camera and shift condition, the frames,
    the ROC-AUC of clean vs that condition for the full embedding (the learned gate's image signal) and for the
    photometric score (harmonization's detector), and the share of frames over the stored threshold (or None);
    ``cameras``: only these of the stats' cameras."""
    unknown = sorted(set(cameras or ()) - set(stats.cameras))
    if unknown:
        raise R2AInputError(f"image stats have no camera {', '.join(unknown)}; they hold {', '.join(stats.cameras)}")
    clean_eps, shifted_eps = training_split_renders(clean), training_split_renders(shifted)
    record: dict[str, Any] = {}
    for camera, cam_stats in stats.cameras.items():
        if cameras and camera not in cameras:
            continue
        features = _features_by_condition(camera, clean_eps, shifted_eps, stride)
        full, colour = _scores(cam_stats, features, photometric=False), _scores(cam_stats, features, photometric=True)
        if len(full["clean"]) < 1 or len(full) < 2:
            raise R2AInputError(f"scoring the '{camera}' detector needs clean frames and shifted frames of it")
        threshold = stats.thresholds.get(camera)
        record[camera] = {condition: {
            "frames": int(len(full[condition])),
            "roc_auc_embedding": None if condition == "clean" else round(roc_auc(full["clean"], full[condition]), 4),
            "roc_auc_photometric": (None if condition == "clean"
                                    else round(roc_auc(colour["clean"], colour[condition]), 4)),
            "fires": None if threshold is None else round(float(np.mean(colour[condition] > threshold)), 4),
        } for condition in sorted(full, key=lambda c: (c != "clean", c))}
    return record


def training_split_renders(paths: Sequence[str | Path]) -> list:
    """The episodes of render files, refused if any was drawn with a test seed (the detector never sees them)."""
    from demos.dataset import episode_seeds, load_episodes

    episodes = [ep for p in paths for ep in load_episodes(p)]
    for ep in episodes:
        for seed in episode_seeds(ep):
            if seed >= TEST_SEED_START:
                raise R2AInputError(f"a render of seed {seed} (episode of {ep.task}): the detector is fitted and "
                                    f"scored on training-split seeds only (below {TEST_SEED_START})")
    return episodes


def _features_by_condition(camera: str, clean_eps: list, shifted_eps: list, stride: int) -> dict[str, list]:
    """condition ("clean", "light:3", ...) → the pooled features of every ``stride``-th ``camera`` frame under it."""
    from demos.dataset import episode_condition

    def features(ep: Any) -> list:
        return [pooled_image_features(f) for f in ep.images.get(camera, [])[::stride]]

    by_condition: dict[str, list] = {"clean": [x for ep in clean_eps for x in features(ep)]}
    for ep in shifted_eps:
        by_condition.setdefault(episode_condition(ep), []).extend(features(ep))
    return by_condition


def _scores(cam_stats: Any, features: dict[str, list], photometric: bool) -> dict[str, np.ndarray]:
    return {condition: np.array([cam_stats.score(x, photometric=photometric) for x in xs], dtype=np.float64)
            for condition, xs in features.items()}


def write_image_stats(paths: Sequence[str | Path], out: str | Path, cameras: Sequence[str] = ("agentview",),
                      stride: int = 5, clean: Sequence[str | Path] = (),
                      shifted: Sequence[str | Path] = ()) -> dict[str, Any]:
    """Statistics of the demo files (and, with ``clean`` and ``shifted`` renders, the detector's thresholds)."""
    stats = image_stats_from_files(paths, cameras, stride)
    detector = None
    if clean or shifted:
        if not (clean and shifted):
            raise R2AInputError("--fit-clean and --fit-shifted go together (clean and shifted renders)")
        detector = fit_detector(stats, clean, shifted, stride)
    save_image_stats(stats, out)
    return {"frames": {name: s.frames for name, s in stats.cameras.items()}, "detector": detector}


__all__ = ["evaluate_detector", "fit_detector", "image_stats_from_files", "training_split_renders", "write_image_stats"]
