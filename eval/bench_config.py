"""Benchmark configuration: which tasks, factors, levels and episodes; validated before any episode runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from r2a_core.errors import R2AInputError
from r2a_core.yaml_io import apply_overrides, check_fields, read_yaml_mapping

CLEAN = "clean"
LEVELS = (1, 2, 3)


@dataclass
class BenchConfig:
    """One benchmark: every (task, factor, level, episode) plus the clean run of each (task, episode)."""

    #: a short name recorded with the results
    name: str = "bench"
    #: built-in task names
    tasks: list[str] = field(default_factory=lambda: ["Lift"])
    #: factor name → levels (1..3) to run; the clean condition (level 0) is always included
    factors: dict[str, list[int]] = field(default_factory=dict)
    #: episodes per (task, condition); episode i uses environment and policy seed ``seed + i``
    episodes: int = 2
    #: seed of episode 0 — benchmark seeds; keep calibration and training seeds away from this range
    seed: int = 100_000
    #: square camera resolution
    image_size: int = 128
    #: steps executed from each action chunk before re-querying the policy (None: the whole chunk)
    n_action_steps: int | None = None
    #: tasks whose clean SR is below this are reported but excluded from ΔSR aggregates
    competence_threshold: float = 0.2
    #: paired-bootstrap resamples
    n_resamples: int = 10_000
    #: store per-step EE trajectories next to results.jsonl (trajectories/*.npz)
    save_trajectories: bool = False

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> "BenchConfig":
        raw = apply_overrides(read_yaml_mapping(path, "benchmark config"), overrides)
        return cls.from_dict(raw, where=str(path))

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "config") -> "BenchConfig":
        check_fields(raw, {f.name for f in fields(cls)}, where)
        config = cls(**raw)
        config.validate(where)
        return config

    def validate(self, where: str = "config") -> None:
        """Check every name and number up front, so a typo never costs a half-finished run."""
        from sim.envs.tasks import get_task
        from sim.shifts import get_factor

        if not self.tasks:
            raise R2AInputError(f"{where}: 'tasks' is empty; list at least one built-in task")
        for task in self.tasks:
            get_task(task)
        if not isinstance(self.factors, dict):
            raise R2AInputError(f"{where}: 'factors' must map factor names to lists of levels")
        for factor, levels in self.factors.items():
            get_factor(factor)
            bad = [lv for lv in (levels or []) if lv not in LEVELS]
            if bad or not levels:
                raise R2AInputError(f"{where}: factor '{factor}' has level(s) {bad or levels}; "
                                    f"levels are 1, 2 or 3 (level 0 is the clean run, always included)")
        if not isinstance(self.episodes, int) or self.episodes < 1:
            raise R2AInputError(f"{where}: 'episodes' must be a positive integer, got {self.episodes!r}")
        if not 8 <= int(self.image_size) <= 1024:
            raise R2AInputError(f"{where}: 'image_size' must be 8..1024 pixels, got {self.image_size}")

    def conditions(self) -> list[tuple[str, int]]:
        """(factor, level) pairs, clean first."""
        return [(CLEAN, 0)] + [(f, lv) for f, levels in self.factors.items() for lv in sorted(set(levels))]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
