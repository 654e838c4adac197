"""Render a demonstration file's camera images again from its recorded simulator states.

When a task's cameras change (a narrower agentview, another resolution), the demonstrations need not be
collected again: the recorded ``states`` fix the scene at every frame, so setting each one and rendering gives
the images the current cameras would have seen. Actions, proprio and states are copied unchanged.

With a shift (``--shift camera:2 --seed 5000``) the same states are rendered under an observation-only shift
factor: episode ``i`` draws the factor's parameters from its own sampler with seed ``seed + i`` (use training
seeds, below 100000, for training data), the images change and nothing else does — so a policy's prediction on
them is wrong the way the shift makes it wrong, while the state and the demo's own next actions stay the truth.
Each episode records ``meta["shift"]`` (factor, level, seed, parameters; the paraphrase for ``language``). Factors
that change the state itself (robot_init, layout) cannot be re-rendered and are refused.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm import tqdm

from demos.hdf5_io import READ_META_KEYS, HDF5EpisodeWriter, file_attrs, open_hdf5, read_hdf5
from r2a_core.errors import R2AInputError
from r2a_core.types import Episode, image_key

log = logging.getLogger(__name__)


def rerender_episode(episode: Episode, sim, where: str, shift: "EpisodeShift | None" = None) -> Episode:
    """``episode`` with the cameras ``sim`` renders replaced by new renders of the recorded states (under
    ``shift``'s model edits and image transforms, when given)."""
    if episode.sim_states is None:
        raise R2AInputError(f"{where}: no recorded 'states' to render from")
    frames: dict[str, list[np.ndarray]] = {cam: [] for cam in sim.config.cameras}
    for state in episode.sim_states:
        sim.set_state(state)
        obs = sim.refresh_observation()
        if shift is not None:
            obs = shift.transform(obs)
        for cam in frames:
            frames[cam].append(obs[image_key(cam)])
    meta = {k: v for k, v in episode.meta.items() if k not in READ_META_KEYS}
    images = {**episode.images, **{cam: np.stack(f) for cam, f in frames.items()}}
    if shift is not None:
        meta["shift"] = shift.record()
    return dataclasses.replace(episode, images=images, meta=meta)


@dataclass
class EpisodeShift:
    """One episode's observation shift: the factor's parameters for ``seed``, applied to a reset simulator."""

    factor: Any
    level: int
    seed: int
    params: dict[str, Any] = field(default_factory=dict)

    def apply(self, sim) -> Callable[[], None]:
        from sim.shifts import obs_rng, sample_params

        self.params = sample_params(self.factor, self.level, self.seed, sim.task.name)
        self._rng = obs_rng(self.seed, self.factor, self.level)
        return self.factor.apply(sim, self.params)

    def transform(self, obs: dict[str, Any]) -> dict[str, Any]:
        return self.factor.transform_obs(obs, self.params, self._rng)

    def record(self) -> dict[str, Any]:
        out = {"factor": self.factor.name, "level": self.level, "seed": self.seed, "params": self.params}
        if isinstance(self.params.get("instruction"), str):
            out["instruction"] = self.params["instruction"]
        return out


def parse_shift(spec: str) -> tuple[Any, int]:
    """``FACTOR:LEVEL`` → (factor, level); state-changing factors are refused (their states are not the demo's)."""
    from sim.shifts import check_level, get_factor

    name, sep, level = spec.partition(":")
    factor = get_factor(name.strip())
    try:
        lvl = check_level(int(level)) if sep else None
    except ValueError:
        lvl = None
    if lvl is None:
        raise R2AInputError(f"--shift {spec}: expected FACTOR:LEVEL with a level 1, 2 or 3, e.g. camera:2")
    if factor.modifies_state:
        raise R2AInputError(f"--shift {spec}: {factor.name} changes the simulator state, so the recorded states "
                            "cannot show it; re-render only observation factors (camera, light, background, noise, "
                            "language) — collect new episodes for state factors")
    return factor, lvl


def rerender_file(source: str | Path, out: str | Path, cameras: tuple[str, ...] | None = None,
                  progress: bool = True, shift: str | None = None, seed: int = 0) -> int:
    """Write ``out``: ``source`` with the images of ``cameras`` (default: all it has) rendered again at the
    same size, the other cameras copied; under ``shift`` (``FACTOR:LEVEL``, episode ``i`` seeded ``seed + i``)
    when given. Returns the number of frames."""
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    factor, level = parse_shift(shift) if shift else (None, 0)
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
    sim = make_sim(SimConfig(task=episodes[0].task, image_size=size, cameras=cameras))
    sim.reset(0)  # robosuite hides its visualization sites (the green grip-site line) on reset, not on creation
    frames = 0
    problem_info = dict(attrs["problem_info"])
    try:
        with HDF5EpisodeWriter(out, attrs["env_args"], problem_info) as writer:
            bar = tqdm(episodes, desc=f"render {Path(source).name}", unit="ep", disable=not progress)
            for number, ep in enumerate(bar):
                demo = str(ep.meta.get("demo", f"demo_{number}"))  # keep the source's demo numbering
                episode_shift, undo = None, None
                if factor is not None:
                    sim.reset(int(ep.meta.get("seed", number)))
                    episode_shift = EpisodeShift(factor, level, seed + number)
                    undo = episode_shift.apply(sim)
                try:
                    rendered = rerender_episode(ep, sim, f"{source}:{demo}", episode_shift)
                finally:
                    if undo is not None:
                        undo()
                if episode_shift is not None:
                    rendered.meta["rendered_from"] = {"path": str(source), "demo": demo}
                writer.add(rendered, int(demo.split("_")[-1]))
                frames += len(ep)
    finally:
        sim.close()
    log.info("%s → %s: %d episodes, %d frames rendered again (%s%s)", source, out, len(episodes), frames,
             ", ".join(cameras), f"; shift {shift}, seeds {seed}..{seed + len(episodes) - 1}" if shift else "")
    return frames
