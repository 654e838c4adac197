"""Gather the successful demos of all sources into one frame table, checking that they can share a graph.

Sources that disagree on the action space cannot be merged (a node's future actions would mean different
things); sources that give one task different instructions are refused unless explicitly allowed. Both are
reported with the file names, never merged silently.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graph_builder.config import InputConfig
from r2a_core.errors import R2AInputError
from r2a_core.types import ActionSpace, Episode

log = logging.getLogger(__name__)


@dataclass
class Source:
    """One input (an HDF5 file, a LeRobot directory, or in-memory episodes) and its content hash."""

    path: str
    fingerprint: str
    episodes: list[Episode]


@dataclass
class FrameTable:
    """Per-frame arrays of all kept demos, concatenated; demo d owns rows ``demo_ptr[d]:demo_ptr[d+1]``."""

    ee_pos: np.ndarray  # (F, 3) float64
    ee_quat: np.ndarray  # (F, 4) float64 wxyz
    gripper: np.ndarray  # (F,) float64 opening in [0, 1]
    actions: np.ndarray  # (F, A) float32
    demo_ptr: np.ndarray  # (D+1,) int64
    demo_source: np.ndarray  # (D,) int32 index into sources
    demo_episode: np.ndarray  # (D,) int32 episode index inside its source
    demo_task: np.ndarray  # (D,) int32 index into tasks
    demo_instruction: np.ndarray  # (D,) int32 index into instructions
    tasks: list[str]
    instructions: list[str]
    action_space: dict[str, Any]
    source_records: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def num_frames(self) -> int:
        return int(self.ee_pos.shape[0])

    @property
    def num_demos(self) -> int:
        return int(self.demo_ptr.shape[0] - 1)


def build_frame_table(sources: list[Source], cfg: InputConfig) -> FrameTable:
    """Validate every episode, drop failed ones (counted), check compatibility and concatenate."""
    kept: list[tuple[int, int, Episode]] = []
    records = []
    for s_idx, src in enumerate(sources):
        n_failed = 0
        for e_idx, ep in enumerate(src.episodes):
            _validate_episode(ep, f"{src.path} episode {e_idx}")
            if cfg.skip_failed and not ep.success:
                n_failed += 1
                continue
            kept.append((s_idx, e_idx, ep))
        records.append({"path": src.path, "sha256": src.fingerprint, "episodes": len(src.episodes),
                        "kept": len(src.episodes) - n_failed, "skipped_failed": n_failed})
    if not kept:
        raise R2AInputError("graph inputs: no successful demonstrations in "
                            + ", ".join(s.path for s in sources) if sources else "graph inputs: no inputs given")
    action_space = _common_action_space(sources, kept)
    tasks, instructions, demo_task, demo_instr = _task_tables(sources, kept)
    warnings = _instruction_conflicts(sources, kept, cfg)
    lengths = np.array([len(ep) for _, _, ep in kept], dtype=np.int64)
    table = FrameTable(
        ee_pos=np.concatenate([ep.ee_pos for _, _, ep in kept]).astype(np.float64, copy=False),
        ee_quat=np.concatenate([ep.ee_quat for _, _, ep in kept]).astype(np.float64, copy=False),
        gripper=np.concatenate([ep.gripper for _, _, ep in kept]).astype(np.float64, copy=False),
        actions=np.concatenate([ep.actions for _, _, ep in kept]).astype(np.float32, copy=False),
        demo_ptr=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        demo_source=np.array([s for s, _, _ in kept], dtype=np.int32),
        demo_episode=np.array([e for _, e, _ in kept], dtype=np.int32),
        demo_task=demo_task,
        demo_instruction=demo_instr,
        tasks=tasks,
        instructions=instructions,
        action_space=action_space,
        source_records=records,
        warnings=warnings,
    )
    log.info("frame table: %d demos, %d frames from %d sources (%d failed demos skipped)", table.num_demos,
             table.num_frames, len(sources), sum(r["skipped_failed"] for r in records))
    return table


def _validate_episode(ep: Episode, where: str) -> None:
    ep.validate(where)
    if len(ep) < 1:
        raise R2AInputError(f"{where}: has no frames, expected at least one")
    for name in ("ee_pos", "ee_quat", "gripper", "actions"):
        if not np.all(np.isfinite(getattr(ep, name))):
            raise R2AInputError(f"{where}: {name} contains NaN or infinite values")
    if np.any(np.linalg.norm(ep.ee_quat, axis=1) < 1e-6):
        raise R2AInputError(f"{where}: ee_quat has zero-length quaternions, expected unit wxyz quaternions")
    g = ep.gripper
    if g.min() < -0.01 or g.max() > 1.01:
        raise R2AInputError(f"{where}: gripper ranges {g.min():.3g}..{g.max():.3g}, "
                            "expected the normalized opening in [0, 1]")


def _describe_action_space(ep: Episode) -> tuple[Any, ...]:
    """Comparable action-space description: its dimension, plus kind and names when the loader recorded them."""
    space = ep.meta.get("action_space") if isinstance(ep.meta, dict) else None
    if isinstance(space, dict) and "kind" in space:
        try:
            space = ActionSpace.from_dict(space)
        except (KeyError, TypeError):
            space = None
    if isinstance(space, ActionSpace):
        return (ep.actions.shape[1], space.kind, space.names)
    return (ep.actions.shape[1], None, None)


def _common_action_space(sources: list[Source], kept: list[tuple[int, int, Episode]]) -> dict[str, Any]:
    seen: dict[tuple[Any, ...], str] = {}
    for s_idx, e_idx, ep in kept:
        desc = _describe_action_space(ep)
        seen.setdefault(desc, f"{sources[s_idx].path} episode {e_idx}")
    known = {d for d in seen if d[1] is not None}
    dims = {d[0] for d in seen}
    if len(dims) > 1 or len(known) > 1:
        parts = [f"{where}: {_fmt_space(d)}" for d, where in seen.items()]
        raise R2AInputError("graph inputs have different action spaces (" + "; ".join(parts)
                            + "); build one graph per action space")
    dim = dims.pop()
    if known:
        _, kind, names = known.pop()
        return {"dim": dim, "kind": kind, "names": list(names)}
    return {"dim": dim, "kind": None, "names": None}


def _fmt_space(desc: tuple[Any, ...]) -> str:
    dim, kind, names = desc
    return f"{dim}-D {kind} ({', '.join(names)})" if kind else f"{dim}-D actions"


def _task_tables(sources: list[Source], kept: list[tuple[int, int, Episode]]
                 ) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """Task and instruction id tables in first-seen order."""
    tasks: dict[str, int] = {}
    instructions: dict[str, int] = {}
    demo_task, demo_instr = [], []
    for _, _, ep in kept:
        demo_task.append(tasks.setdefault(ep.task, len(tasks)))
        demo_instr.append(instructions.setdefault(ep.instruction, len(instructions)))
    return (list(tasks), list(instructions), np.array(demo_task, dtype=np.int32),
            np.array(demo_instr, dtype=np.int32))


def _instruction_conflicts(sources: list[Source], kept: list[tuple[int, int, Episode]], cfg: InputConfig
                           ) -> list[str]:
    """Refuse a task whose instructions differ between sources (unless allowed); report, as warnings, one
    instruction filed under different task names by different sources (e.g. a LeRobot slug vs an HDF5 name),
    which stay separate tasks."""
    by_task: dict[str, dict[int, set[str]]] = {}
    by_instruction: dict[str, dict[str, set[int]]] = {}
    for s_idx, _, ep in kept:
        by_task.setdefault(ep.task, {}).setdefault(s_idx, set()).add(ep.instruction)
        by_instruction.setdefault(ep.instruction, {}).setdefault(ep.task, set()).add(s_idx)
    warnings = []
    for task, per_source in by_task.items():
        if len({frozenset(v) for v in per_source.values()}) < 2:
            continue
        parts = "; ".join(f"{sources[s].path}: {sorted(v)}" for s, v in per_source.items())
        if not cfg.allow_instruction_mismatch:
            raise R2AInputError(f"graph inputs give task '{task}' different instructions ({parts}); "
                                "set inputs.allow_instruction_mismatch=true to keep them as separate instructions")
        warnings.append(f"task '{task}' has different instructions per source ({parts}); kept as separate "
                        "instruction ids")
    for instruction, per_task in by_instruction.items():
        if len(per_task) > 1:
            parts = "; ".join(f"'{t}' in {', '.join(sources[s].path for s in sorted(v))}" for t, v in per_task.items())
            warnings.append(f"instruction '{instruction}' belongs to different tasks ({parts}); they stay separate "
                            "tasks (rename the tasks to merge them)")
    for message in warnings:
        log.warning("%s", message)
    return warnings


def episodes_fingerprint(episodes: list[Episode]) -> str:
    """Content hash of in-memory episodes (what the manifest records for sources that are not files)."""
    digest = hashlib.sha256()
    for ep in episodes:
        digest.update(f"{ep.task}\0{ep.instruction}\0{int(ep.success)}\0".encode())
        for arr in (ep.actions, ep.ee_pos, ep.ee_quat, ep.gripper):
            a = np.ascontiguousarray(arr)
            digest.update(f"{a.dtype.str}{a.shape}".encode())
            digest.update(a.tobytes())
    return digest.hexdigest()


def source_from_episodes(episodes: list[Episode], name: str = "<memory>") -> Source:
    """Wrap in-memory episodes (tests, synthetic benchmarks) as one source with a content hash."""
    return Source(path=name, fingerprint=episodes_fingerprint(episodes), episodes=list(episodes))
