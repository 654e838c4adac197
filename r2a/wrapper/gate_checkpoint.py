"""Checkpoint format of the learned gate (version 1): a directory with ``manifest.json`` + ``model.safetensors``.

The manifest carries the format and version, the network (hidden width, ``max_gate``), the input layout (executed
steps, action dim, motion dims, signals, camera), the action space it was trained for (kind and dim: a checkpoint
for another space is refused), the image statistics it scored images against (path and sha256), the training
config, the seeds and shift settings of its training data (the benchmark refuses to score a gate on any seed it
saw), and the loss history. A run still training also keeps the optimizer and step (r2a_core/train_state.py).
Writes are atomic; no pickle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r2a.wrapper.learned_gate import GateLayout, build_gate_net
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_dir, link_or_copy, read_manifest_json
from r2a_core.train_state import load_model_weights, save_model_dir
from r2a_core.types import ActionSpace

FORMAT = "r2a.gate.checkpoint"
FORMAT_VERSION = 1
MANIFEST, WEIGHTS = "manifest.json", "model.safetensors"
#: files of a training run kept across saves
KEPT_FILES = ("train_summary.json", "training_curve.png")


@dataclass
class GateCheckpoint:
    net: Any
    layout: GateLayout
    action_space: dict[str, Any]  # {"kind", "dim"}
    hidden: int
    max_gate: float
    image_stats: dict[str, Any] | None = None  # {"path", "sha256"}
    train_config: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)  # data files, seeds, shift settings
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def seeds(self) -> list[int]:
        """Every episode seed its training data came from (the benchmark's split check reads them)."""
        return sorted({int(s) for s in self.provenance.get("seeds", [])})


def save_gate(ckpt: GateCheckpoint, out: str | Path, optimizer: Any = None,
              train_state: dict[str, Any] | None = None) -> Path:
    out = Path(out)
    with atomic_dir(out, overwrite=True) as tmp:
        for name in KEPT_FILES:
            if (out / name).is_file():
                link_or_copy(out / name, tmp / name)
        manifest = {"format": FORMAT, "version": FORMAT_VERSION, "layout": ckpt.layout.to_dict(),
                    "action_space": ckpt.action_space, "hidden": ckpt.hidden, "max_gate": ckpt.max_gate,
                    "image_stats": ckpt.image_stats, "train_config": ckpt.train_config,
                    "provenance": ckpt.provenance, "history": ckpt.history}
        save_model_dir(tmp, ckpt.net, manifest, MANIFEST, WEIGHTS, optimizer, train_state)
    return out


def read_gate_manifest(path: str | Path) -> dict[str, Any]:
    return read_manifest_json(path, MANIFEST, FORMAT, "version", (FORMAT_VERSION,),
                              "a gate checkpoint (train one with 'r2a gate train')")


def load_gate(path: str | Path, action_space: ActionSpace | None = None) -> GateCheckpoint:
    """Read a gate checkpoint; with ``action_space``, refuse one trained for another space or dimension count."""
    path = Path(path)
    manifest = read_gate_manifest(path)
    space = manifest["action_space"]
    if action_space is not None and (space.get("kind") != action_space.kind
                                     or int(space.get("dim", -1)) != action_space.dim):
        raise R2AInputError(f"{path}: this gate was trained for {space.get('kind')} actions with {space.get('dim')} "
                            f"dims; the base policy acts in {action_space.kind} with {action_space.dim}")
    layout = GateLayout.from_dict(manifest["layout"])
    net = build_gate_net(layout, int(manifest["hidden"]), float(manifest["max_gate"]))
    load_model_weights(net, path, WEIGHTS, MANIFEST)
    return GateCheckpoint(net=net, layout=layout, action_space=space, hidden=int(manifest["hidden"]),
                          max_gate=float(manifest["max_gate"]), image_stats=manifest.get("image_stats"),
                          train_config=manifest.get("train_config", {}), provenance=manifest.get("provenance", {}),
                          history=manifest.get("history", []))


__all__ = ["FORMAT", "FORMAT_VERSION", "GateCheckpoint", "load_gate", "read_gate_manifest", "save_gate"]
