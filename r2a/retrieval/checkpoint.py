"""Checkpoint format of the GNN retriever (version 1): a directory with ``manifest.json`` + ``model.safetensors``.

The manifest carries the format name and version, the network shapes, the query layout, the retrieval settings it
was trained with, the graph it was trained on (path and the sha256 of its manifest), the fallback thresholds
calibrated on its training queries, the full training config and its provenance (held-out demo files with their
sha256, shift conditions, seeds), and the loss history. A run that is still training also keeps
``optimizer.safetensors`` + ``train_state.json`` so it resumes where it stopped. No pickle anywhere. Writes are
atomic; readers reject other formats and versions with a one-line error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from r2a.retrieval.features import QueryLayout
from r2a.retrieval.gnn import RetrieverNet, RetrieverNetConfig
from r2a_core.files import atomic_dir, link_or_copy, read_manifest_json
from r2a_core.train_state import load_model_weights, load_train_state, save_model_dir

FORMAT = "r2a.retriever.checkpoint"
FORMAT_VERSION = 1
MANIFEST, WEIGHTS = "manifest.json", "model.safetensors"
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
    out = Path(out)
    with atomic_dir(out, overwrite=True) as tmp:
        for name in KEPT_FILES:  # the training run's own files survive a checkpoint save
            if (out / name).is_file():
                link_or_copy(out / name, tmp / name)
        manifest = {"format": FORMAT, "version": FORMAT_VERSION, "net": ckpt.net.config.to_dict(),
                    "layout": {"history": ckpt.layout.history, "chunk_steps": ckpt.layout.chunk_steps,
                               "action_dim": ckpt.layout.action_dim},
                    "settings": ckpt.settings, "executed_steps": ckpt.executed_steps, "graph": ckpt.graph,
                    "thresholds": ckpt.thresholds, "train_config": ckpt.train_config,
                    "provenance": ckpt.provenance, "history": ckpt.history}
        save_model_dir(tmp, ckpt.net, manifest, MANIFEST, WEIGHTS, optimizer, train_state)
    return out


def read_manifest(path: str | Path) -> dict[str, Any]:
    return read_manifest_json(path, MANIFEST, FORMAT, "version", (FORMAT_VERSION,),
                              "a retriever checkpoint (train one with 'r2a retriever train')")


def load_retriever(path: str | Path, device: str = "cpu") -> RetrieverCheckpoint:
    """Read a checkpoint written by :func:`save_retriever` (weights checked against the network config)."""
    path = Path(path)
    manifest = read_manifest(path)
    net = load_model_weights(RetrieverNet(RetrieverNetConfig(**manifest["net"])), path, WEIGHTS, MANIFEST, device)
    return RetrieverCheckpoint(net=net, layout=QueryLayout(**manifest["layout"]), settings=manifest["settings"],
                               executed_steps=int(manifest["executed_steps"]), graph=manifest["graph"],
                               thresholds=manifest["thresholds"], train_config=manifest["train_config"],
                               provenance=manifest["provenance"], history=manifest["history"])


__all__ = ["FORMAT", "FORMAT_VERSION", "RetrieverCheckpoint", "load_retriever", "load_train_state", "read_manifest",
           "save_retriever"]
