"""One entry point for every demonstration source: HDF5 files and LeRobot v3 dataset directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r2a_core.errors import R2AInputError
from r2a_core.types import Episode

HDF5_SUFFIXES = (".hdf5", ".h5", ".he5")


def source_kind(path: str | Path) -> str:
    """``"hdf5"`` or ``"lerobot_v3"``; a clear error for anything else."""
    from demos.lerobot_v3 import is_lerobot_v3_dir

    path = Path(path)
    if not path.exists():
        raise R2AInputError(f"{path}: no such file or directory")
    if path.is_dir():
        if is_lerobot_v3_dir(path):
            return "lerobot_v3"
        raise R2AInputError(f"{path}: a directory but not a LeRobot v3 dataset (expected meta/info.json)")
    if path.suffix.lower() in HDF5_SUFFIXES:
        return "hdf5"
    raise R2AInputError(f"{path}: unknown demonstration format (expected {'/'.join(HDF5_SUFFIXES)} "
                        f"or a LeRobot v3 dataset directory)")


def load_episodes(path: str | Path, load_images: bool = True) -> list[Episode]:
    """Read all episodes of an HDF5 file or a LeRobot v3 dataset directory."""
    if source_kind(path) == "hdf5":
        from demos.hdf5_io import read_hdf5

        return read_hdf5(path, load_images=load_images)
    from demos.lerobot_v3 import LeRobotMapping, read_lerobot_v3

    return read_lerobot_v3(path, LeRobotMapping(load_images=load_images))


def episode_seeds(episode: Any) -> list[int]:
    """Every seed a recorded episode came from: its environment seed and, when re-rendered or rolled out under a
    shift, the shift's parameter seed (what the seed rule checks)."""
    meta = episode.meta if isinstance(episode.meta, dict) else {}
    seeds = [int(meta["seed"])] if isinstance(meta.get("seed"), int) else []
    shift = meta.get("shift")
    if isinstance(shift, dict) and isinstance(shift.get("seed"), int):
        seeds.append(int(shift["seed"]))
    return seeds


def episode_condition(episode: Any) -> str:
    """``factor:level`` of an episode recorded under a shift (its ``meta["shift"]``), else ``clean``."""
    shift = episode.meta.get("shift") if isinstance(episode.meta, dict) else None
    return f"{shift['factor']}:{shift.get('level')}" if isinstance(shift, dict) and shift.get("factor") else "clean"


