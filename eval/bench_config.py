"""Benchmark configuration: which tasks, factors, levels and episodes; validated before any episode runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from r2a_core.config import TypedConfig
from r2a_core.errors import R2AInputError
from sim.shifts.base import CLEAN, LEVELS


@dataclass
class BenchConfig(TypedConfig):
    """One benchmark: every (task, factor, level, episode) plus the clean run of each (task, episode)."""

    CONFIG_WHAT: ClassVar[str] = "benchmark config"
    SHIPPED_KIND: ClassVar[str] = "bench"

    name: str = "bench"
    """a short name recorded with the results"""
    tasks: list[str] = field(default_factory=lambda: ["Lift"])
    """built-in task names (any case; stored with their canonical spelling)"""
    factors: dict[str, list[int]] = field(default_factory=dict)
    """factor name → levels (1..3) to run; the clean condition (level 0) is always included"""
    episodes: int = 2
    """episodes per (task, condition); episode i uses environment and policy seed ``seed + i``"""
    seed: int = 100_000
    """seed of episode 0 — benchmark test seeds start at 100000; train, tune and calibrate below it"""
    image_size: int = 64
    """square camera resolution in pixels (64: what the built-in VLA was trained on, as the built-in configs use;
    the LIBERO configs render 128 px, as the LIBERO bases' demos were recorded, or 256 for openpi's checkpoints)"""
    n_action_steps: int | None = None
    """steps executed from each action chunk before re-querying the policy (null: the policy's own setting)"""
    competence_threshold: float = 0.2
    """tasks whose clean SR is below this are reported but excluded from ΔSR aggregates"""
    base_policy: str | None = None
    """the frozen policy the others are measured against: the baseline of the uplift tables and the headline, and
    the one whose clean SR screens tasks for every policy (null: each pair in sorted order, own clean SR)"""
    n_resamples: int = 10_000
    """paired-bootstrap resamples"""
    save_trajectories: bool = False
    """store per-step EE trajectories next to results.jsonl (trajectories/*.npz)"""
    liberoplus_tasks: list[str] = field(default_factory=list)
    """LIBERO-Plus tasks to run, as ``suite/name`` (``r2a bench liberoplus --sample`` writes the list): each runs as
    factor ``liberoplus:<family>`` at its LIBERO-Plus level (1-5) on its clean original, which must be in ``tasks``,
    paired with the original's clean run on the same seed (the k-th task of one original, family and level is
    episode k); needs ``make install-liberoplus``"""

    def validate(self) -> None:
        """Check every name and number up front, so a typo never costs a half-finished run."""
        from sim.envs.tasks import get_task
        from sim.shifts import get_factor

        if not self.tasks:
            raise R2AInputError("'tasks' is empty; list at least one built-in task")
        self.tasks = [get_task(task).name for task in self.tasks]
        for factor, levels in self.factors.items():
            if factor.startswith("liberoplus:"):
                raise R2AInputError(f"factor '{factor}': LIBERO-Plus families run from 'liberoplus_tasks' "
                                    "(r2a bench liberoplus --sample N --suite SUITE writes the list)")
            get_factor(factor)
            bad = [lv for lv in (levels or []) if lv not in LEVELS]
            if bad or not levels:
                raise R2AInputError(f"factor '{factor}' has level(s) {bad or levels}; "
                                    f"levels are 1, 2 or 3 (level 0 is the clean run, always included)")
        if self.episodes < 1:
            raise R2AInputError(f"'episodes' must be a positive integer, got {self.episodes!r}")
        if not 8 <= self.image_size <= 1024:
            raise R2AInputError(f"'image_size' must be 8..1024 pixels, got {self.image_size}")
        if self.n_action_steps is not None and self.n_action_steps < 1:
            raise R2AInputError(f"'n_action_steps' must be >= 1 or null, got {self.n_action_steps}")
        if self.liberoplus_tasks:
            self.liberoplus_jobs()  # names, families and originals checked (from the names alone)

    def conditions(self) -> list[tuple[str, int]]:
        """(factor, level) pairs, clean first."""
        return [(CLEAN, 0)] + [(f, lv) for f, levels in self.factors.items() for lv in sorted(set(levels))]

    def liberoplus_jobs(self) -> dict[tuple[str, int, str, int], str]:
        """(task, episode, factor, level) → the LIBERO-Plus task name it runs, for ``liberoplus_tasks``."""
        from sim.envs.liberoplus_tasks import FACTOR_PREFIX, check_factor, parse_task_name

        jobs: dict[tuple[str, int, str, int], str] = {}
        for entry in self.liberoplus_tasks:
            suite, _, name = str(entry).partition("/")
            task = parse_task_name(suite, name)
            factor = FACTOR_PREFIX + task.family
            check_factor(factor, [task.level])
            original = task.original_task
            if original is None or original not in self.tasks:
                raise R2AInputError(f"liberoplus_tasks: '{entry}' perturbs {original or suite + '/' + task.original}, "
                                    f"which is not in 'tasks' (r2a registers {suite}'s originals only if listed)")
            episode = sum(key[0] == original and key[2:] == (factor, task.level) for key in jobs)
            jobs[(original, episode, factor, task.level)] = name
        return jobs

    def planned(self) -> list[tuple[str, int, str, int]]:
        """Every (task, episode, factor, level) to run: each task's conditions over ``episodes``, plus the
        ``liberoplus_tasks`` with the clean run of each (task, episode) they use."""
        planned = {(task, ep, factor, level) for task in self.tasks for ep in range(self.episodes)
                   for factor, level in self.conditions()}
        for task, episode, factor, level in self.liberoplus_jobs():
            planned |= {(task, episode, factor, level), (task, episode, CLEAN, 0)}
        return sorted(planned)


__all__ = ["CLEAN", "LEVELS", "BenchConfig"]
