"""Can the reference help? Measured offline, before any gate exists (``r2a retriever evaluate``).

On states where the truth is known, compare four chunks with the expert's own next actions over the executed
steps: the frozen base policy's chunk, the GNN reference, the plain nearest-neighbour (FAISS kNN) reference, and
the best constant blend ``A_base + S (A_ref − A_base)`` (S chosen per condition on a grid, translation and
rotation separately; S = 0 is the base itself, so the best blend is never worse — the question is how much
better, and at which S). The constant gate the wrapper ships (translation 0.25, rotation 0.05) is reported too.

Two kinds of states:

* **held-out demo frames**, clean or re-rendered under a shift (``r2a demos rerender --shift``): the truth is the
  demo's next actions, the history the demo's own;
* **states the base reaches when it drives** (``r2a policy dagger --beta 0 --lookahead 8 [--shift ...]``): the
  truth is the scripted expert's own next actions from that state (``label_chunks``), the history the actions the
  base executed (``meta["executed_actions"]``).

Errors are of the commanded motion: translation in millimetres (the action's position part × 50 mm, its full
scale) and rotation in degrees (× 0.5 rad), per step, averaged over the executed steps; intervals are 95 %
bootstrap intervals over episodes (frames of one episode are not independent).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from r2a.retrieval.history import window_from_arrays
from r2a.retrieval.motion import DELTA_EE_SCALE
from r2a.retrieval.retriever import Retriever
from r2a.retrieval.synthesis import reference_chunk
from r2a_core.types import ActionSpace, Episode
from training.retriever.queries import base_chunks, condition_of

log = logging.getLogger(__name__)

#: the blend grid (translation and rotation each)
GATE_GRID = tuple(np.round(np.arange(0.0, 1.0001, 0.05), 2))
#: the constant gate the wrapper ships
SHIPPED_GATE = (0.25, 0.05)
CHUNKS = ("base", "gnn", "knn")


@dataclass
class FrameErrors:
    """Per-frame rows of one evaluation (errors per chunk, and the blend errors on the grid)."""

    condition: list[str]
    kind: list[str]
    episode: list[int]
    trans_mm: dict[str, list[float]]
    rot_deg: dict[str, list[float]]
    blend_trans_mm: list[np.ndarray]  # (len(GATE_GRID),) per frame, GNN reference
    blend_rot_deg: list[np.ndarray]


def build_offline(config_path: Any, overrides: list[str] | None, demos: list[Any],
                  dagger: list[Any]) -> tuple[Any, Any, Any, list[tuple[str, str, Episode]]]:
    """What an offline measurement on recorded states needs: the config, its base policy, the wrapper (recovery off:
    recorded states start where they start) and the episodes ``[(kind, file, episode)]`` — successful demos
    (``demo``) and every rollout (``dagger``)."""
    from dataclasses import replace

    from demos.dataset import load_episodes
    from r2a.policies import make_policy
    from r2a.wrapper.build import build_r2a, load_r2a_config
    from r2a_core.errors import R2AInputError

    if not demos and not dagger:
        raise R2AInputError("give --demos and/or --dagger files")
    config = load_r2a_config(config_path, overrides)
    base = make_policy(config.base, None, 0)
    wrapper = build_r2a(replace(config, recovery=replace(config.recovery, enabled=False)), base)
    episodes = [("demo", str(p), ep) for p in demos for ep in load_episodes(p) if ep.success]
    episodes += [("dagger", str(p), ep) for p in dagger for ep in load_episodes(p)]
    return config, base, wrapper, episodes


def chunk_errors(chunk: np.ndarray, expert: np.ndarray) -> tuple[float, float]:
    """Mean per-step commanded-motion error: (translation mm, rotation degrees)."""
    n = min(len(chunk), len(expert))
    d = np.asarray(chunk[:n], np.float64) - np.asarray(expert[:n], np.float64)
    trans = np.linalg.norm(d[:, 0:3], axis=1).mean() * DELTA_EE_SCALE[0] * 1000.0
    rot = np.degrees(np.linalg.norm(d[:, 3:6], axis=1).mean() * DELTA_EE_SCALE[1])
    return float(trans), float(rot)


def evaluate_episodes(episodes: list[tuple[str, Episode]], policy: Any, gnn: Retriever, knn: Retriever,
                      action_space: ActionSpace, steps: int, conversion: str, frame_stride: int = 2,
                      predict_batch: int = 64, progress: bool = True) -> FrameErrors:
    """Errors of every ``frame_stride``-th frame of ``episodes`` ``[(kind, episode)]`` (kind: demo or dagger)."""
    out = FrameErrors([], [], [], {c: [] for c in CHUNKS}, {c: [] for c in CHUNKS}, [], [])
    for number, (kind, ep) in enumerate(tqdm(episodes, desc="offline errors", unit="ep", disable=not progress)):
        if len(ep) < 2:
            continue
        executed = np.asarray(ep.meta.get("executed_actions", ep.actions), np.float64) \
            if isinstance(ep.meta, dict) else ep.actions
        frames = np.arange(0, len(ep) - 1, frame_stride)
        chunks = base_chunks(policy, ep, frames, predict_batch)
        prompt = episode_prompt(ep)
        for t, chunk in zip(frames.tolist(), chunks):
            expert = expert_chunk(ep, t, steps)
            window = window_from_arrays(ep.ee_pos, ep.ee_quat, ep.gripper, executed, t, gnn.layout.history)
            base = action_space.clip(chunk[:steps]).astype(np.float64)
            refs = {"base": base}
            for name, retriever in (("gnn", gnn), ("knn", knn)):
                found = retriever.retrieve(chunk, window, prompt, retriever.phase_for(t, prompt), t)
                refs[name] = reference_chunk(retriever.arrays, found.nodes, found.weights, window, len(base),
                                             conversion, retriever.response, action_space)
            for name, ref in refs.items():
                trans, rot = chunk_errors(ref, expert)
                out.trans_mm[name].append(trans)
                out.rot_deg[name].append(rot)
            grid = np.asarray(GATE_GRID)
            diff = refs["gnn"] - base
            blended = base[None] + grid[:, None, None] * diff[None]
            errs = np.array([chunk_errors(b, expert) for b in blended])
            out.blend_trans_mm.append(errs[:, 0])
            out.blend_rot_deg.append(errs[:, 1])
            out.condition.append(condition_of(ep))
            out.kind.append(kind)
            out.episode.append(number)
    return out


def expert_chunk(ep: Episode, t: int, steps: int) -> np.ndarray:
    """The expert's own next ``steps`` actions from frame ``t``: its lookahead labels when recorded."""
    if ep.label_chunks is not None:
        return ep.label_chunks[t][:steps]
    last = len(ep) - 1
    return ep.actions[np.minimum(np.arange(t, t + steps), last)]


def episode_prompt(ep: Episode) -> str:
    shift = ep.meta.get("shift") if isinstance(ep.meta, dict) else None
    params = shift.get("params", {}) if isinstance(shift, dict) else {}
    for source in (shift or {}, params):
        if isinstance(source, dict) and isinstance(source.get("instruction"), str):
            return source["instruction"]
    return ep.instruction


def summarize(errors: FrameErrors, n_boot: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """One row per (kind, condition): mean errors with episode-bootstrap CIs, the best constant blend, the
    shipped gate, and the GNN reference's improvement over the kNN one."""
    rows = []
    cond, kind, episode = np.array(errors.condition), np.array(errors.kind), np.array(errors.episode)
    grid = np.asarray(GATE_GRID)
    bt, br = np.stack(errors.blend_trans_mm), np.stack(errors.blend_rot_deg)
    rng = np.random.default_rng(seed)
    for k in sorted(set(errors.kind)):
        for c in sorted(set(cond[kind == k])):
            sel = (kind == k) & (cond == c)
            eps = episode[sel]
            row: dict[str, Any] = {"kind": k, "condition": c, "frames": int(sel.sum()), "episodes": len(set(eps))}
            for name in CHUNKS:
                for metric, values in (("trans_mm", errors.trans_mm[name]), ("rot_deg", errors.rot_deg[name])):
                    v = np.asarray(values)[sel]
                    row[f"{name}_{metric}"] = mean_ci(v, eps, rng, n_boot)
            best_t, best_r = int(np.argmin(bt[sel].mean(0))), int(np.argmin(br[sel].mean(0)))
            row["blend_best_S"] = [float(grid[best_t]), float(grid[best_r])]
            row["blend_best_trans_mm"] = mean_ci(bt[sel][:, best_t], eps, rng, n_boot)
            row["blend_best_rot_deg"] = mean_ci(br[sel][:, best_r], eps, rng, n_boot)
            at_t = int(np.argmin(np.abs(grid - SHIPPED_GATE[0])))
            at_r = int(np.argmin(np.abs(grid - SHIPPED_GATE[1])))
            row["blend_shipped_trans_mm"] = mean_ci(bt[sel][:, at_t], eps, rng, n_boot)
            row["blend_shipped_rot_deg"] = mean_ci(br[sel][:, at_r], eps, rng, n_boot)
            g, n = np.asarray(errors.trans_mm["gnn"])[sel], np.asarray(errors.trans_mm["knn"])[sel]
            row["gnn_vs_knn_trans_reduction"] = float(1.0 - g.mean() / max(n.mean(), 1e-9))
            rows.append(row)
    return rows


def mean_ci(values: np.ndarray, episodes: np.ndarray, rng: np.random.Generator, n_boot: int) -> list[float]:
    """[mean, lo, hi]: the 95 % interval resamples whole episodes."""
    values = np.asarray(values, np.float64)
    groups = [values[episodes == e] for e in np.unique(episodes)]
    sums = np.array([g.sum() for g in groups])
    counts = np.array([len(g) for g in groups])
    idx = rng.integers(0, len(groups), size=(n_boot, len(groups)))
    boot = sums[idx].sum(1) / np.maximum(counts[idx].sum(1), 1)
    return [round(float(values.mean()), 3), round(float(np.percentile(boot, 2.5)), 3),
            round(float(np.percentile(boot, 97.5)), 3)]


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows as the closing-note table: errors `mean [lo, hi]` per chunk."""
    def f(v: list[float]) -> str:
        return f"{v[0]:.1f} [{v[1]:.1f}, {v[2]:.1f}]"

    head = ("| states | condition | frames | base mm | GNN ref mm | kNN ref mm | best blend mm (S) | S=0.25 mm | "
            "base ° | GNN ref ° | kNN ref ° | best blend ° (S) | GNN vs kNN |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['condition']} | {r['frames']} | {f(r['base_trans_mm'])} | "
                     f"{f(r['gnn_trans_mm'])} | {f(r['knn_trans_mm'])} | {f(r['blend_best_trans_mm'])} "
                     f"({r['blend_best_S'][0]:.2f}) | {f(r['blend_shipped_trans_mm'])} | {f(r['base_rot_deg'])} | "
                     f"{f(r['gnn_rot_deg'])} | {f(r['knn_rot_deg'])} | {f(r['blend_best_rot_deg'])} "
                     f"({r['blend_best_S'][1]:.2f}) | {100 * r['gnn_vs_knn_trans_reduction']:+.0f} % |")
    return "\n".join(lines) + "\n"


__all__ = ["GATE_GRID", "FrameErrors", "build_offline", "chunk_errors", "episode_prompt", "evaluate_episodes",
           "expert_chunk", "markdown_table", "mean_ci", "summarize"]
