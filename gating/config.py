"""Gate training config (``configs/gate/default.yaml``; ``--set field=value``), torch-free for ``--help``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from r2a_core.config import TypedConfig
from r2a_core.errors import R2AInputError

#: what the training loss compares (GateTrainConfig.target)
TARGETS = ("blend", "oracle_s")


@dataclass
class GateTrainConfig(TypedConfig):
    """Training of the learned gate on ``r2a gate data`` files."""

    CONFIG_WHAT: ClassVar[str] = "gate training config"
    SHIPPED_KIND: ClassVar[str] = "gate"

    seed: int = 0
    """seed of the initialization, the split and the batch order"""
    training_shifts: list[str] = field(default_factory=lambda: [
        "camera:2", "light:2", "light:3", "background:2", "noise:2", "language:2", "layout:2", "robot_init:2"])
    """the shift settings (factor:level, drawn with seeds below 100000) that make the training split; data of any
    other setting is refused"""
    signals: list[str] = field(default_factory=lambda: ["disagreement", "image_ood"])
    """the "base is unreliable" signals the gate reads (leave one out for its ablation)"""
    hidden: int = 64
    """width of the two hidden layers"""
    max_gate: float = 0.5
    """upper bound of S on every motion dimension"""
    epochs: int = 60
    """passes over the training rows"""
    batch_size: int = 256
    """rows per optimizer step (per process under torchrun: the global batch is this × processes)"""
    lr: float = 0.002
    """AdamW learning rate, constant over the epochs (no warm-up or decay)"""
    weight_decay: float = 0.0001
    """AdamW weight decay"""
    target: str = "blend"
    """what the loss compares: ``blend`` — the blended chunk with the expert's, squared (rows where the base is far
    off weigh most); ``oracle_s`` — S with each row's oracle S (per dimension, in the bounds, the S whose blend is
    closest to the expert's chunk under the holding rule), squared: every row weighs alike, so the many rows where
    blending pulls away (oracle S 0) teach the gate when to stay out"""
    s_penalty: float = 0.0005
    """weight of mean S² in the loss: with no evidence that the reference is better, S stays near 0 (the base)"""
    balance_kinds: bool = False
    """each kind of row (demo frames, the wrapper's own closed-loop rollouts) weighs the same in the loss, however
    many rows it has: the gate acts in closed loop, where the reference helps far less than on demo frames"""
    holdout_every: int = 5
    """every n-th episode is validation (whole episodes, so frames of one episode never straddle the split)"""
    save_every: int = 10
    """epochs between checkpoints (the run resumes from the last one)"""
    device: str = "auto"
    """auto: a CUDA device when torch sees one (under torchrun: the process's local rank), else the CPU"""
    threads: int = 0
    """torch intra-op threads per process (0: leave torch's default)"""

    def validate(self) -> None:
        from r2a.wrapper.learned_gate import SIGNALS

        bad = [s for s in self.signals if s not in SIGNALS]
        if bad:
            raise R2AInputError(f"signals: unknown signal {bad[0]!r}; signals: {', '.join(SIGNALS)}")
        if self.target not in TARGETS:
            raise R2AInputError(f"target: unknown {self.target!r}; targets: {', '.join(TARGETS)}")
        if not 0 < self.max_gate <= 1:
            raise R2AInputError(f"max_gate must be in (0, 1], got {self.max_gate}")
        if self.epochs < 1 or self.batch_size < 1 or self.hidden < 1 or self.holdout_every < 2 or self.save_every < 1:
            raise R2AInputError("epochs, batch_size, hidden, save_every must be >= 1 and holdout_every >= 2")


__all__ = ["TARGETS", "GateTrainConfig"]
