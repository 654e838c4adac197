"""Training queries for the retriever, built from held-out demonstrations and the frozen base policy.

A query is one recorded frame of a demonstration that is **not** in the graph: its history is the demo's own past
(exact, every step), its "predicted chunk" is what the frozen base policy actually predicts on that frame's
images — clean, or re-rendered under a training-split shift (``r2a demos rerender --shift``), so the retriever
learns to localize when the chunk is wrong — and its truth is the demo's real next ``executed_steps`` of motion.
Queries are stored, not their candidates: the candidate subgraph and its features are recomputed per batch, so
the query set stays small (a few kB per frame).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from tqdm import tqdm

from r2a.retrieval.features import QueryLayout, query_vector
from r2a.retrieval.history import window_from_arrays
from r2a.retrieval.motion import ResponseModel
from r2a_core.errors import R2AInputError
from r2a_core.provenance import artifact_digests
from r2a_core.types import (
    PROMPT,
    STATE_EE_POS,
    STATE_EE_QUAT,
    STATE_GRIPPER,
    STATE_JOINT_POS,
    STATE_STEP,
    Episode,
    image_key,
)

log = logging.getLogger(__name__)

#: the condition label of frames rendered without a shift
CLEAN_CONDITION = "clean"
#: the query cache's format name and version (in its ``meta``)
FORMAT, FORMAT_VERSION = "r2a.retriever.queries", 1
#: the base-chunk cache's format (in every key: a change to what is stored bumps it, and an older cache misses
#: instead of being misread)
CHUNKS_FORMAT, CHUNKS_FORMAT_VERSION = "r2a.base_chunks", 1
#: the directory name of a base-chunk cache (``r2a fit``'s in its work directory; a retriever training's own)
CHUNK_CACHE_DIR = "base_chunks"
#: the per-row arrays of a :class:`QuerySet` (everything but the prompts), in the order they are stored
ARRAY_FIELDS = ("query", "implied", "now_pos", "now_quat", "now_gripper", "phase", "step", "future_dpos",
                "future_gripper", "expert_actions", "base_chunk", "progress", "episode", "condition")


@dataclass
class QuerySet:
    """Stored queries (one row each) with their truth and where they came from."""

    query: np.ndarray  # (Q, Dq) float32
    implied: np.ndarray  # (Q, C, 3)
    now_pos: np.ndarray  # (Q, 3)
    now_quat: np.ndarray  # (Q, 4)
    now_gripper: np.ndarray  # (Q,)
    phase: np.ndarray  # (Q,) the seed key's phase estimate
    step: np.ndarray  # (Q,) elapsed steps
    prompt: list[str]  # (Q,)
    future_dpos: np.ndarray  # (Q, F, 3) the demo's true next motion
    future_gripper: np.ndarray  # (Q, F)
    expert_actions: np.ndarray  # (Q, F, A) the demo's own next actions
    base_chunk: np.ndarray  # (Q, C, A) the base policy's chunk
    progress: np.ndarray  # (Q,) t / (T - 1)
    episode: np.ndarray  # (Q,) global episode number (for splits)
    condition: np.ndarray  # (Q,) index into ``conditions``
    conditions: list[str] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.query)

    def subset(self, rows: np.ndarray) -> "QuerySet":
        arrays = {k: getattr(self, k)[rows] for k in ARRAY_FIELDS}
        return QuerySet(prompt=[self.prompt[i] for i in rows], conditions=self.conditions, sources=self.sources,
                        **arrays)


def condition_of(episode: Episode, file_attrs: dict[str, Any] | None = None) -> str:
    """``factor:level`` of a re-rendered episode (from its meta), else ``clean``."""
    from demos.dataset import episode_condition

    return episode_condition(episode)


def base_chunks(policy: Any, episode: Episode, frames: np.ndarray, batch: int,
                cache: ChunkCache | None = None) -> np.ndarray:
    """The base policy's chunk on each recorded frame ``(len(frames), chunk, A)``.

    The built-in VLA predicts whole batches (``predict_batch``); any other policy is reset per episode and asked
    frame by frame in order, as it would be during a rollout. With ``cache``, a sequence of frames the same base was
    already asked is answered from it.
    """
    observations = [frame_observation(episode, int(t)) for t in frames]
    if cache is None:
        return chunks_of_observations(policy, observations, batch)
    key = cache.key(observations)
    chunks = cache.get(key)
    if chunks is None:
        chunks = chunks_of_observations(policy, observations, batch)
        cache.put(key, chunks)
    return chunks


def base_identity(spec: str, artifacts: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The base as the caches of its answers know it: its spec, and the sha256 of every file it declares it loaded
    (``metadata["artifacts"]``; our servers announce their checkpoint's), so that another checkpoint served at the same
    address is another base. A base that declares none is its spec alone."""
    digests = artifact_digests(artifacts)
    if not digests:
        return spec
    return spec + "|" + ",".join(f"{role}={digests[role]}" for role in sorted(digests))


class ChunkCache:
    """The base policy's chunks on recorded frames, on disk, keyed by the base's identity (:func:`base_identity`) and
    every observation it was asked, in order (what a reset base answers depends on nothing else). The retriever's
    queries and every round of gate rows ask the same held-out frames; with one cache a slow base is asked them once.
    A stochastic base's cached answer is one draw, reused."""

    def __init__(self, directory: str | Path, base: str) -> None:
        self.directory, self.base = Path(directory), base

    def key(self, observations: list[dict[str, Any]]) -> str:
        digest = hashlib.sha256(f"{CHUNKS_FORMAT}/{CHUNKS_FORMAT_VERSION}|{self.base}".encode())
        for obs in observations:
            for name in sorted(obs):
                value = np.asarray(obs[name])
                digest.update(f"{name}|{value.dtype.str}|{value.shape}|".encode())
                digest.update(value.tobytes() if value.dtype != object else repr(obs[name]).encode())
        return digest.hexdigest()[:32]

    def get(self, key: str) -> np.ndarray | None:
        path = self.directory / f"{key}.npy"
        return np.load(path, allow_pickle=False) if path.is_file() else None

    def put(self, key: str, chunks: np.ndarray) -> None:
        from r2a_core.files import atomic_path

        with atomic_path(self.directory / f"{key}.npy") as tmp:
            np.save(tmp, np.asarray(chunks), allow_pickle=False)


def chunks_of_observations(policy: Any, observations: list[dict[str, Any]], batch: int = 64) -> np.ndarray:
    """The policy's chunk on each of ``observations`` (in batches for the built-in VLA, else in order after a reset)."""
    inner = getattr(policy, "inner", policy)
    if hasattr(inner, "predict_batch"):
        return np.concatenate([inner.predict_batch(observations[i:i + batch])
                               for i in range(0, len(observations), batch)])
    policy.reset()
    return np.stack([np.asarray(policy.infer(obs)["actions"], np.float32) for obs in observations])


def frame_observation(episode: Episode, t: int) -> dict[str, Any]:
    """The observation dict a policy would have seen at frame ``t`` of a recorded episode."""
    if not episode.images:
        raise R2AInputError(f"episode of task {episode.task} has no camera images: the base policy needs the "
                            "recorded images (collect with cameras, or re-render the file)")
    obs: dict[str, Any] = {image_key(cam): frames[t] for cam, frames in episode.images.items()}
    obs.update({STATE_EE_POS: episode.ee_pos[t].astype(np.float32),
                STATE_EE_QUAT: episode.ee_quat[t].astype(np.float32),
                STATE_GRIPPER: np.float32(episode.gripper[t]), PROMPT: _prompt(episode), STATE_STEP: int(t)})
    if episode.joint_pos is not None:
        obs[STATE_JOINT_POS] = episode.joint_pos[t].astype(np.float32)
    return obs


def _prompt(episode: Episode) -> str:
    """The instruction the base was given: a language shift's paraphrase when the episode carries one."""
    shift = episode.meta.get("shift") if isinstance(episode.meta, dict) else None
    if isinstance(shift, dict) and isinstance(shift.get("instruction"), str):
        return shift["instruction"]
    return episode.instruction


def build_query_set(sources: list[tuple[str, list[Episode]]], policy: Any, retriever: Any, response: ResponseModel,
                    layout: QueryLayout, executed_steps: int, frame_stride: int, predict_batch: int = 64,
                    progress: bool = True, chunk_cache: ChunkCache | None = None) -> QuerySet:
    """Queries from every ``frame_stride``-th frame of every episode of ``sources`` ``[(path, episodes)]``;
    ``chunk_cache`` answers the frames the base was already asked (a stopped build resumes at its episode)."""
    rows: dict[str, list[Any]] = {k: [] for k in (*ARRAY_FIELDS, "prompt")}
    conditions: list[str] = []
    records, number = [], 0
    total = sum(len(eps) for _, eps in sources)
    bar = tqdm(total=total, desc="retriever queries", unit="ep", disable=not progress)
    for path, episodes in sources:
        kept, seeds = 0, []
        for ep in episodes:
            bar.update(1)
            if len(ep) < 2 or not ep.success:
                continue
            condition = condition_of(ep)
            if condition not in conditions:
                conditions.append(condition)
            frames = np.arange(0, len(ep) - 1, frame_stride)
            chunks = base_chunks(policy, ep, frames, predict_batch, chunk_cache)
            _episode_rows(rows, ep, frames, chunks, retriever, response, layout, executed_steps)
            n = len(frames)
            rows["episode"].append(np.full(n, number))
            rows["condition"].append(np.full(n, conditions.index(condition)))
            number += 1
            kept += 1
            if isinstance(ep.meta, dict) and isinstance(ep.meta.get("seed"), int):
                seeds.append(int(ep.meta["seed"]))
        records.append({"path": str(path), "episodes": len(episodes), "used": kept, "seeds": seeds})
    bar.close()
    if number == 0:
        raise R2AInputError("no successful episodes with at least 2 frames in the held-out demos")
    cat = {k: (v if k == "prompt" else np.concatenate(v)) for k, v in rows.items()}
    log.info("%d queries from %d episodes (%s)", len(cat["query"]), number, ", ".join(conditions))
    return QuerySet(conditions=conditions, sources=records, **cat)


def _episode_rows(rows: dict[str, list[Any]], ep: Episode, frames: np.ndarray, chunks: np.ndarray, retriever: Any,
                  response: ResponseModel, layout: QueryLayout, executed_steps: int) -> None:
    last = len(ep) - 1
    prompt = _prompt(ep)
    for t, chunk in zip(frames.tolist(), chunks):
        window = window_from_arrays(ep.ee_pos, ep.ee_quat, ep.gripper, ep.actions, t, layout.history)
        query, implied = query_vector(chunk, window, response, layout, t)
        ahead = np.minimum(np.arange(t + 1, t + 1 + executed_steps), last)
        acts = ep.actions[np.minimum(np.arange(t, t + executed_steps), last)]
        rows["query"].append(query[None])
        rows["implied"].append(implied[None])
        rows["now_pos"].append(window.now_pos[None])
        rows["now_quat"].append(window.now_quat[None])
        rows["now_gripper"].append([window.now_gripper])
        rows["phase"].append([retriever.phase_for(t, prompt)])
        rows["step"].append([t])
        rows["prompt"].append(prompt)
        rows["future_dpos"].append((ep.ee_pos[ahead] - ep.ee_pos[t])[None])
        rows["future_gripper"].append(ep.gripper[ahead][None])
        rows["expert_actions"].append(acts[None])
        rows["base_chunk"].append(np.asarray(chunk)[None, : layout.chunk_steps])
        rows["progress"].append([t / max(last, 1)])


def save_query_set(qs: QuerySet, path: str | Path) -> Path:
    """The query set as one compressed npz (a cache: building it runs the base policy on every frame)."""
    import json

    from r2a_core.files import atomic_path

    arrays = {k: getattr(qs, k) for k in ARRAY_FIELDS}
    meta = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "conditions": qs.conditions,
                       "sources": qs.sources, "prompts": qs.prompt})
    with atomic_path(path) as tmp:
        np.savez_compressed(tmp, meta=np.array(meta), **arrays)
    return Path(path)


def load_query_set(path: str | Path) -> QuerySet:
    import json

    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
            raise R2AInputError(f"{path}: not a retriever query set of version {FORMAT_VERSION} (format "
                                f"{meta.get('format')!r}, version {meta.get('version')!r})")
        arrays = {k: data[k] for k in data.files if k != "meta"}
    return QuerySet(prompt=meta["prompts"], conditions=meta["conditions"], sources=meta["sources"], **arrays)


__all__ = ["ARRAY_FIELDS", "CHUNKS_FORMAT", "CHUNKS_FORMAT_VERSION", "CHUNK_CACHE_DIR", "CLEAN_CONDITION", "FORMAT",
           "FORMAT_VERSION", "ChunkCache", "QuerySet", "base_chunks", "base_identity", "build_query_set",
           "chunks_of_observations", "condition_of", "frame_observation", "load_query_set", "save_query_set"]
