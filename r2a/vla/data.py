"""Demonstrations → the training arrays of the built-in VLA (one row per frame, the future chunk as target).

Targets follow ACT: the ``chunk`` actions starting at each frame, padded past the episode end with the last
action and masked out of the loss. The auxiliary target — each task object's position relative to the gripper —
is recomputed from the recorded simulator states (robomimic ``states``) with a camera-less simulator; sources
without states simply carry no auxiliary target.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.types import Episode
from r2a.vla.features import proprio_vector, resize_image

log = logging.getLogger(__name__)
AUX_OBJECTS = 3


@dataclass
class TrainingArrays:
    images: dict[str, np.ndarray]  # camera → (N, S, S, 3) uint8
    proprio: np.ndarray  # (N, 10) float32
    step: np.ndarray  # (N,) control step within the episode
    prompt_index: np.ndarray  # (N,) index into ``prompts``
    prompts: list[str]
    actions: np.ndarray  # (N, chunk, A) float32
    action_mask: np.ndarray  # (N, chunk) float32, 0 past the episode end
    aux: np.ndarray  # (N, 3 * AUX_OBJECTS) float32
    aux_mask: np.ndarray  # (N, 3 * AUX_OBJECTS) float32
    episode: np.ndarray  # (N,) episode number

    def __len__(self) -> int:
        return len(self.proprio)


def chunk_targets(actions: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """(T, A) actions → (T, chunk, A) future chunks (padded with the last action) and their validity mask."""
    t = len(actions)
    index = np.arange(t)[:, None] + np.arange(chunk)[None, :]
    mask = (index < t).astype(np.float32)
    return actions[np.minimum(index, t - 1)].astype(np.float32), mask


def object_offsets(episode: Episode, sims: dict) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the task's objects relative to the EE per frame, from the recorded simulator states."""
    n = len(episode)
    out, mask = np.zeros((n, 3 * AUX_OBJECTS), np.float32), np.zeros((n, 3 * AUX_OBJECTS), np.float32)
    if episode.sim_states is None:
        return out, mask
    sim = _state_sim(episode.task, sims)
    objects = sim.task.objects[:AUX_OBJECTS]
    for i, state in enumerate(episode.sim_states):
        sim.set_state(state)
        for j, name in enumerate(objects):
            out[i, 3 * j:3 * j + 3] = sim.object_pos(name) - episode.ee_pos[i]
    mask[:, : 3 * len(objects)] = 1.0
    return out, mask


def _state_sim(task: str, sims: dict):
    if task not in sims:
        from eval.envs.robosuite_env import SimConfig, SimEnv

        sims[task] = SimEnv(SimConfig(task=task, cameras=()))
    return sims[task]


def build_arrays(episodes: list[Episode], cameras: tuple[str, ...], image_size: int, chunk: int,
                 aux: bool = True) -> TrainingArrays:
    """Stack every frame of every episode (images resized to ``image_size``)."""
    prompts = sorted({ep.instruction for ep in episodes})
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ("proprio", "step", "prompt", "actions", "mask", "aux",
                                                          "aux_mask", "episode")}
    images: dict[str, list[np.ndarray]] = {cam: [] for cam in cameras}
    sims: dict = {}
    try:
        for number, ep in enumerate(episodes):
            _check_cameras(ep, cameras, number)
            for cam in cameras:
                images[cam].append(np.stack([resize_image(f, image_size) for f in ep.images[cam]]))
            actions, mask = chunk_targets(ep.actions, chunk)
            offsets, offsets_mask = object_offsets(ep, sims) if aux else (np.zeros((len(ep), 9), np.float32),) * 2
            for key, value in (("proprio", proprio_vector(ep.ee_pos, ep.ee_quat, ep.gripper)),
                               ("step", np.arange(len(ep))), ("prompt", np.full(len(ep), prompts.index(ep.instruction))),
                               ("actions", actions), ("mask", mask), ("aux", offsets), ("aux_mask", offsets_mask),
                               ("episode", np.full(len(ep), number))):
                rows[key].append(value)
    finally:
        for sim in sims.values():
            sim.close()
    cat = {k: np.concatenate(v) for k, v in rows.items()}
    return TrainingArrays(images={c: np.concatenate(v) for c, v in images.items()}, proprio=cat["proprio"],
                          step=cat["step"].astype(np.int32), prompt_index=cat["prompt"].astype(np.int32),
                          prompts=prompts, actions=cat["actions"], action_mask=cat["mask"], aux=cat["aux"],
                          aux_mask=cat["aux_mask"], episode=cat["episode"].astype(np.int32))


def _check_cameras(ep: Episode, cameras: tuple[str, ...], number: int) -> None:
    missing = [c for c in cameras if c not in ep.images]
    if missing:
        raise R2AInputError(f"episode {number} ({ep.task}): camera(s) {missing} missing; it has "
                            f"{sorted(ep.images)} — record demos with --cameras {' '.join(cameras)}")


def load_training_episodes(paths: list[str | Path]) -> tuple[list[Episode], list[dict]]:
    """Successful episodes of every source, and a provenance record (path, sha256, counts) per source."""
    from demos.dataset import load_episodes, source_fingerprint

    episodes, sources = [], []
    for path in paths:
        loaded = load_episodes(path, load_images=True)
        kept = [ep for ep in loaded if ep.success]
        if not kept:
            raise R2AInputError(f"{path}: no successful episodes to learn from")
        episodes += kept
        sources.append({"path": str(path), "sha256": source_fingerprint(path), "episodes": len(kept),
                        "skipped_failures": len(loaded) - len(kept), "frames": int(sum(len(e) for e in kept))})
        log.info("%s: %d episodes, %d frames", path, len(kept), sources[-1]["frames"])
    return episodes, sources
