"""Fitting task matching's thresholds (:mod:`r2a.wrapper.task_match`) on training paraphrases.

Each graph task's paraphrases should select it; paraphrases of tasks the graph does not hold should select none. A
wrong task is the harm (retrieval then follows another task's demos); no task only leaves the base alone. So the
fit takes, over a grid of ``min_similarity`` × ``min_margin``, the pairs that match no paraphrase to a wrong task and
among them the one that matches the most to their own task (ties: the larger margin, then the larger similarity —
the safer side).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from r2a.wrapper.task_match import TaskMatcher, TaskMatchSettings, decide
from r2a_core.errors import R2AInputError
from r2a_core.yaml_io import read_yaml_mapping

#: the shipped training paraphrases (disjoint from the benchmark's configs/language/ lists; a test checks it)
TRAIN_PARAPHRASES = "configs/task_match/train_paraphrases.yaml"
SIMILARITIES = np.round(np.arange(0.30, 0.951, 0.05), 2)
MARGINS = np.round(np.arange(0.0, 0.201, 0.01), 2)


def load_paraphrases(path: str | Path) -> dict[str, list[str]]:
    doc = read_yaml_mapping(Path(path), "task-match paraphrases")
    if doc.get("format_version") != 1 or not isinstance(doc.get("tasks"), dict):
        raise R2AInputError(f"{path}: expected format_version: 1 and a 'tasks' mapping of task → sentences")
    return {str(task): [str(s) for s in sentences] for task, sentences in doc["tasks"].items()}


#: what ``r2a retriever task-match --out`` writes
FIT_FORMAT, FIT_VERSION = "r2a.task-match.fit", 1


def fit_task_match(instruction_tasks: Mapping[str, str], paraphrases: Mapping[str, list[str]],
                   embed: Any = None) -> dict[str, Any]:
    """The chosen thresholds and the grid's counts. ``instruction_tasks``: each instruction the matcher knows (at run
    time: the graph's, ``Retriever.instructions``) → its task's name."""
    instructions = list(instruction_tasks)
    sentences = [(task, s) for task, items in paraphrases.items() for s in items]
    if not sentences:
        raise R2AInputError("no paraphrases to fit on")
    matcher = TaskMatcher(instructions, TaskMatchSettings(mode="meaning"), embed)
    sims = matcher.similarities([s for _, s in sentences])
    held = set(instruction_tasks.values())
    truth = [task if task in held else None for task, _ in sentences]  # None: a task the graph does not hold
    rows = []
    for min_similarity in SIMILARITIES:
        for min_margin in MARGINS:
            picked = [decide(row, instructions, float(min_similarity), float(min_margin)).instruction for row in sims]
            chosen = [None if c is None else instruction_tasks[c] for c in picked]
            rows.append({"min_similarity": float(min_similarity), "min_margin": float(min_margin),
                         "right": sum(c is not None and c == t for c, t in zip(chosen, truth)),
                         "wrong": sum(c is not None and c != t for c, t in zip(chosen, truth)),
                         "none": sum(c is None for c in chosen)})
    safe = [r for r in rows if r["wrong"] == 0]
    if not safe:
        raise R2AInputError("no threshold pair on the grid keeps every paraphrase off a wrong task")
    best = max(safe, key=lambda r: (r["right"], r["min_margin"], r["min_similarity"]))
    exact = sum(s in instructions for _, s in sentences)
    chosen = {"min_similarity": best["min_similarity"], "min_margin": best["min_margin"]}
    return {"format": FIT_FORMAT, "format_version": FIT_VERSION, "chosen": chosen,
            "right": best["right"], "none": best["none"], "paraphrases": len(sentences),
            "own_task": sum(t is not None for t in truth), "exact_matches": exact, "grid": rows}


__all__ = ["FIT_FORMAT", "FIT_VERSION", "TRAIN_PARAPHRASES", "fit_task_match", "load_paraphrases"]
