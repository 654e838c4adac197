"""The built-in vision-language-action network: small enough to train on a CPU, rich enough to need pixels.

Per camera a from-scratch convolutional encoder ending in a spatial softmax (robomimic's choice: expected image
coordinates of learned keypoints, which localize small objects far better than global pooling); a frozen
sentence embedding of the instruction (computed outside, 384-d MiniLM); proprio and (optionally) the elapsed
time; an MLP trunk; a head that predicts a chunk of ``chunk`` future actions. An auxiliary head predicts the
task objects' positions relative to the gripper — used only as a training signal, never as an input.

With ``action_modes`` K > 1 the head predicts K alternative chunks and a score for each (multiple-hypothesis
prediction, trained winner-takes-all): where the labels of states the network cannot tell apart disagree
(descend here, back up there), a single L1 head settles between them; K hypotheses keep each alternative whole
and deployment executes the best-scored one. (Fine-tuned from the shipped checkpoint it stacked worse;
docs/experiments/builtin_vla.md.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class VLANetConfig:
    cameras: tuple[str, ...] = ("agentview", "wrist")
    image_size: int = 64
    proprio_dim: int = 10  # EE position (3), rotation 6-D (6), gripper opening (1)
    text_dim: int = 384
    action_dim: int = 7
    chunk: int = 16
    conv_channels: int = 32
    keypoints: int = 32
    hidden: int = 512
    aux_dim: int = 9  # 3 object slots × position relative to the gripper
    #: alternative chunks the head predicts (1: a single L1-regressed chunk)
    action_modes: int = 1
    #: feed the elapsed time to the network; False zeroes it (same weights, so a timed checkpoint can continue
    #: without the clock): a policy slower than its demonstrations otherwise meets times it never saw
    time_input: bool = True

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cameras"] = list(self.cameras)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "VLANetConfig":
        return cls(**{**d, "cameras": tuple(d["cameras"])})


class SpatialSoftmax(nn.Module):
    """Feature map (B, C, H, W) → expected (x, y) in [-1, 1] of each of ``keypoints`` learned heat maps."""

    def __init__(self, channels: int, keypoints: int) -> None:
        super().__init__()
        self.to_keypoints = nn.Conv2d(channels, keypoints, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        heat = self.to_keypoints(features)
        b, k, h, w = heat.shape
        attention = F.softmax(heat.reshape(b, k, h * w), dim=-1)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h, device=heat.device),
                                torch.linspace(-1, 1, w, device=heat.device), indexing="ij")
        grid = torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=-1)  # (H*W, 2)
        return (attention @ grid).reshape(b, 2 * k)


def _conv(cin: int, cout: int, kernel: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2), nn.GroupNorm(8, cout), nn.ReLU(True))


class ConvEncoder(nn.Module):
    """64×64 RGB → keypoint coordinates plus pooled appearance features (3 conv layers, stride 4 overall).

    Three layers rather than four: on a 2-core CPU a training step is 1.6× faster (measured side by side).
    """

    def __init__(self, channels: int, keypoints: int, out_dim: int) -> None:
        super().__init__()
        c = channels
        self.convs = nn.Sequential(_conv(3, c, 5, 2), _conv(c, 2 * c, 3, 2), _conv(2 * c, 2 * c, 3, 1))
        self.keypoints = SpatialSoftmax(2 * c, keypoints)
        self.out = nn.Sequential(nn.Linear(2 * keypoints + 2 * c, out_dim), nn.ReLU(True))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        features = self.convs(image)
        pooled = features.mean(dim=(2, 3))
        return self.out(torch.cat([self.keypoints(features), pooled], dim=-1))


class VLANet(nn.Module):
    """(images, proprio, time, text embedding) → normalized action chunk (B, chunk, action_dim) and aux outputs."""

    def __init__(self, config: VLANetConfig) -> None:
        super().__init__()
        self.config = config
        feat = 128
        self.encoders = nn.ModuleDict({cam: ConvEncoder(config.conv_channels, config.keypoints, feat)
                                       for cam in config.cameras})
        self.text = nn.Sequential(nn.Linear(config.text_dim, 64), nn.ReLU(True))
        self.proprio = nn.Sequential(nn.Linear(config.proprio_dim + 1, 64), nn.ReLU(True))
        width = feat * len(config.cameras) + 64 + 64
        self.trunk = nn.Sequential(nn.Linear(width, config.hidden), nn.LayerNorm(config.hidden), nn.ReLU(True),
                                   nn.Linear(config.hidden, config.hidden), nn.ReLU(True))
        self.action_head = nn.Linear(config.hidden, config.action_modes * config.chunk * config.action_dim)
        if config.action_modes > 1:
            self.mode_head = nn.Linear(config.hidden, config.action_modes)
        self.aux_head = nn.Linear(config.hidden, config.aux_dim)

    def forward(self, images: dict[str, torch.Tensor], proprio: torch.Tensor, time: torch.Tensor,
                text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``images[cam]``: float (B, 3, S, S) in [0, 1]; ``proprio`` normalized (B, P); ``time`` (B, 1).

        Returns the (best-scored) normalized chunk ``(B, chunk, action_dim)`` and the aux outputs.
        """
        chunks, scores, aux = self.hypotheses(images, proprio, time, text)
        return best_scored(chunks, scores), aux

    def hypotheses(self, images: dict[str, torch.Tensor], proprio: torch.Tensor, time: torch.Tensor,
                   text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """All K chunks ``(B, K, chunk, action_dim)``, their scores (logits, ``(B, K)``) and the aux outputs."""
        parts = [self.encoders[cam](images[cam] - 0.5) for cam in self.config.cameras]
        if not self.config.time_input:
            time = torch.zeros_like(time)
        parts += [self.text(text), self.proprio(torch.cat([proprio, time], dim=-1))]
        hidden = self.trunk(torch.cat(parts, dim=-1))
        c = self.config
        chunks = self.action_head(hidden).reshape(-1, c.action_modes, c.chunk, c.action_dim)
        scores = self.mode_head(hidden) if c.action_modes > 1 else hidden.new_zeros(len(hidden), 1)
        return chunks, scores, self.aux_head(hidden)


def best_scored(chunks: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """The chunk deployment executes, ``(B, chunk, action_dim)``: the best-scored of the K hypotheses."""
    if chunks.shape[1] == 1:
        return chunks[:, 0]
    return chunks[torch.arange(len(chunks), device=chunks.device), scores.argmax(dim=1)]


def expand_action_modes(state: dict[str, torch.Tensor], modes: int, spread: float,
                        generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A single-mode network's weights as a K-mode one: every hypothesis starts as the trained chunk, its bias
    offset by Gaussian noise of ``spread`` (normalized action units) so winner-takes-all can tell them apart;
    the scores start uniform."""
    weight, bias = state["action_head.weight"], state["action_head.bias"]
    offsets = torch.randn((modes, *bias.shape), generator=generator) * spread
    offsets[0] = 0.0  # one hypothesis is exactly the trained head
    hidden = weight.shape[1]
    return {**state, "action_head.weight": weight.repeat(modes, 1),
            "action_head.bias": (bias[None] + offsets).reshape(-1),
            "mode_head.weight": torch.zeros(modes, hidden), "mode_head.bias": torch.zeros(modes)}
