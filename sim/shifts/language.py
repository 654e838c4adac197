"""Language shift: replace the instruction with a paraphrase (L1), a vaguer one (L2) or a vague/indirect one (L3).

The rewrites live in ``configs/language/<Task>.yaml`` (keys ``L1``–``L3``, several instructions each; LIBERO-Plus
used LLM rewrites); the sampler picks one per episode. Only the ``prompt`` the policy sees changes. A task name
with a suite, ``<suite>/<index>`` (LIBERO's ``libero_spatial/3``), has its file in the suite's folder:
``configs/language/libero_spatial/3.yaml``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from r2a_core.config import shipped_path
from r2a_core.errors import R2AInputError
from r2a_core.types import PROMPT
from sim.shifts.base import INT, ShiftFactor

LANGUAGE_DIR = shipped_path("configs/language")
#: format of configs/language/<Task>.yaml this reader understands
FORMAT_VERSION = 1


def rewrites_path(task: str, directory: str | Path | None = None) -> Path:
    """The rewrites file of ``task``: ``<dir>/<Task>.yaml``; ``<dir>/<suite>/<index>.yaml`` for ``<suite>/<index>``."""
    parts = str(task).split("/")
    if not all(parts) or any(part in (".", "..") or "\\" in part for part in parts):
        raise R2AInputError(f"'{task}' is not a task name (expected <Task> or <suite>/<index>)")
    return Path(directory or LANGUAGE_DIR).joinpath(*parts[:-1], f"{parts[-1]}.yaml")


def tasks_with_rewrites(directory: str | Path | None = None) -> list[str]:
    """The task names that have a rewrites file (``libero_spatial/3`` for a file in a suite's folder)."""
    root = Path(directory or LANGUAGE_DIR)
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.yaml"))


@lru_cache(maxsize=None)
def load_instructions(task: str, directory: str | None = None) -> dict[int, tuple[str, ...]]:
    """The rewritten instructions of ``task`` per level, validated."""
    path = rewrites_path(task, directory)
    if not path.is_file():
        available = tasks_with_rewrites(directory)
        raise R2AInputError(f"no instruction rewrites for task '{task}' ({path} not found); tasks with rewrites: "
                            f"{', '.join(available) or 'none'}")
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or doc.get("format_version") != FORMAT_VERSION:
        raise R2AInputError(f"{path}: expected format_version {FORMAT_VERSION} and levels L1, L2, L3")
    unknown = sorted(set(doc) - {"format_version", "task", "original", "L1", "L2", "L3"})
    if unknown:
        raise R2AInputError(f"{path}: unknown key '{unknown[0]}'; valid keys: format_version, task, original, "
                            "L1, L2, L3")
    if doc.get("task", task) != task:
        raise R2AInputError(f"{path}: holds the rewrites of task '{doc['task']}', not of '{task}'")
    out = {}
    for level in (1, 2, 3):
        items = doc.get(f"L{level}")
        if not (isinstance(items, list) and items and all(isinstance(s, str) and s.strip() for s in items)):
            raise R2AInputError(f"{path}: L{level} must be a non-empty list of instructions")
        out[level] = tuple(s.strip() for s in items)
    return out


class LanguageShift(ShiftFactor):
    name = "language"
    index = 2
    modifies_state = False
    summary = "instruction rewrites: paraphrase (L1), vaguer (L2), vague/indirect (L3); per-task lists"
    #: ``source_level``: which list of configs/language/<Task>.yaml the level draws from
    level_schema = {"source_level": INT}

    def _sample(self, spec: dict[str, Any], rng: np.random.Generator, task: str) -> dict[str, Any]:
        source = spec["source_level"]
        if source not in (1, 2, 3):
            raise R2AInputError(f"language.source_level must be 1, 2 or 3, got {source}")
        options = load_instructions(task)[source]
        choice = int(rng.integers(len(options)))
        return {"instruction": options[choice], "choice": choice}

    #: ordinal: severity 1/3, 2/3, 1 are the paraphrase, vaguer and vague/indirect lists
    knobs = ("language",)
    ordinal = (1 / 3, 2 / 3, 1.0)

    def _params_at(self, knobs: dict[str, float]) -> dict[str, Any]:
        return {"source_level": int(np.clip(round(3 * knobs.get("language", 1 / 3)), 1, 3))}

    def describe(self, params: dict[str, Any]) -> str:
        return params["instruction"]

    def transform_obs(self, obs: dict[str, Any], params: dict[str, Any],
                      rng: np.random.Generator) -> dict[str, Any]:
        return {**obs, PROMPT: params["instruction"]}
