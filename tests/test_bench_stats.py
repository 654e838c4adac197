"""Benchmark statistics against hand-computed textbook values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eval.stats import (
    clean_competence,
    delta_sr,
    mcnemar_exact,
    mean_normalized_score,
    normalized_score,
    paired_bootstrap_delta,
    paired_uplift,
    stage_statistics,
    transitions,
    wilson_interval,
)

# ----------------------------------------------------------------------------------------------- Wilson
# centre = (p + z²/2n) / (1 + z²/n), half = z·sqrt(p(1−p)/n + z²/4n²) / (1 + z²/n), z = 1.959964, z² = 3.841459.
# 8/10: centre = 0.99207/1.38415 = 0.71674, half = 1.959964·sqrt(0.016 + 0.0096036)/1.38415 = 0.22658.
# 0/10: centre = half = 0.19207/1.38415 = 0.13876 → upper 0.27752.
# 50/100: half = 1.959964·sqrt(0.0025 + 0.000096036)/1.0384146 = 0.096170.


@pytest.mark.parametrize("k, n, lo, hi", [
    (8, 10, 0.49016, 0.94331),
    (0, 10, 0.0, 0.27753),
    (10, 10, 0.72247, 1.0),
    (50, 100, 0.40383, 0.59617),
    (0, 0, 0.0, 1.0),
])
def test_wilson_interval_hand_computed(k, n, lo, hi):
    got = wilson_interval(k, n)
    assert got == pytest.approx((lo, hi), abs=5e-5)


def test_wilson_interval_rejects_impossible_counts():
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


# ---------------------------------------------------------------------------------- transitions / McNemar

def test_transitions_counts():
    clean = [True, True, True, True, False, False]
    shifted = [True, False, False, True, True, False]
    assert transitions(clean, shifted) == {"S->S": 2, "S->F": 2, "F->S": 1, "F->F": 1}
    with pytest.raises(ValueError):
        transitions([True], [True, False])


# p = min(1, 2·Σ_{k≤min(b,c)} C(b+c, k) / 2^(b+c))
@pytest.mark.parametrize("b, c, p", [
    (1, 6, 2 * (1 + 7) / 128),           # 0.125
    (6, 1, 0.125),                       # symmetric
    (0, 5, 2 / 32),                      # 0.0625
    (2, 8, 2 * (1 + 10 + 45) / 1024),    # 0.109375
    (3, 1, 2 * (1 + 4) / 16),            # 0.625
    (3, 3, 1.0),                         # 2·P(X ≤ 3) > 1 → capped
    (0, 0, 1.0),                         # no discordant pairs
])
def test_mcnemar_exact_hand_computed(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)


def test_mcnemar_exact_large_counts_are_finite():
    assert mcnemar_exact(0, 3000) == pytest.approx(0.0, abs=1e-300)    # 2 / 2**3000 underflows, no error
    assert mcnemar_exact(1500, 1500) == 1.0


# ------------------------------------------------------------------------------------- paired bootstrap

def _pairs(n_pos: int, n_neg: int, n_same: int) -> tuple[np.ndarray, np.ndarray]:
    """n_pos pairs (a=1, b=0), n_neg pairs (a=0, b=1), n_same pairs (1, 1)."""
    a = np.array([True] * n_pos + [False] * n_neg + [True] * n_same)
    b = np.array([False] * n_pos + [True] * n_neg + [True] * n_same)
    return a, b


def test_bootstrap_degenerate_when_every_pair_differs_the_same_way():
    out = paired_bootstrap_delta({"t": (np.ones(7, bool), np.zeros(7, bool))}, n_resamples=500)
    assert (out["delta"], out["lo"], out["hi"]) == (1.0, 1.0, 1.0)
    assert (out["n_tasks"], out["n_pairs"]) == (1, 7)


def test_bootstrap_two_pairs_exact_distribution():
    # d = [1, 0]: resampled means are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4 → 95 % CI [0, 1]
    out = paired_bootstrap_delta({"t": (np.array([True, True]), np.array([False, True]))})
    assert out["delta"] == 0.5
    assert (out["lo"], out["hi"]) == (0.0, 1.0)


def test_single_pair_strata_are_resampled_too_instead_of_a_zero_width_interval():
    """40 strata of one pair each (LIBERO-Plus: one episode per sampled task and level), 12 improved, 28 unchanged:
    resampling within each stratum alone would give [0.3, 0.3]; resampling the strata gives about the spread of 40
    independent pairs (0.3 ± 1.96·sqrt(0.3·0.7/40) ≈ [0.16, 0.44])."""
    pairs = {f"s{i}": (np.array([i < 12]), np.array([False])) for i in range(40)}
    out = paired_bootstrap_delta(pairs, n_resamples=10_000, seed=1)
    assert out["strata_resampled"] and out["delta"] == pytest.approx(0.3)
    assert 0.12 < out["lo"] < 0.2 and 0.4 < out["hi"] < 0.48
    several = paired_bootstrap_delta({"a": _pairs(3, 0, 7), "b": _pairs(5, 1, 4)}, seed=1)
    assert not several["strata_resampled"]  # every stratum has its own spread: the plain stratified bootstrap


def test_bootstrap_matches_normal_approximation():
    # 30 of 100 pairs S→F: delta 0.3, se = sqrt(0.3·0.7/100) = 0.04583, CI ≈ 0.3 ± 1.96·se = [0.210, 0.390]
    out = paired_bootstrap_delta({"t": _pairs(30, 0, 70)}, n_resamples=10_000, seed=3)
    assert out["delta"] == pytest.approx(0.3)
    assert out["lo"] == pytest.approx(0.210, abs=0.015)
    assert out["hi"] == pytest.approx(0.390, abs=0.015)


def test_bootstrap_is_a_macro_average_over_tasks():
    # task A: 2 of 10 flip (0.2); task B: none of 30 (0.0) → macro 0.1, not the pooled 2/40 = 0.05
    a = _pairs(2, 0, 8)
    b = (np.ones(30, bool), np.ones(30, bool))
    out = paired_bootstrap_delta({"A": a, "B": b, "empty": (np.zeros(0, bool), np.zeros(0, bool))})
    assert out["delta"] == pytest.approx(0.1)
    assert out["n_tasks"] == 2 and out["n_pairs"] == 40
    assert 0.0 <= out["lo"] <= 0.1 <= out["hi"] <= 0.25


def test_bootstrap_deterministic_given_seed_and_empty_input():
    pairs = {"t": _pairs(5, 2, 13), "u": _pairs(1, 3, 6)}
    assert paired_bootstrap_delta(pairs, seed=4) == paired_bootstrap_delta(pairs, seed=4)
    rng = np.random.default_rng(1)        # continuous scores (e.g. normalized scores) work too
    scores = {"t": (rng.random(30), rng.random(30))}
    assert paired_bootstrap_delta(scores, seed=4)["lo"] != paired_bootstrap_delta(scores, seed=5)["lo"]
    empty = paired_bootstrap_delta({})
    assert math.isnan(empty["delta"]) and math.isnan(empty["lo"]) and empty["n_tasks"] == 0
    with pytest.raises(ValueError):
        paired_bootstrap_delta({"t": (np.ones(3, bool), np.ones(4, bool))})


def test_bootstrap_on_a_large_input_depends_only_on_value_counts():
    """Why it is cheap (timing belongs in benchmarks): only each task's counts of distinct differences are
    resampled, O(resamples × distinct values), not every pair; so the order of the pairs cannot matter."""
    rng = np.random.default_rng(0)
    pairs = {f"task{i}": (rng.random(1000) < 0.8, rng.random(1000) < 0.6) for i in range(8)}
    out = paired_bootstrap_delta(pairs, n_resamples=10_000, seed=2)
    diffs = [a.astype(float) - b for a, b in pairs.values()]
    assert out["delta"] == pytest.approx(np.mean([d.mean() for d in diffs]), abs=1e-12)
    assert out["n_tasks"] == 8 and out["n_pairs"] == 8000
    # normal approximation of the macro mean: se = sqrt(Σ var_i / n_i) / 8, CI ≈ delta ± 1.96·se
    se = math.sqrt(sum(d.var() / d.size for d in diffs)) / len(diffs)
    assert out["lo"] == pytest.approx(out["delta"] - 1.96 * se, abs=0.1 * se)
    assert out["hi"] == pytest.approx(out["delta"] + 1.96 * se, abs=0.1 * se)
    order = np.random.default_rng(1)
    shuffled = {task: (a[perm], b[perm]) for task, (a, b) in pairs.items() for perm in [order.permutation(a.size)]}
    assert paired_bootstrap_delta(shuffled, n_resamples=10_000, seed=2) == out


def test_named_wrappers_orient_the_difference():
    clean, shifted = _pairs(3, 1, 6)       # ΔSR = 0.9 − 0.7 = 0.2
    assert delta_sr({"t": (clean, shifted)})["delta"] == pytest.approx(0.2)
    base, r2a = shifted, clean            # uplift = SR(r2a) − SR(base) = +0.2
    up = paired_uplift({"t": (base, r2a)})
    assert up["delta"] == pytest.approx(0.2)
    assert up == paired_bootstrap_delta({"t": (r2a, base)})


# --------------------------------------------------------------------------- scores, screening, stages

def test_normalized_score():
    assert normalized_score(True, 0.2) == 1.0
    assert normalized_score(False, 2 / 3) == pytest.approx(2 / 3)
    # SR = 0.5, failures' mean progress 0.25 → RoboLab 0.5 + 0.5·0.25 = 0.625
    assert mean_normalized_score([True, True, False, False], [1.0, 1.0, 0.0, 0.5]) == pytest.approx(0.625)
    assert math.isnan(mean_normalized_score([], []))


def test_clean_competence():
    assert clean_competence({"Lift": 0.9, "Stack": 0.2, "Hard": 0.1, "None": math.nan}, 0.2) == {
        "Lift": True, "Stack": True, "Hard": False, "None": False}


def _stage_record(reached: list[bool], names: list[str]) -> dict:
    stages = dict(zip(names, reached))
    first = next((n for n in names if not stages[n]), None)
    return {"stages": stages, "first_incomplete_stage": first, "progress": sum(reached) / len(names)}


def test_stage_statistics_hand_computed():
    names = ["reached", "grasped", "lifted"]
    cohort = [_stage_record(r, names) for r in ([False, False, False], [True, False, False],
                                                  [True, True, False], [True, True, False])]
    out = stage_statistics(cohort, names)
    assert out["n"] == 4
    assert out["mean_progress"] == pytest.approx((0 + 1 / 3 + 2 / 3 + 2 / 3) / 4)
    assert out["share_before_first_stage"] == 0.25
    assert out["first_incomplete"] == {"reached": 1, "grasped": 1, "lifted": 2, "all_reached": 0}
    assert out["deepest_reached"] == {"none": 1, "reached": 1, "grasped": 2, "lifted": 0}


def test_stage_statistics_derives_missing_fields_and_handles_empty():
    names = ["a", "b"]
    out = stage_statistics([{"stages": {"a": True, "b": True}}, {"stages": {"a": False, "b": True}}], names)
    assert out["first_incomplete"] == {"a": 1, "b": 0, "all_reached": 1}
    assert out["deepest_reached"] == {"none": 0, "a": 0, "b": 2}
    assert out["mean_progress"] == pytest.approx(0.75)
    empty = stage_statistics([], names)
    assert empty["n"] == 0 and math.isnan(empty["mean_progress"])
