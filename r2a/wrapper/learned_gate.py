"""The learned dimension-wise gate: a small network that says, per chunk and motion dimension, how far to trust
the reference over the frozen base policy.

Inputs (:func:`gate_features`, the same code at training and run time): the executed base actions, the reference
and their difference (motion dims, every executed step), the mean absolute difference per dimension, retrieval
confidence (entropy, top weight, seed distance), the progress estimate p̂, the EE position and opening, elapsed
time — and two signals of *the base being unreliable* that need nothing from the base but its outputs:

* ``disagreement``: how much the base's new chunk disagrees, per dimension, with what its previous chunk planned
  for the same steps (a policy that is lost changes its mind);
* ``image_ood``: how unlike the demonstrations the third-person image is (:mod:`r2a_core.visual_ood`, statistics
  computed from demo files). Images reach the gate only, never retrieval.

Each signal can be left out (``signals``); a gate trained without one is that signal's ablation. Output:
``S = max_gate · σ(net(x))`` on dx dy dz drx dry drz, broadcast over the chunk's steps, 0 on the gripper — inside
``[0, max_gate]`` for any input. A non-finite input raises :class:`GateInputError`; the wrapper then falls back
to the base chunk and says so (``gate_input``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from r2a.wrapper.gate import GateInputs
from r2a_core.errors import R2AInputError
from r2a_core.types import ActionSpace, image_key

#: the optional "base is unreliable" signals
SIGNALS = ("disagreement", "image_ood")
#: elapsed steps are divided by this (a long episode)
STEP_SCALE = 500.0


class GateInputError(ValueError):
    """A gate input was NaN or infinite: the wrapper falls back to the base chunk."""


@dataclass(frozen=True)
class GateLayout:
    """What the gate reads: the executed steps, the action space's motion dims, the signals, the camera."""

    steps: int = 8
    action_dim: int = 7
    motion_dims: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
    signals: tuple[str, ...] = SIGNALS
    camera: str = "agentview"

    def __post_init__(self) -> None:
        bad = [s for s in self.signals if s not in SIGNALS]
        if bad:
            raise R2AInputError(f"unknown gate signal {bad[0]!r}; signals: {', '.join(SIGNALS)}")

    @property
    def dim(self) -> int:
        m = len(self.motion_dims)
        d = 3 * self.steps * m + m + 4 + 4 + 1
        if "disagreement" in self.signals:
            d += m + 1
        if "image_ood" in self.signals:
            d += 2
        return d

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GateLayout":
        return cls(steps=int(d["steps"]), action_dim=int(d["action_dim"]), motion_dims=tuple(d["motion_dims"]),
                   signals=tuple(d["signals"]), camera=str(d.get("camera", "agentview")))


@dataclass
class GateRaw:
    """The gate's inputs for one chunk before they become a vector (what gate training data stores)."""

    base: np.ndarray  # (steps, A)
    reference: np.ndarray  # (steps, A)
    retrieval: np.ndarray  # (4,) entropy, top weight, seed distance, progress
    ee_pos: np.ndarray  # (3,)
    gripper: float
    step: int
    disagreement: np.ndarray | None  # (A,) mean |new − previously planned| per dim, None without a plan
    image_score: float | None  # visual-OOD score of the camera image, None without an image or stats


def gate_raw(inputs: GateInputs, layout: GateLayout, image_scorer: Any = None) -> GateRaw:
    """Collect one chunk's inputs (the image is scored here; everything else is copied)."""
    r = inputs.retrieval
    plan, disagreement = inputs.previous_plan, None
    if plan is not None:
        n = min(len(plan), len(inputs.base))
        disagreement = np.abs(np.asarray(inputs.base, np.float64)[:n] - np.asarray(plan, np.float64)[:n]).mean(axis=0)
    image = inputs.observation.get(image_key(layout.camera)) if inputs.observation else None
    score = None if image is None or image_scorer is None else float(image_scorer.score(layout.camera, image))
    return GateRaw(base=pad_steps(inputs.base, layout.steps), reference=pad_steps(inputs.reference, layout.steps),
                   retrieval=np.array([r.get("entropy", 0.0), r.get("top_weight", 0.0), r.get("seed_distance", 0.0),
                                       r.get("progress", 0.0)], np.float64),
                   ee_pos=np.asarray(inputs.proprio.get("ee_pos", np.zeros(3)), np.float64).reshape(3),
                   gripper=float(np.asarray(inputs.proprio.get("gripper", 0.0)).reshape(())), step=int(inputs.step),
                   disagreement=disagreement, image_score=score)


def features_from_raw(raw: GateRaw, layout: GateLayout) -> np.ndarray:
    """The gate's input vector; :class:`GateInputError` when any part is non-finite."""
    m = list(layout.motion_dims)
    base, ref = raw.base[:, m], raw.reference[:, m]
    diff = ref - base
    parts: list[Any] = [base.ravel(), ref.ravel(), diff.ravel(), np.abs(diff).mean(axis=0), raw.retrieval,
                        raw.ee_pos, [raw.gripper], [raw.step / STEP_SCALE]]
    if "disagreement" in layout.signals:
        parts += [np.zeros(len(m)), [0.0]] if raw.disagreement is None else [np.asarray(raw.disagreement)[m], [1.0]]
    if "image_ood" in layout.signals:
        parts += [[0.0], [0.0]] if raw.image_score is None else [[np.log1p(max(raw.image_score, 0.0))], [1.0]]
    x = np.concatenate([np.asarray(p, np.float64).ravel() for p in parts])
    if not np.isfinite(x).all():
        raise GateInputError("a gate input is NaN or infinite")
    return x


def gate_features(inputs: GateInputs, layout: GateLayout, image_scorer: Any = None) -> np.ndarray:
    """The gate's input vector for one chunk (:func:`gate_raw` then :func:`features_from_raw`)."""
    return features_from_raw(gate_raw(inputs, layout, image_scorer), layout)


def pad_steps(chunk: np.ndarray, steps: int) -> np.ndarray:
    """The first ``steps`` rows, the last one repeated when the chunk is shorter (a short final chunk)."""
    chunk = np.asarray(chunk, np.float64)
    if len(chunk) >= steps:
        return chunk[:steps]
    return np.concatenate([chunk, np.repeat(chunk[-1:], steps - len(chunk), axis=0)])


def build_gate_net(layout: GateLayout, hidden: int = 64, max_gate: float = 0.5) -> Any:
    """The network: normalization buffers, a 2-hidden-layer MLP, ``max_gate · σ`` per motion dimension."""
    import torch
    from torch import nn

    class GateNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layout, self.hidden, self.max_gate = layout, hidden, max_gate
            self.register_buffer("x_mean", torch.zeros(layout.dim))
            self.register_buffer("x_std", torch.ones(layout.dim))
            self.mlp = nn.Sequential(nn.Linear(layout.dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                     nn.Linear(hidden, len(layout.motion_dims)))
            nn.init.constant_(self.mlp[-1].bias, -3.0)  # start near S = 0: the base's own chunk

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = (x - self.x_mean) / self.x_std
            return self.max_gate * torch.sigmoid(self.mlp(torch.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)))

    return GateNet()


@dataclass(frozen=True)
class GateArrays:
    """A trained :func:`build_gate_net` network as float32 arrays, for the wrapper's one chunk at a time.

    The same function (normalize, non-finite → 0, three linear layers with SiLU between, ``max_gate · σ``) in a
    dozen numpy calls on a ~170-number vector, where the torch module spends most of its time entering modules
    and ``inference_mode``; derived from the network at load (the checkpoint is unchanged), equal to it within
    float32 rounding (``tests/test_gate.py``). Training keeps the torch network.
    """

    mean: np.ndarray
    std: np.ndarray
    weights: tuple[np.ndarray, ...]  # (in, out) per linear layer
    biases: tuple[np.ndarray, ...]
    max_gate: float

    @classmethod
    def of(cls, net: Any) -> "GateArrays":
        import torch

        linears = [m for m in net.mlp if isinstance(m, torch.nn.Linear)]
        as_array = lambda t: t.detach().cpu().numpy().astype(np.float32)  # noqa: E731
        return cls(mean=as_array(net.x_mean), std=as_array(net.x_std),
                   weights=tuple(np.ascontiguousarray(as_array(m.weight).T) for m in linears),
                   biases=tuple(as_array(m.bias) for m in linears), max_gate=float(net.max_gate))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """``S`` on the motion dims (float64) for one feature vector ``x``."""
        z = (np.asarray(x, np.float32) - self.mean) / self.std
        if not np.isfinite(z).all():  # as the module's nan_to_num (the features themselves are finite)
            z = np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            z = z @ w + b
            if i < last:
                z = z * _sigmoid(z)
        return (self.max_gate * _sigmoid(z)).astype(np.float64)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """σ(z) as ``(1 + tanh(z/2)) / 2``: no overflow for large negative ``z``."""
    return 0.5 * (1.0 + np.tanh(0.5 * z))


@dataclass
class LearnedGate:
    """The Gate protocol around a trained :func:`build_gate_net` network (CPU, one chunk at a time); ``fast``
    runs it as :class:`GateArrays` (the default), otherwise as the torch module itself."""

    net: Any
    layout: GateLayout
    action_space: ActionSpace
    image_scorer: Any = None
    last_features: np.ndarray | None = field(default=None, repr=False)
    fast: bool = True
    arrays: GateArrays | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.fast:
            self.arrays = GateArrays.of(self.net)

    def __call__(self, inputs: GateInputs) -> np.ndarray:
        x = gate_features(inputs, self.layout, self.image_scorer)
        self.last_features = x
        s = self.arrays(x) if self.arrays is not None else self._torch(x)
        full = np.zeros(self.action_space.dim)
        full[list(self.layout.motion_dims)] = s
        return np.broadcast_to(full, np.shape(inputs.base)).copy()

    def _torch(self, x: np.ndarray) -> np.ndarray:
        import torch

        from r2a.retrieval.gnn_fast import one_torch_thread

        with one_torch_thread(), torch.inference_mode():
            return self.net(torch.as_tensor(x, dtype=torch.float32)[None])[0].numpy().astype(np.float64)

    def reset(self) -> None:
        self.last_features = None


__all__ = ["SIGNALS", "GateArrays", "GateInputError", "GateLayout", "GateRaw", "LearnedGate", "build_gate_net",
           "features_from_raw", "gate_features", "gate_raw", "pad_steps"]
