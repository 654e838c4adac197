"""Demonstrations → the training arrays of the built-in VLA (one row per frame, the future chunk as target).

Targets follow ACT: the ``chunk`` actions starting at each frame, padded past the episode end with the last
action and masked out of the loss. The auxiliary target — each task object's position relative to the gripper —
is recomputed from the recorded simulator states (robomimic ``states``) with a camera-less simulator; sources
without states simply carry no auxiliary target.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from demos.replay import StateReplayer
from r2a.vla.features import proprio_vector
from r2a_core.errors import R2AInputError
from r2a_core.images import resize_image
from r2a_core.types import Episode
from training.dagger import DAGGER_META_KEY

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
    task_index: np.ndarray  # (N,) index into ``tasks``
    tasks: list[str]
    on_policy: np.ndarray  # (N,) bool, frames of on-policy (DAgger) episodes

    def __len__(self) -> int:
        return len(self.proprio)


def chunk_targets(actions: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """(T, A) actions → (T, chunk, A) future chunks (padded with the last action) and their validity mask."""
    t = len(actions)
    index = np.arange(t)[:, None] + np.arange(chunk)[None, :]
    mask = (index < t).astype(np.float32)
    return actions[np.minimum(index, t - 1)].astype(np.float32), mask


def episode_chunk_targets(ep: Episode, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """The labeller's own chunks where recorded (DAgger lookahead; steps past their horizon masked), else the
    recorded actions' future."""
    if ep.label_chunks is None:
        return chunk_targets(ep.actions, chunk)
    h = min(chunk, ep.label_chunks.shape[1])
    targets = np.repeat(ep.label_chunks[:, h - 1:h], chunk, axis=1).astype(np.float32)
    targets[:, :h] = ep.label_chunks[:, :h]
    mask = np.zeros((len(ep), chunk), np.float32)
    mask[:, :h] = 1.0
    return targets, mask


def object_offsets(episode: Episode, replayer: StateReplayer) -> tuple[np.ndarray, np.ndarray]:
    """Positions of (up to 3 of) the task's objects relative to the EE per frame, and their mask."""
    n = len(episode)
    out, mask = np.zeros((n, 3 * AUX_OBJECTS), np.float32), np.zeros((n, 3 * AUX_OBJECTS), np.float32)
    replayed = replayer.object_positions(episode)
    if replayed is None:
        return out, mask
    positions = replayed[1][:, :AUX_OBJECTS]
    k = positions.shape[1]
    out[:, : 3 * k] = (positions - episode.ee_pos[:, None, :]).reshape(n, 3 * k)
    mask[:, : 3 * k] = 1.0
    return out, mask


def build_arrays(episodes: list[Episode], cameras: tuple[str, ...], image_size: int, chunk: int,
                 aux: bool = True) -> TrainingArrays:
    """Stack every frame of every episode (images resized to ``image_size``)."""
    prompts, tasks = sorted({ep.instruction for ep in episodes}), sorted({ep.task for ep in episodes})
    with StateReplayer() as replayer:
        per_episode = [_episode_rows(ep, number, prompts, tasks, cameras, image_size, chunk,
                                     replayer if aux else None) for number, ep in enumerate(episodes)]
    cat = {key: np.concatenate([rows[key] for rows in per_episode]) for key in per_episode[0]}
    return TrainingArrays(images={cam: cat[f"image/{cam}"] for cam in cameras}, proprio=cat["proprio"],
                          step=cat["step"].astype(np.int32), prompt_index=cat["prompt"].astype(np.int32),
                          prompts=prompts, actions=cat["actions"], action_mask=cat["mask"], aux=cat["aux"],
                          aux_mask=cat["aux_mask"], episode=cat["episode"].astype(np.int32),
                          task_index=cat["task"].astype(np.int32), tasks=tasks,
                          on_policy=cat["on_policy"].astype(bool))


def _episode_rows(ep: Episode, number: int, prompts: list[str], tasks: list[str], cameras: tuple[str, ...],
                  image_size: int, chunk: int, replayer: StateReplayer | None) -> dict[str, np.ndarray]:
    _check_cameras(ep, cameras, number)
    n = len(ep)
    rows = {f"image/{cam}": resize_image(np.asarray(ep.images[cam]), (image_size, image_size)) for cam in cameras}
    rows["actions"], rows["mask"] = episode_chunk_targets(ep, chunk)
    if replayer is not None:
        rows["aux"], rows["aux_mask"] = object_offsets(ep, replayer)
    else:
        rows["aux"] = rows["aux_mask"] = np.zeros((n, 3 * AUX_OBJECTS), np.float32)
    rows.update(proprio=proprio_vector(ep.ee_pos, ep.ee_quat, ep.gripper), step=np.arange(n),
                prompt=np.full(n, prompts.index(ep.instruction)), episode=np.full(n, number),
                task=np.full(n, tasks.index(ep.task)), on_policy=np.full(n, DAGGER_META_KEY in ep.meta))
    return rows


def _check_cameras(ep: Episode, cameras: tuple[str, ...], number: int) -> None:
    missing = [c for c in cameras if c not in ep.images]
    if missing:
        raise R2AInputError(f"episode {number} ({ep.task}): camera(s) {missing} missing; it has "
                            f"{sorted(ep.images)} — record demos with --cameras {' '.join(cameras)}")


def load_training_episodes(paths: list[str | Path]) -> tuple[list[Episode], list[dict]]:
    """Learnable episodes of every source, and a provenance record (path, sha256 of the file and of its episodes,
    counts) per source."""
    episodes, sources = [], []
    for path in paths:
        kept, source = _successful_episodes(path)
        episodes += kept
        sources.append(source)
    if not episodes:
        raise R2AInputError(f"{', '.join(map(str, paths))}: no successful episodes to learn from")
    return episodes, sources


def learnable(ep: Episode) -> bool:
    """Successful demonstrations, and on-policy (DAgger) episodes whatever their outcome: the expert labelled
    every one of their states, and the failed ones hold exactly the states a clone needs labels for."""
    return bool(ep.success) or DAGGER_META_KEY in ep.meta


def _successful_episodes(path: str | Path) -> tuple[list[Episode], dict]:
    """One source's learnable episodes and its provenance; a source without any only earns a warning."""
    from demos.dataset import load_episodes
    from r2a_core.provenance import episodes_sha256, sha256_path

    loaded = load_episodes(path, load_images=True)
    kept = [ep for ep in loaded if learnable(ep)]
    source = {"path": str(path), "sha256": sha256_path(path), "content_sha256": episodes_sha256(loaded),
              "episodes": len(kept),
              "skipped_failures": len(loaded) - len(kept), "frames": int(sum(len(e) for e in kept)),
              "on_policy_failures": sum(not ep.success for ep in kept)}
    log.info("%s: %d episodes, %d frames", path, len(kept), source["frames"])
    if not kept:
        log.warning("%s: no successful episodes, nothing to learn from it", path)
    return kept, source


def load_training_arrays(paths: list[str | Path], cameras: tuple[str, ...], image_size: int, chunk: int,
                         aux: bool = True, workers: int = 0) -> tuple[TrainingArrays, list[dict]]:
    """Every source's successful episodes as one set of arrays, the sources read by parallel processes.

    Identical to ``build_arrays`` over the concatenated episodes (episodes keep their global numbering), but
    decoding images and replaying states for the auxiliary targets of many files no longer runs on one core.
    """
    jobs = [(str(path), cameras, image_size, chunk, aux) for path in paths]
    workers = min(len(jobs), workers or os.cpu_count() or 1)
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            parts = list(pool.map(_source_arrays, jobs))
    else:
        parts = [_source_arrays(job) for job in jobs]
    built = [arrays for arrays, _ in parts if arrays is not None]
    if not built:
        raise R2AInputError(f"{', '.join(map(str, paths))}: no successful episodes to learn from")
    return merge_arrays(built), [source for _, source in parts]


def _source_arrays(job: tuple) -> tuple[TrainingArrays | None, dict]:
    """One file's arrays (None when none of its episodes succeeded: such a file just contributes nothing)."""
    path, cameras, image_size, chunk, aux = job
    kept, source = _successful_episodes(path)
    return (build_arrays(kept, cameras, image_size, chunk, aux=aux) if kept else None), source


def merge_arrays(parts: list[TrainingArrays]) -> TrainingArrays:
    """Concatenate arrays built separately: prompt and task indices re-mapped, episodes renumbered in order."""
    prompts = sorted({p for part in parts for p in part.prompts})
    tasks = sorted({t for part in parts for t in part.tasks})
    offsets = np.cumsum([0] + [int(part.episode.max()) + 1 for part in parts[:-1]])

    def cat(get) -> np.ndarray:
        return np.concatenate([get(part) for part in parts])

    return TrainingArrays(
        images={cam: cat(lambda part, cam=cam: part.images[cam]) for cam in parts[0].images},
        proprio=cat(lambda part: part.proprio), step=cat(lambda part: part.step),
        prompt_index=cat(lambda part: np.array([prompts.index(p) for p in part.prompts], np.int32)[part.prompt_index]),
        prompts=prompts, actions=cat(lambda part: part.actions), action_mask=cat(lambda part: part.action_mask),
        aux=cat(lambda part: part.aux), aux_mask=cat(lambda part: part.aux_mask),
        episode=np.concatenate([part.episode + offset for part, offset in zip(parts, offsets)]).astype(np.int32),
        task_index=cat(lambda part: np.array([tasks.index(t) for t in part.tasks], np.int32)[part.task_index]),
        tasks=tasks, on_policy=cat(lambda part: part.on_policy))
