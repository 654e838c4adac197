"""The config of retrieval at run time (:class:`RetrievalSettings`), apart from the torch code so ``--help`` is fast;
training the retriever has its own (``training/retriever/config.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from r2a_core.errors import R2AInputError


@dataclass(frozen=True)
class RetrievalSettings:
    """How candidates are found and weighted."""

    mode: Literal["gnn", "knn"] = "gnn"
    """gnn: the query-conditioned GNN scores the candidates; knn: plain FAISS nearest neighbours (ablation)"""
    seeds: int = 10
    """FAISS seed nodes nearest the current kinematic key"""
    hops: int = 2
    """rings of neighbours added around the seeds"""
    max_nodes: int = 128
    """cap of the candidate subgraph (keeps latency flat as the graph grows)"""
    top_k: int = 8
    """nodes fused into the reference"""
    temperature: float = 1.0
    """softmax temperature of the top-K weights"""
    match_task: bool = True
    """restrict candidates to the task whose instruction equals the prompt (when one does)"""
    inference: Literal["fast", "training"] = "fast"
    """fast: the single-query path (per-graph node tables, the GNN as folded arrays); training: the code the
    retriever is trained with (torch_geometric network, features from the graph arrays) — the same result, slower"""

    def validate(self) -> None:
        if min(self.seeds, self.top_k, self.max_nodes) < 1 or self.hops < 0 or self.temperature <= 0:
            raise R2AInputError("retrieval: seeds, top_k, max_nodes must be >= 1, hops >= 0, temperature > 0")
        if self.seeds > self.max_nodes:
            raise R2AInputError(f"retrieval: seeds ({self.seeds}) cannot exceed max_nodes ({self.max_nodes})")


__all__ = ["RetrievalSettings"]
