"""The config of training the GNN retriever (:class:`RetrieverTrainConfig`, ``configs/retriever/default.yaml``),
apart from the torch code so ``--help`` is fast."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from r2a.retrieval.config import RetrievalSettings
from r2a_core.config import TypedConfig
from r2a_core.errors import R2AInputError


@dataclass
class RetrieverTrainConfig(TypedConfig):
    """Self-supervised training of the GNN retriever on held-out demonstrations (``r2a retriever train``)."""

    CONFIG_WHAT: ClassVar[str] = "retriever training config"
    SHIPPED_KIND: ClassVar[str] = "retriever"

    seed: int = 0
    """seed of the initialization and the batch sampling"""
    base: str = "builtin"
    """the frozen base policy whose predicted chunks fill the queries (a policy spec)"""
    history: int = 16
    """executed steps of EE poses, gripper openings and actions in the query (H)"""
    chunk_steps: int = 16
    """actions of the base chunk in the query"""
    executed_steps: int = 8
    """steps executed per chunk: the horizon the targets compare futures over"""
    frame_stride: int = 2
    """every n-th frame of a held-out demo becomes a query"""
    hidden: int = 64
    """width of the GNN"""
    layers: int = 3
    """message-passing layers"""
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)
    steps: int = 3000
    """optimizer steps"""
    batch_size: int = 32
    """queries per step"""
    lr: float = 1e-3
    """peak learning rate (linear warm-up over 100 steps, then cosine decay)"""
    weight_decay: float = 1e-4
    """AdamW weight decay"""
    target_mm: float = 4.0
    """soft targets: softmax of minus each candidate's future-motion error (mm) over this temperature"""
    gripper_mm: float = 20.0
    """millimetres of error one unit of gripper-opening mismatch counts as in the target"""
    progress_weight: float = 0.5
    """weight of the progress loss (squared error of p̂ against t/(T-1))"""
    chunk_noise: float = 0.0
    """std of Gaussian noise added to the base chunk of training queries (augmentation; 0: off)"""
    holdout_every: int = 10
    """every n-th held-out episode validates instead of training (0: no validation)"""
    log_every: int = 100
    """steps between logged losses"""
    save_every: int = 500
    """steps between checkpoints (training resumes from the last one)"""
    predict_batch: int = 64
    """frames per batched forward pass of the base policy while building queries"""
    threads: int = 0
    """torch threads (0: all cores)"""
    device: str = "auto"
    """auto (CUDA when available), cpu, cuda, cuda:N"""

    def validate(self) -> None:
        if min(self.history, self.chunk_steps, self.executed_steps, self.frame_stride, self.hidden, self.layers,
               self.steps, self.batch_size) < 1:
            raise R2AInputError("history, chunk_steps, executed_steps, frame_stride, hidden, layers, steps and "
                                "batch_size must all be >= 1")
        if self.executed_steps > 20:
            raise R2AInputError(f"executed_steps={self.executed_steps}: graphs store 20 future frames per node")
        if self.target_mm <= 0 or self.lr <= 0:
            raise R2AInputError("target_mm and lr must be > 0")


__all__ = ["RetrieverTrainConfig"]
