"""Render a demonstration file's camera images again from its recorded simulator states.

When a task's cameras change (a narrower agentview, another resolution), the demonstrations need not be
collected again: the recorded ``states`` fix the scene at every frame, so setting each one and rendering gives
the images the current cameras would have seen. Actions, proprio and states are copied unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
from tqdm import tqdm

from demos.hdf5_io import READ_META_KEYS, HDF5EpisodeWriter, file_attrs, open_hdf5, read_hdf5
from r2a_core.errors import R2AInputError
from r2a_core.types import Episode, image_key

log = logging.getLogger(__name__)


def rerender_episode(episode: Episode, sim, where: str) -> Episode:
    """``episode`` with the cameras ``sim`` renders replaced by new renders of the recorded states."""
    if episode.sim_states is None:
        raise R2AInputError(f"{where}: no recorded 'states' to render from")
    frames: dict[str, list[np.ndarray]] = {cam: [] for cam in sim.config.cameras}
    for state in episode.sim_states:
        sim.set_state(state)
        obs = sim.refresh_observation()
        for cam in frames:
            frames[cam].append(obs[image_key(cam)])
    meta = {k: v for k, v in episode.meta.items() if k not in READ_META_KEYS}
    images = {**episode.images, **{cam: np.stack(f) for cam, f in frames.items()}}
    return dataclasses.replace(episode, images=images, meta=meta)


def rerender_file(source: str | Path, out: str | Path, cameras: tuple[str, ...] | None = None,
                  progress: bool = True) -> int:
    """Write ``out``: ``source`` with the images of ``cameras`` (default: all it has) rendered again at the
    same size, the other cameras copied. Returns the number of frames."""
    from sim.envs.robosuite_env import SimConfig, SimEnv

    with open_hdf5(source) as f:
        attrs = file_attrs(f)
    episodes = read_hdf5(source)
    recorded = tuple(episodes[0].images)
    cameras = tuple(cameras or recorded)
    missing = [cam for cam in cameras if cam not in recorded]
    if not cameras or missing:
        raise R2AInputError(f"{source}: cannot render {list(missing) or 'images'} again: the file records "
                            f"cameras {list(recorded)}")
    size = int(episodes[0].images[cameras[0]].shape[1])
    sim = SimEnv(SimConfig(task=episodes[0].task, image_size=size, cameras=cameras))
    sim.reset(0)  # robosuite hides its visualization sites (the green grip-site line) on reset, not on creation
    frames = 0
    try:
        with HDF5EpisodeWriter(out, attrs["env_args"], attrs["problem_info"]) as writer:
            bar = tqdm(episodes, desc=f"render {Path(source).name}", unit="ep", disable=not progress)
            for number, ep in enumerate(bar):
                demo = str(ep.meta.get("demo", f"demo_{number}"))  # keep the source's demo numbering
                writer.add(rerender_episode(ep, sim, f"{source}:{demo}"), int(demo.split("_")[-1]))
                frames += len(ep)
    finally:
        sim.close()
    log.info("%s → %s: %d episodes, %d frames rendered again (%s)", source, out, len(episodes), frames,
             ", ".join(cameras))
    return frames
