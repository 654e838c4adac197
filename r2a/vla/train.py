"""Training the built-in VLA by behaviour cloning: L1 on normalized action chunks (ACT), random-shift augmentation
(DrQ/robomimic), an exponential moving average of the weights for deployment, an auxiliary object-position loss.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA
from r2a_core.yaml_io import apply_overrides, check_fields, read_yaml_mapping
from r2a.vla.checkpoint import Checkpoint, load_checkpoint, read_manifest, save_checkpoint
from r2a.vla.data import TrainingArrays, build_arrays, load_training_episodes
from r2a.vla.features import PROPRIO_DIM, time_feature
from r2a.vla.model import VLANet, VLANetConfig
from r2a.vla.text import PromptEmbedder

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    seed: int = 0
    cameras: list[str] = field(default_factory=lambda: ["agentview", "wrist"])
    image_size: int = 64
    chunk: int = 16
    #: actions executed per chunk at deployment before the policy is queried again
    n_action_steps: int = 8
    steps: int = 15000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    warmup_steps: int = 200
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    shift_pixels: int = 4
    aux_weight: float = 1.0
    conv_channels: int = 32
    keypoints: int = 32
    hidden: int = 512
    #: every n-th episode is held out to report a validation loss (0: none)
    holdout_every: int = 20
    log_every: int = 100
    save_every: int = 2000
    #: torch threads (0: all cores)
    threads: int = 0
    #: relative sampling weight of a task's frames (default 1 each), e.g. {StackThree: 2.0}
    task_weights: dict[str, float] = field(default_factory=dict)
    #: continue from this checkpoint's weights and normalization (same network config); None: from scratch
    init_from: str | None = None

    @classmethod
    def from_yaml(cls, path: str | Path | None, overrides: list[str] | None = None) -> "TrainConfig":
        raw = read_yaml_mapping(path, "policy training config") if path else {}
        raw = apply_overrides(raw, overrides)
        check_fields(raw, {f.name for f in fields(cls)}, str(path or "overrides"))
        config = cls(**raw)
        if config.n_action_steps > config.chunk or min(config.steps, config.batch_size, config.n_action_steps) < 1:
            raise R2AInputError(f"{path}: need steps, batch_size >= 1 and 1 <= n_action_steps <= chunk")
        return config

    def net_config(self) -> VLANetConfig:
        return VLANetConfig(cameras=tuple(self.cameras), image_size=self.image_size, proprio_dim=PROPRIO_DIM,
                            action_dim=OSC_POSE_DELTA.dim, chunk=self.chunk, conv_channels=self.conv_channels,
                            keypoints=self.keypoints, hidden=self.hidden)


@dataclass
class Batches:
    """Normalized training tensors plus the sampling of (augmented) minibatches."""

    arrays: TrainingArrays
    stats: dict[str, np.ndarray]
    text: torch.Tensor  # (num_prompts, 384)
    shift_pixels: int

    def batch(self, index: np.ndarray, rng: np.random.Generator, augment: bool) -> dict[str, Any]:
        a, s = self.arrays, self.stats
        images = {cam: self._images(frames[index], rng, augment) for cam, frames in a.images.items()}
        return {"images": images,
                "proprio": torch.from_numpy((a.proprio[index] - s["proprio_mean"]) / s["proprio_std"]),
                "time": torch.from_numpy(time_feature(a.step[index])[:, None]),
                "text": self.text[torch.from_numpy(a.prompt_index[index]).long()],
                "actions": torch.from_numpy((a.actions[index] - s["action_mean"]) / s["action_std"]),
                "mask": torch.from_numpy(a.action_mask[index]),
                "aux": torch.from_numpy(a.aux[index] * 10.0), "aux_mask": torch.from_numpy(a.aux_mask[index])}

    def _images(self, frames: np.ndarray, rng: np.random.Generator, augment: bool) -> torch.Tensor:
        x = torch.from_numpy(frames).permute(0, 3, 1, 2).float().div_(255.0)
        return random_shift(x, self.shift_pixels, rng) if augment and self.shift_pixels else x


def random_shift(images: torch.Tensor, pad: int, rng: np.random.Generator) -> torch.Tensor:
    """Translate each image by up to ``pad`` pixels (replicate-padded crop), DrQ's augmentation."""
    b, _, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad), mode="replicate")
    oy = torch.from_numpy(rng.integers(0, 2 * pad + 1, b))
    ox = torch.from_numpy(rng.integers(0, 2 * pad + 1, b))
    rows = (oy[:, None] + torch.arange(h))[:, :, None]
    cols = (ox[:, None] + torch.arange(w))[:, None, :]
    return padded[torch.arange(b)[:, None, None], :, rows, cols].permute(0, 3, 1, 2).contiguous()


def normalization_stats(arrays: TrainingArrays) -> dict[str, np.ndarray]:
    valid = arrays.action_mask[:, 0] > 0
    actions = arrays.actions[valid, 0]
    return {"proprio_mean": arrays.proprio.mean(0), "proprio_std": np.maximum(arrays.proprio.std(0), 1e-3),
            "action_mean": actions.mean(0), "action_std": np.maximum(actions.std(0), 1e-2)}


def losses(model: VLANet, batch: dict[str, Any], aux_weight: float) -> tuple[torch.Tensor, dict[str, float]]:
    pred, aux = model(batch["images"], batch["proprio"], batch["time"], batch["text"])
    mask = batch["mask"][..., None]
    action_l1 = ((pred - batch["actions"]).abs() * mask).sum() / (mask.sum() * pred.shape[-1]).clamp(min=1)
    aux_mask = batch["aux_mask"]
    aux_loss = (F.smooth_l1_loss(aux, batch["aux"], reduction="none") * aux_mask).sum() / aux_mask.sum().clamp(min=1)
    total = action_l1 + aux_weight * aux_loss
    return total, {"loss": total.item(), "action_l1": action_l1.item(), "aux": aux_loss.item()}


def _lr(config: TrainConfig, step: int) -> float:
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return 1e-5 + (config.lr - 1e-5) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def _update_ema(ema: VLANet, model: VLANet, decay: float) -> None:
    with torch.no_grad():
        for e, p in zip(ema.state_dict().values(), model.state_dict().values()):
            if e.dtype.is_floating_point:
                e.mul_(decay).add_(p, alpha=1 - decay)
            else:
                e.copy_(p)


def _validation_loss(model: VLANet, data: Batches, rows: np.ndarray, aux_weight: float) -> dict[str, float]:
    if len(rows) == 0:
        return {}
    model.eval()
    sums: dict[str, float] = {}
    chunks = np.array_split(rows, max(1, len(rows) // 256))
    with torch.no_grad():
        for part in chunks:
            _, parts = losses(model, data.batch(part, np.random.default_rng(0), augment=False), aux_weight)
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + v * len(part)
    model.train()
    return {f"val_{k}": v / len(rows) for k, v in sums.items()}


def prepare_data(config: TrainConfig, demo_paths: list[str | Path]) -> tuple[Batches, np.ndarray, np.ndarray,
                                                                              dict[str, np.ndarray], list[dict]]:
    """Load demos, build arrays, embed prompts, split train/held-out episodes, compute normalization."""
    episodes, sources = load_training_episodes(demo_paths)
    arrays = build_arrays(episodes, tuple(config.cameras), config.image_size, config.chunk, aux=config.aux_weight > 0)
    embedder = PromptEmbedder()
    text = torch.from_numpy(embedder.embed_many(arrays.prompts))
    held_out = (arrays.episode % config.holdout_every == config.holdout_every - 1) if config.holdout_every else \
        np.zeros(len(arrays), bool)
    train_rows, val_rows = np.flatnonzero(~held_out), np.flatnonzero(held_out)
    stats = normalization_stats(arrays)
    return Batches(arrays, stats, text, config.shift_pixels), train_rows, val_rows, embedder.cache, sources


def train_policy(config: TrainConfig, demo_paths: list[str | Path], out: str | Path,
                 wandb_mode: str | None = None) -> dict[str, Any]:
    """Train, saving the EMA weights to ``out`` every ``save_every`` steps and at the end; returns a summary."""
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads or os.cpu_count() or 1)
    started = time.time()
    data, train_rows, val_rows, prompts, sources = prepare_data(config, demo_paths)
    log.info("training on %d frames (%d held out) from %d prompts", len(train_rows), len(val_rows), len(prompts))
    model = _initial_model(config, data)
    ema = copy.deepcopy(model).eval()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    run = _wandb(config, out, wandb_mode)
    rng, history = np.random.default_rng(config.seed), []
    sampling = _sampling_probabilities(data.arrays, train_rows, config.task_weights)
    provenance = {"sources": sources, "train_frames": int(len(train_rows)), "heldout_frames": int(len(val_rows)),
                  "torch": torch.__version__, "continued_from": _previous_stage(config.init_from)}
    bar = tqdm(range(config.steps), desc="train builtin VLA", unit="step", dynamic_ncols=True)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = _lr(config, step)
        loss, parts = losses(model, data.batch(rng.choice(train_rows, config.batch_size, p=sampling), rng, True), config.aux_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        _update_ema(ema, model, config.ema_decay if step > config.warmup_steps else 0.0)
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            row = {"step": step + 1, "lr": _lr(config, step), **parts, "elapsed_s": round(time.time() - started, 1)}
            if (step + 1) % config.save_every == 0 or step + 1 == config.steps:
                row.update(_validation_loss(ema, data, val_rows, config.aux_weight))
                _save(ema, data, prompts, config, provenance, history + [row], out)
            history.append(row)
            bar.set_postfix(loss=f"{parts['loss']:.3f}", l1=f"{parts['action_l1']:.3f}")
            if run is not None:
                run.log(row, step=step + 1)
    if run is not None:
        run.finish()
    summary = {"out": str(out), "steps": config.steps, "train_seconds": round(time.time() - started, 1),
               "final": history[-1] if history else {}}
    log.info("trained %d steps in %.0f s → %s", config.steps, summary["train_seconds"], out)
    return summary


def _sampling_probabilities(arrays: TrainingArrays, rows: np.ndarray, task_weights: dict[str, float]) -> np.ndarray:
    """Per-row sampling probability: uniform over frames, scaled by each task's weight."""
    unknown = sorted(set(task_weights) - set(arrays.tasks))
    if unknown:
        raise R2AInputError(f"task_weights names {unknown}, which the demos do not contain ({arrays.tasks})")
    per_task = np.array([float(task_weights.get(task, 1.0)) for task in arrays.tasks])
    weights = per_task[arrays.task_index[rows]]
    return weights / weights.sum()


def _previous_stage(init_from: str | None) -> dict[str, Any] | None:
    """What the starting checkpoint was trained with, so a multi-stage training stays fully recorded."""
    if not init_from:
        return None
    manifest = read_manifest(init_from)
    return {"path": str(init_from), "train_config": manifest.get("train_config"),
            "provenance": manifest.get("provenance")}


def _initial_model(config: TrainConfig, data: Batches) -> VLANet:
    """A fresh network, or the weights of ``init_from`` (whose normalization then replaces the data's)."""
    model = VLANet(config.net_config())
    if config.init_from:
        start = load_checkpoint(config.init_from)
        if start.model.config != model.config:
            raise R2AInputError(f"init_from {config.init_from}: its network {start.model.config} differs from "
                                f"the config's {model.config}")
        model.load_state_dict(start.model.state_dict())
        data.stats = start.stats
        log.info("continuing from %s", config.init_from)
    return model


def _save(ema: VLANet, data: Batches, prompts: dict[str, np.ndarray], config: TrainConfig,
          provenance: dict[str, Any], history: list[dict], out: str | Path) -> None:
    provenance = {**provenance, "history": history}
    save_checkpoint(Checkpoint(model=ema, stats=data.stats, prompts=prompts, action_space=OSC_POSE_DELTA.to_dict(),
                               n_action_steps=config.n_action_steps, train_config=asdict(config),
                               provenance=provenance), out)


def _wandb(config: TrainConfig, out: str | Path, mode: str | None):
    if not mode or mode == "disabled":
        return None
    from r2a_core.wandb_run import start_wandb_run

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    return start_wandb_run("r2a-policy", Path(out).name, asdict(config), mode, Path(out).parent)
