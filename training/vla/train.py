"""Training the built-in VLA by behaviour cloning: L1 on normalized action chunks (ACT), random-shift augmentation
(DrQ/robomimic), an exponential moving average of the weights for deployment, an auxiliary object-position loss.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from r2a.vla.checkpoint import (
    TRAIN_WEIGHTS,
    Checkpoint,
    TrainingState,
    load_checkpoint,
    read_manifest,
    save_checkpoint,
    still_training,
)
from r2a.vla.features import AUX_SCALE, time_feature
from r2a.vla.model import VLANet, best_scored, expand_action_modes
from r2a.vla.text import PromptEmbedder
from r2a_core.errors import R2AInputError
from r2a_core.training import schedule_progress, training_device, training_wandb_run, warmup_cosine_lr
from r2a_core.types import OSC_POSE_DELTA
from training.vla.config import TrainConfig
from training.vla.data import TrainingArrays, load_training_arrays, merge_arrays

log = logging.getLogger(__name__)


@dataclass
class Batches:
    """Normalized training tensors (on the training device) plus the sampling of (augmented) minibatches."""

    arrays: TrainingArrays
    stats: dict[str, np.ndarray]
    text: torch.Tensor  # (num_prompts, 384)
    shift_pixels: int
    time_jitter: int = 0
    device: torch.device = torch.device("cpu")
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    def materialize(self, device: torch.device) -> None:
        """Normalize once with the final statistics and move everything to ``device`` (images stay uint8)."""
        a, s = self.arrays, self.stats
        host = {"proprio": (a.proprio - s["proprio_mean"]) / s["proprio_std"], "time": time_feature(a.step)[:, None],
                "prompt": a.prompt_index.astype(np.int64), "actions": (a.actions - s["action_mean"]) / s["action_std"],
                "mask": a.action_mask, "aux": a.aux * AUX_SCALE, "aux_mask": a.aux_mask,
                **{f"image/{cam}": frames for cam, frames in a.images.items()}}
        self.device = device
        self.tensors = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in host.items()}
        self.text = self.text.to(device)

    def batch(self, index: np.ndarray, rng: np.random.Generator, augment: bool) -> dict[str, Any]:
        if not self.tensors:
            self.materialize(self.device)
        rows = torch.from_numpy(np.asarray(index, np.int64)).to(self.device)
        t = {k: v[rows] for k, v in self.tensors.items()}
        images = {cam: self._images(t[f"image/{cam}"], rng, augment) for cam in self.arrays.images}
        time_input = self._jittered_time(index, rng) if augment and self.time_jitter else t["time"]
        return {"images": images, "proprio": t["proprio"], "time": time_input, "text": self.text[t["prompt"]],
                "actions": t["actions"], "mask": t["mask"], "aux": t["aux"], "aux_mask": t["aux_mask"]}

    def _jittered_time(self, index: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
        steps = self.arrays.step[index] + rng.integers(-self.time_jitter, self.time_jitter + 1, len(index))
        return torch.from_numpy(time_feature(np.maximum(steps, 0))[:, None]).to(self.device)

    def _images(self, frames: torch.Tensor, rng: np.random.Generator, augment: bool) -> torch.Tensor:
        x = frames.permute(0, 3, 1, 2).float().div_(255.0)
        return random_shift(x, self.shift_pixels, rng) if augment and self.shift_pixels else x


def random_shift(images: torch.Tensor, pad: int, rng: np.random.Generator) -> torch.Tensor:
    """Translate each image by up to ``pad`` pixels (replicate-padded crop), DrQ's augmentation."""
    b, _, h, w = images.shape
    device = images.device
    padded = F.pad(images, (pad, pad, pad, pad), mode="replicate")
    oy = torch.from_numpy(rng.integers(0, 2 * pad + 1, b)).to(device)
    ox = torch.from_numpy(rng.integers(0, 2 * pad + 1, b)).to(device)
    rows = (oy[:, None] + torch.arange(h, device=device))[:, :, None]
    cols = (ox[:, None] + torch.arange(w, device=device))[:, None, :]
    batch = torch.arange(b, device=device)[:, None, None]
    return padded[batch, :, rows, cols].permute(0, 3, 1, 2).contiguous()


def normalization_stats(arrays: TrainingArrays) -> dict[str, np.ndarray]:
    valid = arrays.action_mask[:, 0] > 0
    actions = arrays.actions[valid, 0]
    return {"proprio_mean": arrays.proprio.mean(0), "proprio_std": np.maximum(arrays.proprio.std(0), 1e-3),
            "action_mean": actions.mean(0), "action_std": np.maximum(actions.std(0), 1e-2)}


def losses(model: VLANet, batch: dict[str, Any], aux_weight: float,
           wta_epsilon: float = 0.0) -> tuple[torch.Tensor, dict[str, float]]:
    """Action loss (L1; with several hypotheses relaxed winner-takes-all plus a cross-entropy that teaches the
    scores which hypothesis was best) and the auxiliary object-position loss. ``action_l1`` is the L1 of the
    chunk deployment executes (the best-scored one)."""
    chunks, scores, aux = model.hypotheses(batch["images"], batch["proprio"], batch["time"], batch["text"])
    executed = best_scored(chunks, scores)
    mask = batch["mask"][..., None]
    executed_l1 = ((executed - batch["actions"]).abs() * mask).sum() / (mask.sum() * executed.shape[-1]).clamp(min=1)
    aux_mask = batch["aux_mask"]
    aux_loss = (F.smooth_l1_loss(aux, batch["aux"], reduction="none") * aux_mask).sum() / aux_mask.sum().clamp(min=1)
    parts = {"action_l1": executed_l1.item(), "aux": aux_loss.item()}
    if chunks.shape[1] == 1:
        action_loss = executed_l1
    else:
        mask, rows = mask[:, None], torch.arange(len(chunks), device=chunks.device)
        per_mode = ((chunks - batch["actions"][:, None]).abs() * mask).sum(dim=(2, 3))
        per_mode = per_mode / (mask.sum(dim=(2, 3)) * chunks.shape[-1]).clamp(min=1)  # (B, K)
        best = per_mode.detach().argmin(dim=1)
        others = (per_mode.sum(dim=1) - per_mode[rows, best]) / (chunks.shape[1] - 1)
        action_loss = ((1 - wta_epsilon) * per_mode[rows, best] + wta_epsilon * others).mean()
        score_loss = F.cross_entropy(scores, best)
        action_loss = action_loss + score_loss
        parts.update(best_l1=per_mode[rows, best].mean().item(), score_ce=score_loss.item())
    total = action_loss + aux_weight * aux_loss
    return total, {"loss": total.item(), **parts}


#: the learning rate the cosine decays to
FINAL_LR = 1e-5


def _progress(config: TrainConfig, step: int, elapsed_s: float) -> float:
    """Fraction of the post-warmup schedule done: by steps, or by time when a time limit is further along."""
    return schedule_progress(step, config.warmup_steps, config.steps, elapsed_s, config.time_limit_s)


def _lr(config: TrainConfig, step: int, elapsed_s: float = 0.0) -> float:
    return warmup_cosine_lr(config.lr, step, config.warmup_steps, _progress(config, step, elapsed_s), FINAL_LR)


def _update_ema(ema: VLANet, model: VLANet, decay: float) -> None:
    with torch.no_grad():
        for e, p in zip(ema.state_dict().values(), model.state_dict().values()):
            if e.dtype.is_floating_point:
                e.lerp_(p, 1.0 - decay)
            else:
                e.copy_(p)


def _validation_loss(model: VLANet, data: Batches, rows: np.ndarray, aux_weight: float,
                     wta_epsilon: float = 0.0) -> dict[str, float]:
    if len(rows) == 0:
        return {}
    model.eval()
    sums: dict[str, float] = {}
    chunks = np.array_split(rows, max(1, len(rows) // 256))
    with torch.no_grad():
        for part in chunks:
            _, parts = losses(model, data.batch(part, np.random.default_rng(0), augment=False), aux_weight,
                              wta_epsilon)
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + v * len(part)
    model.train()
    return {f"val_{k}": v / len(rows) for k, v in sums.items()}


def prepare_data(config: TrainConfig, demo_paths: list[str | Path]) -> tuple[Batches, np.ndarray, np.ndarray,
                                                                              dict[str, np.ndarray], list[dict]]:
    """Load demos, build arrays, embed prompts, split train/held-out episodes, compute normalization."""
    arrays, sources = _load_arrays(config, demo_paths)
    if config.val_demos:
        held, held_sources = _load_arrays(config, config.val_demos)
        held_out = np.r_[np.zeros(len(arrays), bool), np.ones(len(held), bool)]
        arrays = merge_arrays([arrays, held])
        sources += [{**source, "role": "validation"} for source in held_sources]
    else:
        every = config.holdout_every
        held_out = arrays.episode % every == every - 1 if every else np.zeros(len(arrays), bool)
    embedder = PromptEmbedder(_stored_prompts(config))
    text = torch.from_numpy(embedder.embed_many(arrays.prompts))
    train_rows, val_rows = np.flatnonzero(~held_out), np.flatnonzero(held_out)
    stats = normalization_stats(arrays)
    data = Batches(arrays, stats, text, config.shift_pixels, config.time_jitter)
    return data, train_rows, val_rows, embedder.cache, sources


def _load_arrays(config: TrainConfig, paths: list) -> tuple[TrainingArrays, list[dict]]:
    return load_training_arrays(paths, tuple(config.cameras), config.image_size, config.chunk,
                                aux=config.aux_weight > 0, workers=config.load_workers)


def _stored_prompts(config: TrainConfig) -> dict[str, np.ndarray]:
    """Prompt embeddings already computed by earlier checkpoints (init_from, prompts_from)."""
    stored: dict[str, np.ndarray] = {}
    for path in (config.prompts_from, config.init_from):
        if path:
            stored.update({p: np.asarray(v, np.float32) for p, v in read_manifest(path)["prompts"].items()})
    return stored


def train_policy(config: TrainConfig, demo_paths: list[str | Path], out: str | Path,
                 wandb_mode: str | None = None) -> dict[str, Any]:
    """Train, saving the EMA weights to ``out`` every ``save_every`` steps and at the end; returns a summary.

    A run stopped before its last step (``out`` still holds its training state) resumes where it stopped: the same
    weights, optimizer, sampler and schedule as if it had never stopped."""
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads or os.cpu_count() or 1)
    device = training_device(config.device)
    torch.backends.cudnn.benchmark = device.type == "cuda"  # fixed input shapes: pick the fastest kernels once
    started = time.time()
    data, train_rows, val_rows, prompts, sources = prepare_data(config, demo_paths)
    log.info("training on %d frames (%d held out) from %d prompts, on %s", len(train_rows), len(val_rows),
             len(prompts), device)
    model = _initial_model(config, data).to(device)
    data.materialize(device)
    ema = copy.deepcopy(model).eval()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    run = training_wandb_run("r2a-policy", out, config.to_dict(), wandb_mode)
    rng = np.random.default_rng(config.seed)
    sampling = sampling_probabilities(data.arrays, train_rows, config.task_weights,
                                       (config.release_weight, config.release_window),
                                       config.on_policy_weight)
    provenance = {"sources": sources, "train_frames": int(len(train_rows)), "heldout_frames": int(len(val_rows)),
                  "torch": torch.__version__, "device": str(device),
                  "continued_from": _previous_stage(config.init_from)}
    start, optimized_s, history = _resume(out, config, provenance, model, ema, optimizer, rng, device)
    optimizing_since, step = time.time(), start
    bar = tqdm(range(start, config.steps), desc="train builtin VLA", unit="step", dynamic_ncols=True,
               initial=start, total=config.steps)
    for step in bar:
        elapsed = optimized_s + time.time() - optimizing_since
        lr = _lr(config, step, elapsed)
        batch = data.batch(rng.choice(train_rows, config.batch_size, p=sampling), rng, augment=True)
        parts = _optimize(model, optimizer, batch, config, lr)
        _update_ema(ema, model, config.ema_decay if step > config.warmup_steps else 0.0)
        last = step + 1 == config.steps or (step >= config.warmup_steps and _progress(config, step, elapsed) >= 1.0)
        if (step + 1) % config.log_every == 0 or last:
            row = {"step": step + 1, "lr": lr, **parts, "elapsed_s": round(time.time() - started, 1)}
            if (step + 1) % config.save_every == 0 or last:
                row.update(_validation_loss(ema, data, val_rows, config.aux_weight, config.wta_epsilon))
                resume = None if last else TrainingState(model, optimizer, {
                    "step": step + 1, "sampler": rng.bit_generator.state,
                    "optimized_s": optimized_s + time.time() - optimizing_since})
                _save(ema, data, prompts, config, provenance, history + [row], out, resume)
            history.append(row)
            bar.set_postfix(loss=f"{parts['loss']:.3f}", l1=f"{parts['action_l1']:.3f}")
            if run is not None:
                run.log(row, step=step + 1)
        if last:
            break
    bar.close()
    if run is not None:
        run.finish()
    summary = {"out": str(out), "steps": step + 1, "train_seconds": round(time.time() - started, 1),
               "final": history[-1] if history else {}}
    log.info("trained %d steps in %.0f s → %s", step + 1, summary["train_seconds"], out)
    return summary


#: config fields that decide how fast a run goes, not what it computes: a resumed run may change them
EXECUTION_FIELDS = ("threads", "load_workers", "device")


def _resume(out: str | Path, config: TrainConfig, provenance: dict[str, Any], model: VLANet, ema: VLANet,
            optimizer: torch.optim.Optimizer, rng: np.random.Generator,
            device: torch.device) -> tuple[int, float, list[dict]]:
    """Restore a run that stopped before its last step from ``out`` (weights, average, optimizer, sampler); its
    step, optimizing seconds and history — or (0, 0, []) for a new run. Another config or other demos: an error."""
    from safetensors.torch import load_file

    from r2a_core.train_state import load_train_state

    if not still_training(out):
        return 0, 0.0, []
    manifest = read_manifest(out)
    before = {k: v for k, v in manifest.get("train_config", {}).items() if k not in EXECUTION_FIELDS}
    now = {k: v for k, v in config.to_dict().items() if k not in EXECUTION_FIELDS}
    if before != now:
        changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        raise R2AInputError(f"{out}: holds a run trained with another config ({', '.join(changed)} differ); "
                            "resume it with the same config or give a new --out")
    if not same_sources(manifest.get("provenance", {}).get("sources"), provenance["sources"]):
        raise R2AInputError(f"{out}: holds a run trained on other demonstrations; resume it with the same --demos "
                            "or give a new --out")
    model.load_state_dict(load_file(str(Path(out) / TRAIN_WEIGHTS), device=str(device)))
    ema.load_state_dict(load_checkpoint(out).model.state_dict())
    state = load_train_state(out, optimizer) or {}
    rng.bit_generator.state = state["sampler"]
    history = list(manifest["provenance"].get("history", []))
    provenance["resumed_at"] = [*manifest["provenance"].get("resumed_at", []), int(state["step"])]
    log.info("resuming %s at step %d of %d", out, state["step"], config.steps)
    return int(state["step"]), float(state["optimized_s"]), history


def same_sources(recorded: list[dict] | None, now: list[dict]) -> bool:
    """Whether a checkpoint's recorded demo sources are ``now``'s: the same files, episodes and frames, each file
    the same bytes — its sha256 as :func:`~r2a_core.provenance.sha256_path` gives it or, recorded before issue 47,
    the name-salted :func:`~r2a_core.provenance.legacy_source_sha256` — or the same episodes
    (:func:`~r2a_core.provenance.episodes_sha256`, recorded since: demos re-collected on a new machine hold the same
    episodes in a file whose bytes may differ)."""
    from r2a_core.provenance import legacy_source_sha256

    digests = ("sha256", "content_sha256")
    if not isinstance(recorded, list) or len(recorded) != len(now):
        return False
    for old, new in zip(recorded, now):
        if {k: v for k, v in old.items() if k not in digests} != {k: v for k, v in new.items() if k not in digests}:
            return False
        if old.get("content_sha256") is not None and old["content_sha256"] == new.get("content_sha256"):
            continue
        if old.get("sha256") != new.get("sha256") and old.get("sha256") != legacy_source_sha256(new["path"]):
            return False
    return True


def _optimize(model: VLANet, optimizer: torch.optim.Optimizer, batch: dict[str, Any], config: TrainConfig,
              lr: float) -> dict[str, float]:
    """One gradient step (clipped) at learning rate ``lr``; returns the batch's loss parts."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss, parts = losses(model, batch, config.aux_weight, config.wta_epsilon)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    optimizer.step()
    return parts


def sampling_probabilities(arrays: TrainingArrays, rows: np.ndarray, task_weights: dict[str, float],
                            release: tuple[float, int] = (1.0, 0), on_policy_weight: float = 1.0) -> np.ndarray:
    """Per-row sampling probability: uniform over frames, scaled by each task's weight, by ``release`` =
    (weight, window) for the frames just before a gripper release, and by ``on_policy_weight`` for DAgger frames."""
    unknown = sorted(set(task_weights) - set(arrays.tasks))
    if unknown:
        raise R2AInputError(f"task_weights names {unknown}, which the demos do not contain ({arrays.tasks})")
    per_task = np.array([float(task_weights.get(task, 1.0)) for task in arrays.tasks])
    weights = per_task[arrays.task_index[rows]]
    weight, window = release
    if weight != 1.0:
        weights = weights * np.where(release_frames(arrays, window)[rows], weight, 1.0)
    weights = weights * np.where(arrays.on_policy[rows], on_policy_weight, 1.0)
    return weights / weights.sum()


def release_frames(arrays: TrainingArrays, window: int) -> np.ndarray:
    """Rows within ``window`` steps up to (and including) the first "open" label after a "closed" one."""
    closed = arrays.actions[:, 0, -1] > 0
    same_episode = arrays.episode[1:] == arrays.episode[:-1]
    releases = np.flatnonzero(closed[:-1] & ~closed[1:] & same_episode) + 1
    near = np.zeros(len(arrays), bool)
    for row in releases:
        span = np.arange(max(row - window, 0), row + 1)
        near[span[arrays.episode[span] == arrays.episode[row]]] = True
    return near


def _previous_stage(init_from: str | None) -> dict[str, Any] | None:
    """What the starting checkpoint was trained with, so a multi-stage training stays fully recorded."""
    if not init_from:
        return None
    manifest = read_manifest(init_from)
    return {"path": str(init_from), "train_config": manifest.get("train_config"),
            "provenance": manifest.get("provenance")}


def _initial_model(config: TrainConfig, data: Batches) -> VLANet:
    """A fresh network, or the weights of ``init_from`` (whose normalization then replaces the data's); a
    single-mode start is expanded to ``action_modes`` hypotheses."""
    model = VLANet(config.net_config())
    if config.init_from:
        start = load_checkpoint(config.init_from)
        state = start.model.state_dict()
        modes = start.model.config.action_modes
        if modes == 1 and config.action_modes > 1:
            state = expand_action_modes(state, config.action_modes, config.mode_spread,
                                        torch.Generator().manual_seed(config.seed))
            modes = config.action_modes
        # the weights must fit; whether the clock is read is the new run's choice
        if replace(start.model.config, time_input=config.time_input, action_modes=modes) != model.config:
            raise R2AInputError(f"init_from {config.init_from}: its network {start.model.config} differs from "
                                f"the config's {model.config}")
        model.load_state_dict(state)
        data.stats = start.stats
        log.info("continuing from %s", config.init_from)
    return model


def _save(ema: VLANet, data: Batches, prompts: dict[str, np.ndarray], config: TrainConfig,
          provenance: dict[str, Any], history: list[dict], out: str | Path,
          training: TrainingState | None = None) -> None:
    provenance = {**provenance, "history": history}
    save_checkpoint(Checkpoint(model=ema, stats=data.stats, prompts=prompts, action_space=OSC_POSE_DELTA.to_dict(),
                               n_action_steps=config.n_action_steps, train_config=config.to_dict(),
                               provenance=provenance), out, training)
