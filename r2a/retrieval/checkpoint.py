"""Checkpoint format of the GNN retriever (version 1): a directory with ``manifest.json`` + ``model.safetensors``.

The manifest carries the format name and version, the network shapes, the query layout, the retrieval settings it
was trained with, the graph it was trained on (path and the sha256 of its manifest), the fallback thresholds
calibrated on its training queries, the full training config and its provenance (held-out demo files with their
sha256, shift conditions, seeds), and the loss history. A run that is still training also keeps
``optimizer.safetensors`` + ``train_state.json`` so it resumes where it stopped. No pickle anywhere. Writes are
atomic; readers reject other formats and versions with a one-line error.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from r2a.retrieval.features import QueryLayout
from r2a.retrieval.gnn import RetrieverNet, RetrieverNetConfig
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_dir, read_manifest_json

FORMAT = "r2a.retriever.checkpoint"
FORMAT_VERSION = 1
MANIFEST, WEIGHTS = "manifest.json", "model.safetensors"
OPTIMIZER, TRAIN_STATE = "optimizer.safetensors", "train_state.json"
#: files of a training run kept in the checkpoint directory across saves (the query cache, the summary)
KEPT_FILES = ("queries.npz", "train_summary.json")


@dataclass
class RetrieverCheckpoint:
    net: RetrieverNet
    layout: QueryLayout
    settings: dict[str, Any]
    executed_steps: int
    graph: dict[str, Any]  # {"path", "manifest_sha256", "nodes"}
    thresholds: dict[str, float]  # calibrated fallback thresholds (e.g. max_seed_distance)
    train_config: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)


def save_retriever(ckpt: RetrieverCheckpoint, out: str | Path, optimizer: torch.optim.Optimizer | None = None,
                   train_state: dict[str, Any] | None = None) -> Path:
    """Write ``ckpt`` (and, while training, the optimizer and step) atomically to ``out``."""
    from safetensors.torch import save_file

    out = Path(out)
    with atomic_dir(out, overwrite=True) as tmp:
        for name in KEPT_FILES:  # the training run's own files survive a checkpoint save
            if (out / name).is_file():
                _link_or_copy(out / name, tmp / name)
        save_file({k: v.detach().contiguous().cpu() for k, v in ckpt.net.state_dict().items()}, str(tmp / WEIGHTS))
        manifest = {"format": FORMAT, "version": FORMAT_VERSION, "net": ckpt.net.config.to_dict(),
                    "layout": {"history": ckpt.layout.history, "chunk_steps": ckpt.layout.chunk_steps,
                               "action_dim": ckpt.layout.action_dim},
                    "settings": ckpt.settings, "executed_steps": ckpt.executed_steps, "graph": ckpt.graph,
                    "thresholds": ckpt.thresholds, "train_config": ckpt.train_config,
                    "provenance": ckpt.provenance, "history": ckpt.history}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        if optimizer is not None:
            tensors, groups = _optimizer_tensors(optimizer)
            save_file(tensors, str(tmp / OPTIMIZER))
            (tmp / TRAIN_STATE).write_text(json.dumps({**(train_state or {}), "param_groups": groups}))
    return out


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    state = optimizer.state_dict()
    tensors = {f"{index}.{name}": value.detach().contiguous().cpu() if torch.is_tensor(value) else torch.tensor(value)
               for index, entry in state["state"].items() for name, value in entry.items()}
    return tensors, state["param_groups"]


def read_manifest(path: str | Path) -> dict[str, Any]:
    return read_manifest_json(path, MANIFEST, FORMAT, "version", (FORMAT_VERSION,),
                              "a retriever checkpoint (train one with 'r2a retriever train')")


def load_retriever(path: str | Path, device: str = "cpu") -> RetrieverCheckpoint:
    """Read a checkpoint written by :func:`save_retriever` (weights checked against the network config)."""
    from safetensors.torch import load_file

    path = Path(path)
    manifest = read_manifest(path)
    if not (path / WEIGHTS).is_file():
        raise R2AInputError(f"{path}: {WEIGHTS} is missing")
    net = RetrieverNet(RetrieverNetConfig(**manifest["net"]))
    try:
        net.load_state_dict(load_file(str(path / WEIGHTS), device=device))
    except (RuntimeError, OSError) as err:
        raise R2AInputError(f"{path / WEIGHTS}: does not match the network in {MANIFEST} ({str(err)[:200]})") from None
    net.eval()
    return RetrieverCheckpoint(net=net, layout=QueryLayout(**manifest["layout"]), settings=manifest["settings"],
                               executed_steps=int(manifest["executed_steps"]), graph=manifest["graph"],
                               thresholds=manifest["thresholds"], train_config=manifest["train_config"],
                               provenance=manifest["provenance"], history=manifest["history"])


def load_train_state(path: str | Path, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """Restore ``optimizer`` from a checkpoint that was still training; returns its state (step, rng) or None."""
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / TRAIN_STATE).is_file() or not (path / OPTIMIZER).is_file():
        return None
    meta = json.loads((path / TRAIN_STATE).read_text())
    tensors = load_file(str(path / OPTIMIZER))
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta.pop("param_groups")})
    return meta


__all__ = ["FORMAT", "FORMAT_VERSION", "RetrieverCheckpoint", "load_retriever", "load_train_state", "read_manifest",
           "save_retriever"]
