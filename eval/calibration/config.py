"""What a calibration sweep runs: tasks, calibration seeds, episodes per point, the coarse-to-fine schedule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from eval.calibration.fit import DEFAULT_TARGETS
from r2a_core.config import TypedConfig
from r2a_core.errors import R2AInputError
from r2a_core.seeds import HELD_OUT_SEED_START, TEST_SEED_START


@dataclass
class CalibrationConfig(TypedConfig):
    """One calibration sweep of the shift levels against a policy (``r2a bench calibrate``)."""

    CONFIG_WHAT: ClassVar[str] = "calibration config"
    SHIPPED_KIND: ClassVar[str] = "bench"

    tasks: list[str] = field(default_factory=lambda: ["Lift", "PickPlaceCan", "Stack", "StackThree"])
    """built-in tasks, pooled in the fit (each with its clean rate as its ceiling)"""
    seed: int = 80_000
    """calibration seed of episode 0; episode i uses seed + i — below the test seeds (100000) and disjoint from the
    seeds anything in r2a trains on (docs/architecture.md, "Seeds")"""
    episodes: int = 10
    """episodes per task and severity point (and of the clean condition, shared by every factor)"""
    image_size: int = 64
    """camera resolution: the one the built-in policy was trained on"""
    severities: list[float] = field(default_factory=lambda: [0.25, 0.5, 1.0])
    """the coarse grid every continuous knob starts with (0 = clean, 1 = the factor's outer bound)"""
    refine: int = 2
    """coarse-to-fine rounds: each adds the severities where the current fit puts the targets"""
    min_step: float = 0.05
    """refinement points are rounded to this and skipped within it of a measured severity"""
    targets: list[float] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    """fitted success as a fraction of clean at L1, L2, L3"""

    def validate(self) -> None:
        from sim.envs.tasks import get_task

        if not self.tasks:
            raise R2AInputError("'tasks' is empty; list at least one built-in task")
        self.tasks = [get_task(task).name for task in self.tasks]
        if self.episodes < 1:
            raise R2AInputError(f"'episodes' must be a positive integer, got {self.episodes}")
        last = self.seed + self.episodes - 1
        if self.seed < 0:
            raise R2AInputError(f"'seed' must be >= 0, got {self.seed}")
        if last >= HELD_OUT_SEED_START or self.seed >= HELD_OUT_SEED_START:
            raise R2AInputError(f"calibration seeds {self.seed}..{last} reach {HELD_OUT_SEED_START}+, which are "
                                "reserved for held-out evaluation: nothing may calibrate on them")
        if last >= TEST_SEED_START:
            raise R2AInputError(f"calibration seeds {self.seed}..{last} reach the benchmark's test seeds "
                                f"({TEST_SEED_START}+); calibrate below {TEST_SEED_START}")
        if not self.severities or any(not 0 < s <= 1 for s in self.severities):
            raise R2AInputError(f"'severities' must be numbers in (0, 1], got {self.severities}")
        self.severities = sorted(set(float(s) for s in self.severities))
        if self.refine < 0 or not 0 < self.min_step < 1:
            raise R2AInputError("'refine' must be >= 0 and 'min_step' in (0, 1)")
        t = self.targets
        if len(t) != 3 or not all(0 < x < 1 for x in t) or not t[0] > t[1] > t[2]:
            raise R2AInputError(f"'targets' must be three decreasing fractions of clean (L1, L2, L3), got {t}")
        if not 8 <= self.image_size <= 1024:
            raise R2AInputError(f"'image_size' must be 8..1024 pixels, got {self.image_size}")

    @property
    def seeds(self) -> list[int]:
        return [self.seed + i for i in range(self.episodes)]


__all__ = ["CalibrationConfig"]
