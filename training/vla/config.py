"""The training config of the built-in VLA, apart from the training code so ``--help`` does not import torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from r2a.vla.features import PROPRIO_DIM
from r2a_core.config import TypedConfig
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA

if TYPE_CHECKING:  # pragma: no cover
    from r2a.vla.model import VLANetConfig


@dataclass
class TrainConfig(TypedConfig):
    """Behaviour cloning of the built-in VLA (``configs/policy/builtin.yaml``; ``r2a policy train --help``)."""

    CONFIG_WHAT: ClassVar[str] = "policy training config"
    SHIPPED_KIND: ClassVar[str] = "policy"

    seed: int = 0
    """seed of the initialization, the sampling and the augmentation"""
    cameras: list[str] = field(default_factory=lambda: ["agentview", "wrist"])
    """cameras the network sees (canonical names)"""
    image_size: int = 64
    """square input resolution in pixels (images are resized to it)"""
    chunk: int = 16
    """actions predicted per query"""
    n_action_steps: int = 8
    """actions executed per chunk at deployment before the policy is queried again"""
    steps: int = 15000
    """optimizer steps"""
    batch_size: int = 64
    """samples per optimizer step"""
    lr: float = 1e-3
    """peak learning rate (linear warm-up, then cosine decay)"""
    weight_decay: float = 1e-4
    """AdamW weight decay"""
    warmup_steps: int = 200
    """steps of linear learning-rate warm-up"""
    grad_clip: float = 1.0
    """gradient-norm clip"""
    ema_decay: float = 0.999
    """decay of the exponential moving average of the weights (the deployed weights)"""
    shift_pixels: int = 4
    """random-shift augmentation: pad by this many pixels and crop back"""
    time_jitter: int = 0
    """uniform offset of up to this many control steps on the elapsed-time input per sample: a coarse sense of
    phase without acting on the clock alone (0: off)"""
    time_input: bool = True
    """give the network the elapsed time at all (false: it must read the phase from images and proprio)"""
    aux_weight: float = 1.0
    """weight of the auxiliary loss predicting the task objects' positions relative to the gripper"""
    conv_channels: int = 32
    """channels of each camera's convolutional encoder"""
    keypoints: int = 32
    """spatial-softmax keypoints per camera"""
    hidden: int = 512
    """width of the MLP trunk"""
    action_modes: int = 1
    """alternative chunks the head predicts, trained winner-takes-all with a score each (1: one L1 chunk); a
    single-mode init_from is expanded (every hypothesis starts as its chunk, offset by mode_spread)"""
    mode_spread: float = 0.3
    """noise (normalized units) that sets the expanded hypotheses apart"""
    wta_epsilon: float = 0.05
    """share of the action loss the hypotheses other than the best still get (relaxed winner-takes-all)"""
    holdout_every: int = 20
    """every n-th episode is held out to report a validation loss (0: none)"""
    val_demos: list[str] = field(default_factory=list)
    """demo files that form the held-out set instead (holdout_every then does not apply), so validation losses
    of runs on different training mixtures are comparable"""
    log_every: int = 100
    """steps between logged losses"""
    save_every: int = 2000
    """steps between checkpoints"""
    threads: int = 0
    """torch threads (0: all cores)"""
    task_weights: dict[str, float] = field(default_factory=dict)
    """relative sampling weight of a task's frames (default 1 each), e.g. {StackThree: 2.0}"""
    release_weight: float = 1.0
    """sampling weight of the frames in the release_window steps up to a gripper release (1: uniform)"""
    release_window: int = 12
    """frames before a gripper release that release_weight applies to"""
    on_policy_weight: float = 1.0
    """sampling weight of the frames of on-policy (DAgger) episodes, the states the policy itself reaches
    (1: uniform)"""
    init_from: str | None = None
    """continue from this checkpoint's weights and normalization (same network config); null: from scratch"""
    prompts_from: str | None = None
    """reuse the prompt embeddings stored in this checkpoint (init_from's are always reused), so a machine
    without the sentence model (the 'vla' extra) can train on the same instructions"""
    load_workers: int = 0
    """processes that read the demo files in parallel (0: one per file, at most one per core)"""
    device: str = "auto"
    """auto (CUDA when available, else CPU), cpu, cuda, cuda:1, ..."""
    time_limit_s: float = 0.0
    """stop after this many seconds of optimization (0: no limit); the learning-rate schedule then runs on
    whichever of steps and time is further along, so a time-bounded run still anneals"""

    def validate(self) -> None:
        if self.n_action_steps > self.chunk or min(self.steps, self.batch_size, self.n_action_steps) < 1:
            raise R2AInputError("need steps, batch_size >= 1 and 1 <= n_action_steps <= chunk, got "
                                f"steps={self.steps}, batch_size={self.batch_size}, "
                                f"n_action_steps={self.n_action_steps}, chunk={self.chunk}")
        if self.action_modes < 1 or not 0.0 <= self.wta_epsilon < 1.0:
            raise R2AInputError(f"need action_modes >= 1 and 0 <= wta_epsilon < 1, got "
                                f"{self.action_modes} and {self.wta_epsilon}")
        if min(self.release_weight, self.on_policy_weight) <= 0:
            raise R2AInputError(f"release_weight and on_policy_weight must be > 0, got "
                                f"{self.release_weight} and {self.on_policy_weight}")

    def net_config(self) -> "VLANetConfig":
        from r2a.vla.model import VLANetConfig

        return VLANetConfig(cameras=tuple(self.cameras), image_size=self.image_size, proprio_dim=PROPRIO_DIM,
                            action_dim=OSC_POSE_DELTA.dim, chunk=self.chunk, conv_channels=self.conv_channels,
                            keypoints=self.keypoints, hidden=self.hidden, time_input=self.time_input,
                            action_modes=self.action_modes)
