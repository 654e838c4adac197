"""Load demonstration inputs (HDF5 files, LeRobot v3 directories, mixed) through ``demos.dataset``."""

from __future__ import annotations

import logging
from pathlib import Path

from tqdm import tqdm

from graph_builder.frames import Source
from r2a_core.errors import R2AInputError

log = logging.getLogger(__name__)


def load_sources(paths: list[str | Path], progress: bool = False) -> list[Source]:
    """One :class:`Source` per path, in the order given; the same file or content twice is refused."""
    from demos.dataset import load_episodes
    from r2a_core.provenance import sha256_path

    if not paths:
        raise R2AInputError("graph build: no inputs given; pass HDF5 files and/or LeRobot dataset directories")
    seen_paths: dict[Path, str] = {}
    seen_hashes: dict[str, str] = {}
    sources = []
    for raw in tqdm(paths, desc="loading demos", unit="source", disable=not progress):
        path = Path(raw)
        if not path.exists():
            raise R2AInputError(f"{path}: no such file or directory (expected an HDF5 file or a LeRobot dataset)")
        resolved = path.resolve()
        if resolved in seen_paths:
            raise R2AInputError(f"{path}: given twice (also as {seen_paths[resolved]})")
        seen_paths[resolved] = str(path)
        fingerprint = sha256_path(path)
        if fingerprint in seen_hashes:
            raise R2AInputError(f"{path}: same content as {seen_hashes[fingerprint]}; each demo would be added twice")
        seen_hashes[fingerprint] = str(path)
        episodes = load_episodes(path, load_images=False)  # nodes are kinematic: images are never needed
        log.info("%s: %d episodes", path, len(episodes))
        sources.append(Source(path=str(path), fingerprint=fingerprint, episodes=episodes))
    return sources
