"""Gate training data: states where the frozen base policy is wrong, with the reference and the expert's truth.

``r2a gate data --demos ... --dagger ... --out FILE.npz`` walks every ``frame_stride``-th frame of

* held-out demonstrations, clean or re-rendered under training-split shifts (``r2a demos rerender --shift``):
  the base policy's chunk on those images, the demo's own history, the demo's next actions as the truth;
* the wrapper's or the base's own rollouts (``r2a policy dagger --beta 0 --lookahead 8 [--shift F:L]``): the
  history the learner executed, the scripted expert's own next actions from each visited state as the truth;
* **closed-loop rows** (``r2a policy dagger --policy R2A_VARIANT --gate-rows --beta 0 --lookahead 8``): what the
  deployed wrapper's gate really read at each of its gated queries (the harmonized base's chunk, the retrieved
  reference, the holding rule's per-step scale), recorded during the rollout, with the expert's own next actions
  from the same state as the truth — no base inference afterwards, the rows are the run time's (kind
  ``closed_loop``) —

and stores, per frame, what the gate reads (:class:`~r2a.wrapper.learned_gate.GateRaw`: base and reference chunks,
retrieval confidence, proprio, elapsed time, the base's disagreement with its previous plan, the image's visual-OOD
score) and the expert's chunk. Frames where the wrapper would fall back (seed too far, retrieval unsure) are left
out: the gate never acts there. ``scale`` is the holding rule's factor per executed step (the wrapper multiplies S
by it: recorded, or on rows rebuilt from frames, the config's rule applied to the base chunk). Every episode's seeds
and shift settings go into the file, so a gate trained on it carries them (the benchmark refuses to score a gate on
a seed it saw). Format ``r2a.gate.data`` v2 (``.npz`` of arrays + a JSON ``meta`` entry; no pickle); v1 files (no
``scale``) are read with scale 1.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from tqdm import tqdm

from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_path
from r2a_core.types import Episode, image_key

if TYPE_CHECKING:
    from training.retriever.queries import ChunkCache

log = logging.getLogger(__name__)

FORMAT, FORMAT_VERSION = "r2a.gate.data", 2
#: versions this reader accepts (v1: before ``scale``)
READABLE_VERSIONS = (1, 2)
ARRAYS = ("base", "reference", "expert", "retrieval", "ee_pos", "gripper", "step", "disagreement", "has_plan",
          "image_score", "has_image", "episode", "seed", "scale")


def build_gate_data(episodes: Sequence[tuple[str, str, Episode]], wrapper: Any, base_policy: Any,
                    image_scorer: Any = None, frame_stride: int = 2, predict_batch: int = 64,
                    progress: bool = True, frames_too: bool = False,
                    chunk_cache: ChunkCache | None = None) -> dict[str, Any]:
    """Rows of every ``frame_stride``-th frame of ``episodes`` ``[(kind, source file, episode)]`` for ``wrapper``
    (an :class:`~r2a.wrapper.policy.R2APolicy`: its retriever, conversion, fallback thresholds and holding rule);
    a rollout with recorded gate rows gives those (``closed_loop``), and its frames too with ``frames_too``.
    ``chunk_cache`` (a :class:`~training.retriever.queries.ChunkCache`) answers frames the base was already asked:
    every DAgger round rebuilds the held-out rows on the same frames."""
    from r2a.retrieval.history import window_from_arrays
    from r2a.retrieval.synthesis import reference_chunk
    from r2a.wrapper.gate import GateInputs, holding_rule
    from r2a.wrapper.learned_gate import SIGNALS, GateLayout, gate_raw, pad_steps
    from training.retriever.offline import episode_prompt, expert_chunk
    from training.retriever.queries import base_chunks, condition_of

    p = wrapper.parts
    steps, space = p.executed_steps, p.action_space
    layout = GateLayout(steps=steps, action_dim=space.dim, signals=SIGNALS,
                        motion_dims=tuple(i for i in range(space.dim) if i not in space.gripper_dims))
    rows: dict[str, list[Any]] = {name: [] for name in ARRAYS}
    labels: dict[str, list[str]] = {"condition": [], "kind": []}
    skipped = {"far_from_graph": 0, "low_confidence": 0}
    sources, seeds, shifts = [], set(), set()
    for number, (kind, source, ep) in enumerate(tqdm(episodes, desc="gate data", unit="ep", disable=not progress)):
        if len(ep) < 2:
            continue
        seed = _episode_seeds(ep, seeds, shifts)
        recorded = _recorded_rows(ep)
        if recorded is not None:
            kept = _append_recorded(rows, recorded, ep, steps, number, seed, space.dim)
            labels["condition"] += [condition_of(ep)] * kept
            labels["kind"] += ["closed_loop"] * kept
            sources.append(source)
            if not frames_too:
                continue
        executed = np.asarray(ep.meta.get("executed_actions", ep.actions), np.float64) \
            if isinstance(ep.meta, dict) else ep.actions
        frames = np.arange(0, len(ep) - 1, frame_stride)
        asked = np.union1d(frames, frames[frames >= steps] - steps)  # each frame and the one a chunk earlier
        chunks = dict(zip(asked.tolist(), base_chunks(base_policy, ep, asked, predict_batch, chunk_cache)))
        prompt = episode_prompt(ep)
        camera = ep.images.get(layout.camera)
        for t in frames.tolist():
            chunk = np.asarray(chunks[t], np.float64)
            window = window_from_arrays(ep.ee_pos, ep.ee_quat, ep.gripper, executed, t, p.retriever.layout.history)
            found = p.retriever.retrieve(chunk, window, prompt, p.retriever.phase_for(t, prompt), t)
            if found.seed_distance > p.max_seed_distance:
                skipped["far_from_graph"] += 1
                continue
            if found.entropy > p.max_entropy:
                skipped["low_confidence"] += 1
                continue
            base = space.clip(chunk[:steps]).astype(np.float64)
            reference = reference_chunk(p.retriever.arrays, found.nodes, found.weights, window, len(base),
                                        p.conversion, p.response, space)
            earlier = chunks.get(t - steps)
            plan = None if earlier is None or len(earlier) < 2 * steps else np.asarray(earlier[steps:2 * steps])
            obs = {image_key(layout.camera): camera[t]} if camera is not None else {}
            raw = gate_raw(GateInputs(base=base, reference=reference, base_chunk=chunk, previous_plan=plan,
                                      retrieval={"entropy": found.entropy, "top_weight": found.top_weight,
                                                 "seed_distance": found.seed_distance, "progress": found.progress},
                                      proprio={"ee_pos": window.now_pos, "gripper": np.array(window.now_gripper)},
                                      step=t, observation=obs), layout, image_scorer)
            scale = pad_steps(holding_rule(base, space, p.holding_scale)[:, None], steps)[:, 0]
            _append(rows, raw, pad_steps(expert_chunk(ep, t, steps), steps), number, seed, space.dim, scale)
            labels["condition"].append(condition_of(ep))
            labels["kind"].append(kind)
        sources.append(source)
    if not rows["base"]:
        raise R2AInputError("no gate training rows: every frame fell back (or the episodes were empty)")
    arrays = {name: np.asarray(values) for name, values in rows.items()}
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "layout": layout.to_dict(),
            "action_space": {"kind": space.kind, "dim": space.dim}, "condition": labels["condition"],
            "kind": labels["kind"], "sources": sorted(set(sources)), "seeds": sorted(seeds),
            "shift_settings": sorted(shifts), "skipped": skipped, "frame_stride": frame_stride,
            "conversion": p.conversion}
    log.info("gate data: %d rows from %d episodes (%s left out)", len(arrays["base"]), len(episodes), skipped)
    return {"arrays": arrays, "meta": meta}


def _episode_seeds(ep: Episode, seeds: set[int], shifts: set[str]) -> int:
    """Record the episode's environment seed and its shift's seed and setting; return the environment seed."""
    from demos.dataset import episode_condition, episode_seeds

    seeds.update(episode_seeds(ep))
    if episode_condition(ep) != "clean":
        shifts.add(episode_condition(ep))
    meta = ep.meta if isinstance(ep.meta, dict) else {}
    return int(meta["seed"]) if isinstance(meta.get("seed"), int) else -1


def _recorded_rows(ep: Episode) -> dict[str, list[Any]] | None:
    """The gate rows recorded during a ``--gate-rows`` rollout (None for other episodes)."""
    meta = ep.meta if isinstance(ep.meta, dict) else {}
    dagger = meta.get("dagger")
    return dagger.get("gate_rows") if isinstance(dagger, dict) else None


def _append_recorded(rows: dict[str, list[Any]], recorded: dict[str, list[Any]], ep: Episode, steps: int,
                     episode: int, seed: int, dim: int) -> int:
    """Append a rollout's recorded gate rows, each with the expert's label chunk of its state; returns how many."""
    from r2a.wrapper.learned_gate import GateRaw, pad_steps

    where = f"{ep.meta.get('source_file', 'episode')}: meta.dagger.gate_rows"
    if ep.label_chunks is None:
        raise R2AInputError(f"{where}: the rollout has no label_chunks; record it with --lookahead {steps}")
    count = len(recorded.get("step", []))
    for i in range(count):
        t = int(recorded["step"][i])
        if not 0 <= t < len(ep):
            raise R2AInputError(f"{where}: row {i} is at step {t}, outside the episode's {len(ep)} steps")
        disagreement = recorded["disagreement"][i]
        score = recorded["image_score"][i]
        raw = GateRaw(base=np.asarray(recorded["base"][i], np.float64),
                      reference=np.asarray(recorded["reference"][i], np.float64),
                      retrieval=np.asarray(recorded["retrieval"][i], np.float64),
                      ee_pos=np.asarray(recorded["ee_pos"][i], np.float64), gripper=float(recorded["gripper"][i]),
                      step=int(recorded["elapsed"][i]),
                      disagreement=None if disagreement is None else np.asarray(disagreement, np.float64),
                      image_score=None if score is None else float(score))
        if raw.base.shape != (steps, dim) or raw.reference.shape != (steps, dim):
            raise R2AInputError(f"{where}: row {i} has chunks of shape {raw.base.shape}, expected ({steps}, {dim})")
        scale = pad_steps(np.asarray(recorded["scale"][i], np.float64)[:, None], steps)[:, 0]
        _append(rows, raw, pad_steps(ep.label_chunks[t], steps), episode, seed, dim, scale)
    return count


def _append(rows: dict[str, list[Any]], raw: Any, expert: np.ndarray, episode: int, seed: int, dim: int,
            scale: np.ndarray) -> None:
    rows["base"].append(raw.base.astype(np.float32))
    rows["reference"].append(raw.reference.astype(np.float32))
    rows["expert"].append(expert.astype(np.float32))
    rows["retrieval"].append(raw.retrieval.astype(np.float32))
    rows["ee_pos"].append(raw.ee_pos.astype(np.float32))
    rows["gripper"].append(np.float32(raw.gripper))
    rows["step"].append(np.int32(raw.step))
    rows["disagreement"].append(np.zeros(dim, np.float32) if raw.disagreement is None
                                else raw.disagreement.astype(np.float32))
    rows["has_plan"].append(raw.disagreement is not None)
    rows["image_score"].append(np.float32(0.0 if raw.image_score is None else raw.image_score))
    rows["has_image"].append(raw.image_score is not None)
    rows["episode"].append(np.int32(episode))
    rows["seed"].append(np.int64(seed))
    rows["scale"].append(np.asarray(scale, np.float32))


def save_gate_data(data: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    meta = np.frombuffer(json.dumps(data["meta"]).encode(), dtype=np.uint8)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, meta=meta, **data["arrays"])
    return path


def load_gate_data(paths: Sequence[str | Path]) -> dict[str, Any]:
    """One or more ``r2a.gate.data`` files, concatenated (episode ids kept distinct; layouts must agree)."""
    arrays: dict[str, list[np.ndarray]] = {name: [] for name in ARRAYS}
    metas = []
    offset = 0
    for path in paths:
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as f:
                meta = json.loads(bytes(f["meta"]).decode())
                loaded = {name: f[name] for name in ARRAYS if name in f}
        except (OSError, ValueError, KeyError) as err:
            raise R2AInputError(f"{path}: not a gate data file ({err})") from None
        if meta.get("format") != FORMAT or meta.get("format_version") not in READABLE_VERSIONS:
            raise R2AInputError(f"{path}: format {meta.get('format')!r} v{meta.get('format_version')!r} is not gate "
                                f"data this r2a reads ({FORMAT} v{FORMAT_VERSION}); build it with 'r2a gate data'")
        if meta["format_version"] == 1 and "base" in loaded:  # before the holding rule's scale was stored
            loaded["scale"] = np.ones(loaded["base"].shape[:2], np.float32)
        missing = [name for name in ARRAYS if name not in loaded]
        if missing:
            raise R2AInputError(f"{path}: missing array(s) {', '.join(missing)}")
        if metas and (meta["layout"] != metas[0]["layout"] or meta["action_space"] != metas[0]["action_space"]):
            raise R2AInputError(f"{path}: another layout or action space than {paths[0]}; build them alike")
        loaded["episode"] = loaded["episode"] + offset
        offset = int(loaded["episode"].max()) + 1
        for name in ARRAYS:
            arrays[name].append(loaded[name])
        metas.append(meta)
    out = {name: np.concatenate(values) for name, values in arrays.items()}
    meta = {**metas[0], "condition": sum((m["condition"] for m in metas), []),
            "kind": sum((m["kind"] for m in metas), []),
            "sources": sorted({s for m in metas for s in m["sources"]}),
            "seeds": sorted({s for m in metas for s in m["seeds"]}),
            "shift_settings": sorted({s for m in metas for s in m["shift_settings"]}),
            "files": [str(p) for p in paths]}
    return {"arrays": out, "meta": meta}


__all__ = ["FORMAT", "FORMAT_VERSION", "build_gate_data", "load_gate_data", "save_gate_data"]
