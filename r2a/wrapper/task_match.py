"""Task matching by meaning: which graph task a rewritten instruction asks for — or that it asks for none we know.

Retrieval restricts its candidates to the graph task whose instruction is the prompt. A paraphrase ("lift the red
cube") matches no instruction exactly, and retrieval then pooled every task's demos — on LIBERO-Plus's language
family that took 31 % of chunks far from the graph and cost 10 points (docs/experiments/do_no_harm.md). Here the
prompt is compared with each graph task's instruction in the frozen sentence embedding the built-in VLA ships
(all-MiniLM-L6-v2): the nearest task is taken when it is close enough (``min_similarity``) and clearly nearer than
the second (``min_margin``), both fitted on training paraphrases disjoint from the benchmark's lists
(``r2a retriever task-match``); otherwise the matcher says it does not know the task, and the wrapper leaves the base
alone (``unknown: base``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np

#: prompt text → unit-norm embeddings (n, d)
Embed = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class TaskMatchSettings:
    """How the prompt picks the graph task retrieval draws from (``task_match:`` in an R2A config)."""

    mode: Literal["exact", "meaning"] = "exact"
    """exact: only a graph task's own instruction selects it; meaning: the task whose instruction is nearest in the
    sentence embedding, when close and clear enough"""
    min_similarity: float = 0.8
    """meaning: the nearest instruction's cosine similarity must reach this"""
    min_margin: float = 0.02
    """meaning: and exceed the second nearest task's by this much"""
    unknown: Literal["pool", "base"] = "pool"
    """a prompt that selects no task: pool (retrieve from every task, the published variants) or base (no blend:
    the base's chunks unchanged, fallback 'unknown_task'; start-pose recovery, which needs no task, still runs, and
    an observation without a prompt still pools)"""


@dataclass(frozen=True)
class TaskMatch:
    """The matched graph instruction (None: no task), and how sure the match was."""

    instruction: str | None
    similarity: float | None = None
    margin: float | None = None


class TaskMatcher:
    """Prompt → the graph instruction it means (exact text first, then by meaning), cached per prompt."""

    def __init__(self, instructions: list[str], settings: TaskMatchSettings, embed: Embed | None = None) -> None:
        self.instructions, self.settings = list(instructions), settings
        self._embed = embed
        self._vectors: np.ndarray | None = None
        self._cache: dict[str, TaskMatch] = {}

    def match(self, prompt: str | None) -> TaskMatch:
        if prompt is None:
            return TaskMatch(None)
        if prompt in self.instructions:
            return TaskMatch(prompt, 1.0, None)
        if self.settings.mode == "exact" or not self.instructions:
            return TaskMatch(None)
        if prompt not in self._cache:
            self._cache[prompt] = self._by_meaning(prompt)
        return self._cache[prompt]

    def similarities(self, prompts: list[str]) -> np.ndarray:
        """(n prompts, n instructions) cosine similarities in the embedding."""
        embed = self._embedder()
        if self._vectors is None:
            self._vectors = embed(self.instructions)
        return embed(prompts) @ self._vectors.T

    def _by_meaning(self, prompt: str) -> TaskMatch:
        sims = self.similarities([prompt])[0]
        return decide(sims, self.instructions, self.settings.min_similarity, self.settings.min_margin)

    def _embedder(self) -> Embed:
        if self._embed is None:
            from r2a.vla.text import PromptEmbedder

            self._embed = PromptEmbedder().embed_many
        return self._embed


def decide(sims: np.ndarray, instructions: list[str], min_similarity: float, min_margin: float) -> TaskMatch:
    """The nearest instruction when its similarity reaches ``min_similarity`` and beats the second's by
    ``min_margin`` (one instruction: no second), else no match."""
    order = np.argsort(-sims)
    best = float(sims[order[0]])
    margin = best - float(sims[order[1]]) if len(order) > 1 else float("inf")
    chosen = instructions[int(order[0])] if best >= min_similarity and margin >= min_margin else None
    return TaskMatch(chosen, round(best, 4), round(margin, 4) if np.isfinite(margin) else None)


def summary(match: TaskMatch) -> dict[str, Any]:
    """The match as the wrapper's diagnostics show it."""
    return {"matched_task": match.instruction, "task_similarity": match.similarity, "task_margin": match.margin}


__all__ = ["TaskMatch", "TaskMatchSettings", "TaskMatcher", "decide", "summary"]
