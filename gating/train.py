"""Train the learned gate: ``r2a gate train --config configs/gate/default.yaml --data FILES --out DIR``.

Loss per row (``target: blend``): the blended chunk ``A_base + c_t S ⊙ (A_ref − A_base)`` against the expert's chunk
over the executed steps, squared, summed over the motion dimensions and averaged over the steps, with ``c_t`` the
holding rule's per-step scale the rows carry (closed-loop rows; 1 on rows rebuilt from frames); or (``target:
oracle_s``) S against each row's oracle S (:func:`~r2a.wrapper.gate.closest_gate`, the minimizer of the blend loss
of that row alone), squared, so that every row weighs alike; either plus ``s_penalty · mean S²`` so S stays near 0
wherever the data gives no reason to move (clean states where the base is right must not get worse). Rows where the
holding rule zeroes every step are left out: the gate does not act there. Validation holds out whole episodes. One
process on the CPU here; ``torchrun --nproc_per_node N`` runs data-parallel (DDP: gloo on CPUs, NCCL on GPUs; each
process takes every N-th row of each epoch's order; N = 1 too, which is how scripts/gpu_check.sh checks NCCL on one
GPU), with automatic device selection. Rank 0 writes the checkpoint every ``save_every`` epochs (resumable: a rerun
with the same ``--out`` continues from the last one), ``train_summary.json`` and ``training_curve.png``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from gating.config import GateTrainConfig
from gating.data import load_gate_data
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_path, write_json_atomic
from r2a_core.seeds import HELD_OUT_SEED_START, TEST_SEED_START

log = logging.getLogger(__name__)


def train_gate(config: GateTrainConfig, data_paths: Sequence[str | Path], out: str | Path,
               wandb_mode: str = "disabled", progress: bool = True) -> dict[str, Any]:
    """Train (or resume) a gate on the data files; returns the training summary (rank 0's)."""
    import torch
    from tqdm import tqdm

    from r2a.wrapper.gate_checkpoint import GateCheckpoint, load_gate, save_gate
    from r2a.wrapper.learned_gate import GateLayout, build_gate_net
    from r2a_core.provenance import sha256_path
    from r2a_core.train_state import load_train_state
    from r2a_core.training import training_device, training_wandb_run

    rank, world, local_rank = _distributed()
    device = training_device(config.device, local_rank)
    if config.threads:
        torch.set_num_threads(config.threads)
    out = Path(out)
    data = load_gate_data(data_paths)
    meta, arrays = data["meta"], data["arrays"]
    _check_training_split(meta, config)
    full = GateLayout.from_dict(meta["layout"])
    layout = GateLayout(steps=full.steps, action_dim=full.action_dim, motion_dims=full.motion_dims,
                        signals=tuple(config.signals), camera=full.camera)
    x = feature_matrix(arrays, layout)
    m = list(layout.motion_dims)
    base, ref, expert = (torch.as_tensor(arrays[k][:, :, m], dtype=torch.float32)
                         for k in ("base", "reference", "expert"))
    scale = torch.as_tensor(arrays["scale"], dtype=torch.float32)
    oracle = torch.as_tensor(oracle_targets(arrays, m, config.max_gate), dtype=torch.float32)
    acts = arrays["scale"].any(axis=1)  # the holding rule leaves the gate some step of this row
    weight = torch.as_tensor(row_weights(meta["kind"], config.balance_kinds) * acts, dtype=torch.float32)
    val = (arrays["episode"] % config.holdout_every) == config.holdout_every - 1
    train_idx, val_idx = np.flatnonzero(~val), np.flatnonzero(val)
    if len(train_idx) == 0 or len(val_idx) == 0:
        raise R2AInputError(f"the data has {len(np.unique(arrays['episode']))} episodes: too few to hold out every "
                            f"{config.holdout_every}-th for validation (lower holdout_every or add data)")
    torch.manual_seed(config.seed)
    net = build_gate_net(layout, config.hidden, config.max_gate)
    xt = torch.as_tensor(x, dtype=torch.float32)
    net.x_mean.copy_(xt[train_idx].mean(0))
    net.x_std.copy_(torch.clamp(xt[train_idx].std(0), min=1e-3))
    optimizer = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history: list[dict[str, Any]] = []
    start_epoch = 0
    if (out / "manifest.json").is_file():
        previous = load_gate(out)
        if previous.layout != layout:
            raise R2AInputError(f"{out} holds a gate with another layout ({previous.layout}); use another --out")
        net.load_state_dict(previous.net.state_dict())
        state = load_train_state(out, optimizer)
        if state is not None:
            start_epoch, history = int(state["epoch"]), list(previous.history)
            log.info("resuming gate training at epoch %d", start_epoch)
    net.to(device)
    model = net
    backend = torch.distributed.get_backend() if torch.distributed.is_initialized() else None
    if backend is not None:
        model = torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None)
    tensors = [t.to(device) for t in (xt, base, ref, expert, weight, scale, oracle)]
    provenance = {"data": [{"path": str(p), "sha256": sha256_path(p)} for p in data_paths],
                  "best_constant": best_constant_gate(arrays, train_idx[acts[train_idx]], m, config.max_gate),
                  "seeds": meta["seeds"], "shift_settings": meta["shift_settings"], "rows": int(len(x)),
                  "train_rows": int(len(train_idx)), "val_rows": int(len(val_idx)), "processes": world,
                  "device": str(device)}
    run = training_wandb_run("r2a-gate", out, config.to_dict(), wandb_mode) if rank == 0 else None
    rng = np.random.default_rng(config.seed)
    for _ in range(start_epoch):  # the same batch order as an uninterrupted run
        rng.permutation(train_idx)
    bar = tqdm(range(start_epoch, config.epochs), desc="gate", unit="epoch", disable=not progress or rank != 0)
    for epoch in bar:
        t0 = time.perf_counter()
        order = rng.permutation(train_idx)
        order = order[: len(order) // world * world][rank::world]  # equal shares: every rank steps alike
        model.train()
        losses = []
        for i in range(0, len(order), config.batch_size):
            idx = torch.as_tensor(order[i:i + config.batch_size], device=device)
            loss = _loss(model, *(t[idx] for t in tensors), config.s_penalty, config.target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        row = {"epoch": epoch + 1, "train_loss": float(np.mean(losses)) if losses else None,
               "epoch_s": round(time.perf_counter() - t0, 3),
               **_validate(net, tensors, val_idx, config.s_penalty, config.target)}
        history.append(row)
        bar.set_postfix(train=f"{row['train_loss']:.4f}", val=f"{row['val_loss']:.4f}")
        if run is not None:
            run.log(row)
        last = epoch + 1 == config.epochs
        if rank == 0 and ((epoch + 1) % config.save_every == 0 or last):
            ckpt = GateCheckpoint(net=net, layout=layout, action_space=meta["action_space"], hidden=config.hidden,
                                  max_gate=config.max_gate, image_stats=meta.get("image_stats"),
                                  train_config=config.to_dict(), provenance=provenance, history=history)
            save_gate(ckpt, out, optimizer, {"epoch": epoch + 1})
    summary = {"out": str(out), "epochs": config.epochs, "rows": provenance["rows"], "processes": world,
               "device": str(device), "ddp_backend": backend, "final": history[-1] if history else None,
               "epoch_s_mean": round(float(np.mean([h["epoch_s"] for h in history])), 3) if history else None}
    if rank == 0:
        write_json_atomic(out / "train_summary.json", {**summary, "history": history})
        plot_training_curve(history, out / "training_curve.png")
    if run is not None:
        run.finish()
    if backend is not None:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return summary


def _check_training_split(meta: dict[str, Any], config: GateTrainConfig) -> None:
    """The data's shift settings must be the config's training split, and every seed below the test seeds."""
    other = sorted(set(meta["shift_settings"]) - set(config.training_shifts))
    if other:
        raise R2AInputError(f"the gate data holds shift settings outside the training split ({', '.join(other)}); "
                            f"training_shifts: {', '.join(config.training_shifts)}")
    test = [s for s in meta["seeds"] if s >= TEST_SEED_START]
    if test:
        raise R2AInputError(f"the gate data holds episodes of seed {test[0]} ({TEST_SEED_START}+ are the benchmark's "
                            f"test seeds, {HELD_OUT_SEED_START}+ held-out evaluation): train only below "
                            f"{TEST_SEED_START}")


def best_constant_gate(arrays: dict[str, np.ndarray], rows: np.ndarray, motion: list[int],
                       max_gate: float) -> list[float]:
    """The constant (translation, rotation) S on a 0.05 grid up to ``max_gate`` with the least squared error of the
    blend against the expert on ``rows`` (the training split): what the ``r2a-fixed`` ablation runs."""
    base, ref, expert = (arrays[k][rows][:, :, motion].astype(np.float64) for k in ("base", "reference", "expert"))
    c = arrays["scale"][rows].astype(np.float64)[:, :, None]  # the holding rule
    grid = np.round(np.arange(0.0, max_gate + 1e-9, 0.05), 2)
    best = []
    for dims in (slice(0, 3), slice(3, 6)):
        b, r, e = base[..., dims], ref[..., dims], expert[..., dims]
        errors = [float((((b + c * s * (r - b)) - e) ** 2).sum(-1).mean()) for s in grid]
        best.append(float(grid[int(np.argmin(errors))]))
    return best


def row_weights(kinds: Sequence[str], balance: bool) -> np.ndarray:
    """Per-row loss weights, mean 1: all ones, or (``balance``) each kind's rows sharing an equal part of the total."""
    kinds = np.asarray(kinds)
    weights = np.ones(len(kinds))
    if balance:
        names, counts = np.unique(kinds, return_counts=True)
        for name, count in zip(names, counts):
            weights[kinds == name] = len(kinds) / (len(names) * count)
    return weights


def oracle_targets(arrays: dict[str, np.ndarray], motion: list[int], max_gate: float) -> np.ndarray:
    """Each row's oracle S on the ``motion`` dims ``(rows, M)``: the S in the bounds whose blend, under the row's
    holding-rule scale, is closest to the expert's chunk."""
    from r2a.wrapper.gate import closest_gate

    base, ref, expert = (arrays[k][:, :, motion] for k in ("base", "reference", "expert"))
    return closest_gate(base, ref, expert, arrays["scale"], max_gate)


def _loss(model: Any, x: Any, base: Any, ref: Any, expert: Any, weight: Any, scale: Any, oracle: Any,
          s_penalty: float, target: str) -> Any:
    return _loss_of(model(x), base, ref, expert, weight, scale, oracle, s_penalty, target)


def _loss_of(s: Any, base: Any, ref: Any, expert: Any, weight: Any, scale: Any, oracle: Any, s_penalty: float,
             target: str) -> Any:
    """The training loss of the gate's S ``(B, M)`` on a batch."""
    if target == "oracle_s":
        per_row = ((s - oracle) ** 2).mean(-1)
    else:
        blended = base + scale[:, :, None] * s[:, None, :] * (ref - base)
        per_row = ((blended - expert) ** 2).sum(-1).mean(-1)
    return (weight * per_row).sum() / weight.sum() + s_penalty * (s ** 2).mean()


def _validate(net: Any, tensors: list[Any], val_idx: np.ndarray, s_penalty: float, target: str) -> dict[str, Any]:
    """Validation loss, the translation error (mm per step) of the base and of the blend, the mean S per dim."""
    import torch

    from r2a.retrieval.motion import DELTA_EE_SCALE

    x, base, ref, expert, weight, scale, oracle = (t[torch.as_tensor(val_idx, device=t.device)] for t in tensors)
    net.eval()
    with torch.no_grad():
        s = net(x)
        loss = float(_loss_of(s, base, ref, expert, weight, scale, oracle, s_penalty, target))
        blended = base + scale[:, :, None] * s[:, None, :] * (ref - base)

        def mm(chunk: Any) -> float:
            return float(torch.linalg.norm((chunk - expert)[..., :3], dim=-1).mean()) * DELTA_EE_SCALE[0] * 1000

        return {"val_loss": loss, "val_base_mm": round(mm(base), 3), "val_gate_mm": round(mm(blended), 3),
                "val_ref_mm": round(mm(ref), 3), "val_mean_S": [round(v, 4) for v in s.mean(0).tolist()],
                "val_oracle_S": [round(v, 4) for v in oracle.mean(0).tolist()]}


def feature_matrix(arrays: dict[str, np.ndarray], layout: Any) -> np.ndarray:
    """The gate's input vector of every stored row (the run-time code, row by row)."""
    from r2a.wrapper.learned_gate import GateRaw, features_from_raw

    rows = []
    for i in range(len(arrays["base"])):
        raw = GateRaw(base=arrays["base"][i].astype(np.float64), reference=arrays["reference"][i].astype(np.float64),
                      retrieval=arrays["retrieval"][i].astype(np.float64),
                      ee_pos=arrays["ee_pos"][i].astype(np.float64),
                      gripper=float(arrays["gripper"][i]), step=int(arrays["step"][i]),
                      disagreement=arrays["disagreement"][i].astype(np.float64) if arrays["has_plan"][i] else None,
                      image_score=float(arrays["image_score"][i]) if arrays["has_image"][i] else None)
        rows.append(features_from_raw(raw, layout))
    return np.stack(rows)


def _distributed() -> tuple[int, int, int]:
    """(rank, world size, local rank); under torchrun, one process too, initializes the process group (gloo on CPU,
    NCCL on GPU)."""
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if "MASTER_ADDR" not in os.environ or "RANK" not in os.environ:  # not launched by torchrun
        return 0, 1, 0
    if not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        torch.distributed.init_process_group(backend=backend)
    return torch.distributed.get_rank(), world, int(os.environ.get("LOCAL_RANK", "0"))


def plot_training_curve(history: list[dict[str, Any]], path: Path) -> None:
    """Train and validation loss, and the validation translation error of base and blend, per epoch."""
    from matplotlib.figure import Figure

    if not history:
        return
    epochs = [h["epoch"] for h in history]
    fig = Figure(figsize=(9, 3.2), layout="constrained")
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    ax1.plot(epochs, [h["train_loss"] for h in history], label="train")
    ax1.plot(epochs, [h["val_loss"] for h in history], label="validation")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("loss")
    ax1.legend(fontsize="small")
    for key, label in (("val_base_mm", "base chunk"), ("val_gate_mm", "learned blend"), ("val_ref_mm", "reference")):
        ax2.plot(epochs, [h[key] for h in history], label=label)
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("validation translation error (mm / step)")
    ax2.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)


__all__ = ["best_constant_gate", "feature_matrix", "oracle_targets", "plot_training_curve", "train_gate"]
