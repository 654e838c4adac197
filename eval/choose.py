"""Choosing which wrapper variant to run on test seeds, from a screen on training seeds, by a rule fixed in advance.

On a base that is already good, a part of R2A can cost clean success (the reference blend did around the strong
LIBERO base: docs/experiments/libero_strong.md). Which variant to publish must be decided before any of its test
episodes runs, on training seeds, and by a rule written down before the screen is read — otherwise the choice is
tuned on the numbers it reports. The rule (docs/wrap_your_policy.md):

1. a candidate is *eligible* when its clean SR is no more than ``max_clean_drop`` SR points below the baseline's on
   the same episodes (the paired clean difference of the screen's headline);
2. among the eligible, the highest pooled uplift over every shifted pair wins; a tie goes to the candidate listed
   first (list the simpler variant first);
3. no eligible candidate: nothing is chosen, and the reasons are listed (the caller decides, in the open).

The screen must hold training seeds only: a results directory with any episode at a test seed (≥ 100000) is refused.
The rule reads the screen's records, not a stale ``summary.json``: a summary built from other records (an episode
appended or re-run since) is rebuilt from them in memory first (:func:`eval.runner.summary_staleness`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.schema import SUMMARY
from eval.view import read_run
from r2a_core.errors import R2AInputError
from r2a_core.files import write_json_atomic
from r2a_core.seeds import TEST_SEED_START

log = logging.getLogger(__name__)

CHOICE_SCHEMA = "r2a.bench.choice"
CHOICE_SCHEMA_VERSION = 1
#: the project's rule: clean no more than 1 SR point lower than the base on the same episodes
DEFAULT_MAX_CLEAN_DROP_POINTS = 1.0

__all__ = ["CHOICE_SCHEMA", "CHOICE_SCHEMA_VERSION", "DEFAULT_MAX_CLEAN_DROP_POINTS", "apply_rule", "choose_variant",
           "format_choice"]


def choose_variant(run_dir: str | Path, baseline: str | None = None, candidates: Sequence[str] = (),
                   max_clean_drop_points: float = DEFAULT_MAX_CLEAN_DROP_POINTS,
                   out: str | Path | None = None) -> dict[str, Any]:
    """Apply the rule to a screen's results directory; ``out`` (optional) receives the choice as JSON.

    ``baseline`` defaults to the run's ``base_policy``, ``candidates`` to every other policy in the run's order.
    """
    run_dir = Path(run_dir)
    records, summary = read_run(run_dir)
    _refuse_test_seeds(records, run_dir)
    summary = _current_summary(run_dir, records, summary)
    policies = list(summary.get("policies") or [])
    baseline = baseline or summary.get("settings", {}).get("base_policy")
    if baseline not in policies:
        raise R2AInputError(f"{run_dir}: the baseline {baseline!r} did not run here; its policies are {policies} "
                            "(name one with --baseline)")
    candidates = list(candidates) or [p for p in policies if p != baseline]
    unknown = [c for c in candidates if c not in policies or c == baseline]
    if unknown or not candidates:
        raise R2AInputError(f"{run_dir}: candidates {unknown or candidates} are not policies of this run besides the "
                            f"baseline; choose among {[p for p in policies if p != baseline]}")
    headlines = {h["candidate"]: h for h in summary.get("headline", []) if h.get("baseline") == baseline}
    missing = [c for c in candidates if c not in headlines]
    if missing:
        run_base = summary.get("settings", {}).get("base_policy")
        raise R2AInputError(f"{run_dir}: no headline of {missing} against {baseline!r} (no paired episodes); the "
                            f"run's uplift is against {run_base!r}: name that baseline, or pair anew with "
                            f"'r2a bench merge OUT {run_dir} --base-policy {baseline!r}'")
    choice = apply_rule([headlines[c] for c in candidates], max_clean_drop_points)
    choice.update({"schema": CHOICE_SCHEMA, "schema_version": CHOICE_SCHEMA_VERSION, "run_dir": str(run_dir),
                   "baseline": baseline, "seeds": _seed_range(records)})
    if out is not None:
        write_json_atomic(Path(out), choice)
    log.info("%s: chose %s", run_dir, choice["chosen"])
    return choice


def _current_summary(run_dir: Path, records: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """``summary.json`` when it describes ``records``; else the summary rebuilt from them in memory (``r2a bench
    report`` rewrites the file), or a one-line error when it cannot be rebuilt: a choice is never read off a summary
    of other records."""
    from eval.runner import summary_from_dir, summary_staleness

    stale = summary_staleness(run_dir, records, summary)
    if stale is None:
        return summary
    try:
        rebuilt = summary_from_dir(run_dir, records)
    except R2AInputError as err:
        raise R2AInputError(f"{run_dir / SUMMARY}: out of date ({stale}) and cannot be rebuilt from the records: "
                            f"{err}") from None
    log.warning("%s: out of date (%s); choosing on a summary rebuilt from the records ('r2a bench report %s' "
                "rewrites the file)", run_dir / SUMMARY, stale, run_dir)
    return rebuilt


def apply_rule(headlines: Sequence[Mapping[str, Any]], max_clean_drop_points: float) -> dict[str, Any]:
    """The rule over candidates' headlines (:func:`eval.headline.headline`), in the order they are listed."""
    if not (math.isfinite(max_clean_drop_points) and max_clean_drop_points >= 0):
        raise R2AInputError(f"--max-clean-drop must be a finite number of SR points ≥ 0, got {max_clean_drop_points}")
    rows = [_candidate_row(h, max_clean_drop_points) for h in headlines]
    eligible = [r for r in rows if r["eligible"]]
    best = max(eligible, key=lambda r: r["pooled_uplift"], default=None)  # max keeps the first of equals
    points = f"{max_clean_drop_points:g} point{'' if max_clean_drop_points == 1 else 's'}"
    return {"rule": {"max_clean_drop_points": max_clean_drop_points,
                     "text": f"clean SR at most {points} "
                             "below the baseline's on the same episodes, then the highest pooled shifted uplift; "
                             "ties to the first listed"},
            "candidates": rows, "chosen": best["candidate"] if best else None}


def _candidate_row(h: Mapping[str, Any], max_drop: float) -> dict[str, Any]:
    clean, pooled = h["clean"], h["pooled_uplift"]
    clean_points = 100 * clean["uplift"] if clean["n_pairs"] else math.nan
    reasons = []
    if not clean["n_pairs"]:
        reasons.append("no clean pairs")
    elif clean_points < -max_drop - 1e-9:
        reasons.append(f"clean {clean_points:+.1f} points")
    if not h["n_pairs"] or not math.isfinite(pooled):
        reasons.append("no shifted pairs")
    return {"candidate": h["candidate"], "clean_baseline_sr": clean["baseline_sr"], "clean_sr": clean["candidate_sr"],
            "clean_delta_points": clean_points, "clean_pairs": clean["n_pairs"],
            "pooled_uplift": pooled, "pooled_ci": list(h["pooled_ci"]), "shifted_pairs": h["n_pairs"],
            "factors": {f: r["uplift"] for f, r in h["factors"].items()},
            "eligible": not reasons, "why_not": "; ".join(reasons) or None}


def _refuse_test_seeds(records: Sequence[Mapping[str, Any]], run_dir: Path) -> None:
    seeds = [s for r in records for s in (r.get("env_seed"), r.get("policy_seed")) if isinstance(s, int)]
    if any(s >= TEST_SEED_START for s in seeds):
        raise R2AInputError(f"{run_dir}: episodes at test seeds (up to {max(seeds)}); a variant is chosen on training "
                            f"seeds only (< {TEST_SEED_START}), before any of its test episodes runs")
    if not seeds:
        raise R2AInputError(f"{run_dir}: its records name no seeds (env_seed); cannot tell training from test episodes")


def _seed_range(records: Sequence[Mapping[str, Any]]) -> list[int]:
    seeds = [r["env_seed"] for r in records if isinstance(r.get("env_seed"), int)]
    return [min(seeds), max(seeds)]


def format_choice(choice: Mapping[str, Any]) -> str:
    """The choice as a Markdown table and one closing line."""
    lines = [f"baseline: {choice['baseline']} — rule: {choice['rule']['text']}", "",
             "| candidate | clean Δ (points) | clean pairs | pooled shifted uplift [95% CI] | shifted pairs "
             "| eligible |",
             "|---|---|---|---|---|---|"]
    for r in choice["candidates"]:
        lo, hi = r["pooled_ci"]
        lines.append(f"| {r['candidate']} | {r['clean_delta_points']:+.1f} | {r['clean_pairs']} | "
                     f"{100 * r['pooled_uplift']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] | {r['shifted_pairs']} | "
                     f"{'yes' if r['eligible'] else 'no: ' + r['why_not']} |")
    chosen = choice["chosen"]
    lines += ["", f"chosen: {chosen}" if chosen else "chosen: none — no candidate is eligible; decide in the open"]
    return "\n".join(lines) + "\n"
