"""``r2a demos image-stats``: the demonstrations' image statistics that visual-OOD scores are measured against."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.visual_ood import ImageStats, fit_camera_stats, save_image_stats

log = logging.getLogger(__name__)


def image_stats_from_files(paths: Sequence[str | Path], cameras: Sequence[str] = ("agentview",),
                           stride: int = 5) -> ImageStats:
    """Statistics of every ``stride``-th frame of ``cameras`` in the demo files (HDF5 or LeRobot v3)."""
    from demos.dataset import load_episodes, source_fingerprint

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
        log.info("image stats: %s from %d frames", camera, len(frames))
    sources = [{"path": path, "fingerprint": source_fingerprint(path), "episodes": len(eps)} for path, eps in episodes]
    return ImageStats(cameras=stats, sources=sources)


def _frames(episodes: list[tuple[str, list]], camera: str, stride: int) -> Iterator[np.ndarray]:
    for _, eps in episodes:
        for ep in eps:
            images = ep.images.get(camera)
            if images is not None:
                yield from images[::stride]


def write_image_stats(paths: Sequence[str | Path], out: str | Path, cameras: Sequence[str] = ("agentview",),
                      stride: int = 5) -> dict[str, int]:
    stats = image_stats_from_files(paths, cameras, stride)
    save_image_stats(stats, out)
    return {name: s.frames for name, s in stats.cameras.items()}


__all__ = ["image_stats_from_files", "write_image_stats"]
