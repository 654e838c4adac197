"""The shift benchmark's statistics: intervals, paired tests and stage diagnostics
(docs/architecture.md, "The shift benchmark").

Every comparison the benchmark makes is *paired*: a clean and a shifted run of the same (task, episode) share
their seeds, and so do the base policy and the R2A wrapper on the same perturbed episode. Paired statistics
(transitions, McNemar, the paired bootstrap) use that pairing, so that outcome flips which cancel in the
aggregate success rate are still seen (RoboCasa-Shift: camera L1 had ΔSR 0 with 8 of 80 pairs changed).

Pure numpy and the standard library, so the report needs no scipy.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: z for a two-sided 95 % interval
Z95 = 1.959964
TRANSITION_KEYS = ("S->S", "S->F", "F->S", "F->F")
#: histogram key for episodes that reached every stage (first incomplete stage: none)
ALL_STAGES_REACHED = "all_reached"
#: histogram key for episodes that reached no stage (deepest stage: none)
NO_STAGE_REACHED = "none"


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not degenerate at 0/n or n/n, which are
    common success rates for small benchmark cells. ``n = 0`` gives the uninformative (0, 1).
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def transitions(clean: Sequence[bool], shifted: Sequence[bool]) -> dict[str, int]:
    """Count outcome transitions between paired runs: ``S->F`` is a success that the shift turned into a failure.

    Also used between two policies on the same episodes (first argument = the reference policy).
    """
    a = np.asarray(clean, dtype=bool)
    b = np.asarray(shifted, dtype=bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired outcomes need equal 1-D shapes, got {a.shape} and {b.shape}")
    return {"S->S": int(np.sum(a & b)), "S->F": int(np.sum(a & ~b)),
            "F->S": int(np.sum(~a & b)), "F->F": int(np.sum(~a & ~b))}


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar test: a binomial test of ``b`` vs ``c`` discordant pairs with p = 1/2.

    The exact form (not the χ² approximation) because benchmark cells have few discordant pairs.
    p = min(1, 2·P(X ≤ min(b, c))) with X ~ Bin(b + c, 1/2); p = 1 when there are no discordant pairs.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def paired_bootstrap_delta(pairs: Mapping[str, tuple[np.ndarray, np.ndarray]], n_resamples: int = 10_000,
                           seed: int = 0, ci: float = 0.95) -> dict[str, float]:
    """Macro-averaged paired difference ``mean(a) − mean(b)`` over tasks with a percentile bootstrap CI.

    ``pairs[task] = (a, b)``: equal-length outcome arrays paired by episode. The statistic is the average over
    tasks of each task's mean difference (each task weighs the same, however many episodes it has). Episode
    pairs are resampled with replacement *within* each task, which keeps the pairing and the task weights.

    Two uses in the benchmark (see :func:`delta_sr` and :func:`paired_uplift`):
    ΔSR = SR_clean − SR_shift with ``(clean, shifted)``; uplift = SR(R2A) − SR(base) with ``(r2a, base)``.

    A task (stratum) with a single pair has no variance of its own to resample: where any does (LIBERO-Plus's
    sampled perturbed tasks, one episode per task and level), the strata are resampled too — a two-stage
    bootstrap, which carries the spread between the strata into the interval instead of reporting a zero-width
    one. The point estimate is the same.

    Resampling n pairs with replacement is the same as drawing multinomial counts over the distinct values of
    the differences, so each task costs O(n_resamples × distinct values) — 10,000 resamples take milliseconds.
    Tasks with no pairs are skipped; with none left every field is NaN. Returns ``delta``, ``lo``, ``hi``,
    ``n_tasks``, ``n_pairs`` and ``strata_resampled``.
    """
    if not 0 < ci < 1:
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    rng = np.random.default_rng(seed)
    point, within, n_pairs, singleton = [], [], 0, False
    for task in sorted(pairs):
        diff = _paired_differences(task, *pairs[task])
        if diff.size == 0:
            log.debug("paired bootstrap: task %s has no pairs, skipped", task)
            continue
        point.append(float(diff.mean()))
        within.append(_resampled_means(diff, n_resamples, rng))
        n_pairs += diff.size
        singleton |= diff.size == 1
    if not point:
        return {"delta": math.nan, "lo": math.nan, "hi": math.nan, "n_tasks": 0, "n_pairs": 0,
                "strata_resampled": False}
    strata_resampled = singleton and len(point) > 1
    if strata_resampled:  # stage one: which strata; stage two: each drawn stratum's own resample
        draws = rng.integers(len(point), size=(n_resamples, len(point)))
        boot = np.stack(within)[draws, np.arange(n_resamples)[:, None]].mean(axis=1)
    else:
        boot = np.zeros(n_resamples)
        for means in within:  # in this order: the published intervals regenerate to the last bit
            boot += means
        boot /= len(point)
    alpha = 1.0 - ci
    lo, hi = np.percentile(boot, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return {"delta": float(np.mean(point)), "lo": float(lo), "hi": float(hi),
            "n_tasks": len(point), "n_pairs": n_pairs, "strata_resampled": bool(strata_resampled)}


def _paired_differences(task: str, a: Any, b: Any) -> np.ndarray:
    a_arr = np.asarray(a, dtype=np.float64)
    b_arr = np.asarray(b, dtype=np.float64)
    if a_arr.shape != b_arr.shape or a_arr.ndim != 1:
        raise ValueError(f"task {task}: paired arrays need equal 1-D shapes, got {a_arr.shape} and {b_arr.shape}")
    return a_arr - b_arr


def _resampled_means(diff: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``n_resamples`` with-replacement resamples of ``diff`` (via multinomial counts of its values)."""
    values, counts = np.unique(diff, return_counts=True)
    draws = rng.multinomial(diff.size, counts / diff.size, size=n_resamples)
    return draws @ values / diff.size


def delta_sr(pairs: Mapping[str, tuple[np.ndarray, np.ndarray]], **kwargs: Any) -> dict[str, float]:
    """ΔSR = SR_clean − SR_shift; ``pairs[task] = (clean, shifted)`` successes paired by episode."""
    return paired_bootstrap_delta(pairs, **kwargs)


def paired_uplift(pairs: Mapping[str, tuple[np.ndarray, np.ndarray]], **kwargs: Any) -> dict[str, float]:
    """Uplift = SR(candidate) − SR(baseline); ``pairs[task] = (baseline, candidate)`` on the same perturbed jobs."""
    return paired_bootstrap_delta({task: (cand, base) for task, (base, cand) in pairs.items()}, **kwargs)


def normalized_score(success: bool, progress: float) -> float:
    """RoboLab's per-episode score: 1 for a success, else the fraction of stages reached (partial credit)."""
    return 1.0 if success else float(min(1.0, max(0.0, progress)))


def mean_normalized_score(successes: Sequence[bool], progress: Sequence[float]) -> float:
    """Mean per-episode score, which equals RoboLab's SR + (1 − SR) · mean progress of the failures."""
    if len(successes) != len(progress):
        raise ValueError(f"need one progress per episode, got {len(successes)} and {len(progress)}")
    if not successes:
        return math.nan
    return float(np.mean([normalized_score(s, p) for s, p in zip(successes, progress)]))


def clean_competence(clean_sr_by_task: Mapping[str, float], threshold: float) -> dict[str, bool]:
    """Which tasks the policy is competent on when clean (SR ≥ threshold; RoboCasa-Shift's gate).

    A shift cannot lower a success rate that is already near zero, so such tasks would dilute ΔSR aggregates;
    they are reported but excluded from them. A NaN success rate (no clean runs) is not competent.
    """
    return {task: bool(sr >= threshold) for task, sr in clean_sr_by_task.items()}


def stage_statistics(records: Sequence[Mapping[str, Any]], stage_names: Sequence[str]) -> dict[str, Any]:
    """Stage diagnostics of a cohort of episodes (e.g. the S→F episodes of a condition; RoboCasa-Shift).

    Where in the task do the episodes break? Uses each record's latched ``stages``, ``first_incomplete_stage``
    and ``progress``. Returns ``n``, ``mean_progress``, ``share_before_first_stage`` (reached no stage at all,
    e.g. never got to the object), ``first_incomplete`` (histogram over stages plus ``"all_reached"``) and
    ``deepest_reached`` (histogram over stages plus ``"none"``).
    """
    names = list(stage_names)
    first = dict.fromkeys([*names, ALL_STAGES_REACHED], 0)
    deepest = dict.fromkeys([NO_STAGE_REACHED, *names], 0)
    progress, before_first = [], 0
    for rec in records:
        stages = rec.get("stages") or {}
        first_incomplete = rec.get("first_incomplete_stage", _first_incomplete(stages, names))
        key = first_incomplete if first_incomplete is not None else ALL_STAGES_REACHED
        first[key] = first.get(key, 0) + 1
        deepest[_deepest_reached(stages, names)] += 1
        if names and first_incomplete == names[0]:
            before_first += 1
        progress.append(float(rec.get("progress", _progress(stages, names))))
    n = len(progress)
    return {"n": n, "mean_progress": float(np.mean(progress)) if n else math.nan,
            "share_before_first_stage": before_first / n if n else math.nan,
            "first_incomplete": first, "deepest_reached": deepest}


def _first_incomplete(stages: Mapping[str, bool], names: Sequence[str]) -> str | None:
    return next((name for name in names if not stages.get(name, False)), None)


def _deepest_reached(stages: Mapping[str, bool], names: Sequence[str]) -> str:
    reached = [name for name in names if stages.get(name, False)]
    return reached[-1] if reached else NO_STAGE_REACHED


def _progress(stages: Mapping[str, bool], names: Sequence[str]) -> float:
    return sum(bool(stages.get(name, False)) for name in names) / len(names) if names else 0.0
