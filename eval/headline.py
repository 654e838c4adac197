"""The benchmark's answer to "does the wrapper help?", per (baseline, candidate) pair of policies.

Read from the uplift rows of a summary (:mod:`eval.report`): the mean paired uplift over the perturbed
conditions (factor × level), the pooled uplift over every perturbed job, each factor's uplift pooled over its
levels with its paired-bootstrap CI, the clean SR of both, and whether the project's goal is met
(issue 24): mean uplift ≥ +15 SR points, the CI above zero on at least 4 of 7 factors, and clean SR not lower
than the baseline's by more than 1 point.

``REFERENCE_UPLIFT`` holds the per-category deltas the R2A page reports for GR00T N1.7 on LIBERO-Plus — another
policy on another benchmark, shown beside ours for orientation only, never compared as if it were the same
experiment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from eval.schema import CLEAN

#: SR points (percent) by which R2A raised GR00T N1.7's success per LIBERO-Plus category, from the R2A page
REFERENCE_UPLIFT = {"camera": 15.3, "robot_init": 49.1, "language": 2.7, "light": 1.6, "background": -0.1,
                    "noise": 8.0, "layout": 6.5}
REFERENCE_LABEL = "R2A page: GR00T N1.7 on LIBERO-Plus (another policy and benchmark)"

#: the goal of issue 24, as fractions
GOAL_MEAN_UPLIFT = 0.15
GOAL_FACTORS_ABOVE_ZERO = 4
GOAL_MAX_CLEAN_DROP = 0.01

ALL = "all"


def headline_rows(uplift: Sequence[Mapping[str, Any]], pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """One headline per (baseline, candidate) pair that has uplift rows."""
    rows = []
    for baseline, candidate in pairs:
        mine = [r for r in uplift if r["baseline"] == baseline and r["candidate"] == candidate]
        if mine:
            rows.append(headline(mine, baseline, candidate))
    return rows


def headline(rows: Sequence[Mapping[str, Any]], baseline: str, candidate: str) -> dict[str, Any]:
    """The headline of one pair from its uplift rows."""
    conditions = [r for r in rows if r["factor"] not in (CLEAN, ALL) and r["level"] is not None
                  and _finite(r["uplift"])]
    factors = {r["factor"]: r for r in rows if r["factor"] not in (CLEAN, ALL) and r["level"] is None}
    pooled = next((r for r in rows if r["factor"] == ALL), None)
    clean = next((r for r in rows if r["factor"] == CLEAN), None)
    mean_uplift = sum(r["uplift"] for r in conditions) / len(conditions) if conditions else math.nan
    per_factor = {f: {"uplift": r["uplift"], "ci": r["uplift_ci"], "n_pairs": r["n_pairs"],
                      "ci_above_zero": _finite(r["uplift_ci"][0]) and r["uplift_ci"][0] > 0,
                      "ci_below_zero": _finite(r["uplift_ci"][1]) and r["uplift_ci"][1] < 0}
                  for f, r in sorted(factors.items()) if r["n_pairs"]}
    above = sorted(f for f, r in per_factor.items() if r["ci_above_zero"])
    clean_delta = clean["uplift"] if clean is not None else math.nan
    return {"baseline": baseline, "candidate": candidate, "n_conditions": len(conditions),
            "mean_uplift": mean_uplift,
            "pooled_uplift": pooled["uplift"] if pooled else math.nan,
            "pooled_ci": pooled["uplift_ci"] if pooled else [math.nan, math.nan],
            "n_pairs": pooled["n_pairs"] if pooled else 0,
            "factors": per_factor, "factors_ci_above_zero": above,
            "factors_ci_below_zero": sorted(f for f, r in per_factor.items() if r["ci_below_zero"]),
            "clean": {"baseline_sr": clean["baseline_sr"] if clean else math.nan,
                      "candidate_sr": clean["candidate_sr"] if clean else math.nan,
                      "uplift": clean_delta, "ci": clean["uplift_ci"] if clean else [math.nan, math.nan],
                      "n_pairs": clean["n_pairs"] if clean else 0},
            "goal": {"mean_uplift": _at_least(mean_uplift, GOAL_MEAN_UPLIFT),
                     "factors_ci_above_zero": len(above) >= GOAL_FACTORS_ABOVE_ZERO if per_factor else None,
                     "clean_not_lower": _at_least(clean_delta, -GOAL_MAX_CLEAN_DROP)}}


def _at_least(value: Any, bound: float) -> bool | None:
    """Whether ``value`` ≥ ``bound``; None when there is no value to judge (no paired episodes)."""
    return bool(value >= bound) if _finite(value) else None


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
