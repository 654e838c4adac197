"""The statistics tables of a benchmark summary (``summary.json``): clean runs, per condition, per factor and
level, uplift per policy pair and its headline, the wrapper's and harmonization's diagnostics — every number of
the report, computed from the records by :func:`build_summary`."""

from __future__ import annotations

import logging
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from eval.headline import ALL, headline_rows
from eval.report.integrity import integrity_table
from eval.report.records import Jobs, Record, dedupe_records, job_key, modifies_state, validate_record
from eval.schema import CLEAN, JOB_FIELDS, SUMMARY_SCHEMA, SUMMARY_SCHEMA_VERSION
from eval.stats import (
    clean_competence,
    mcnemar_exact,
    mean_normalized_score,
    paired_bootstrap_delta,
    stage_statistics,
    transitions,
    wilson_interval,
)
from r2a_core.errors import R2AInputError
from r2a_core.files import to_json_safe

log = logging.getLogger(__name__)


def build_summary(records: Sequence[Record], *, n_resamples: int = 10_000, seed: int = 0,
                  competence_threshold: float = 0.2, config: Mapping[str, Any] | None = None,
                  provenance: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every statistic of the benchmark from per-episode records, as a JSON-safe dict (NaN → None).

    ``config`` (optional) is stored in the summary; ``expected_jobs`` (a list of job keys, as lists or dicts)
    or ``expected_job_count`` fill the integrity table's expected column, ``base_policy`` picks the policy
    whose clean SR screens tasks. ``provenance`` (run.json's: commit, versions, machine, command line, the
    sha256 of what each policy loaded) is stored as it is.
    """
    config = dict(config or {})
    for rec in records:
        problem = validate_record(rec)
        if problem:
            raise R2AInputError(f"episode record {[rec.get(f) for f in JOB_FIELDS]}: {problem}")
    unique, replaced = dedupe_records(records)
    jobs = Jobs(unique)
    boot = {"n_resamples": n_resamples, "seed": seed}
    competent = _competence(jobs, competence_threshold, config.get("base_policy"))
    summary = {
        "schema": SUMMARY_SCHEMA, "schema_version": SUMMARY_SCHEMA_VERSION,
        "settings": {"n_resamples": n_resamples, "seed": seed, "ci": 0.95,
                     "competence_threshold": competence_threshold, "base_policy": config.get("base_policy")},
        "versions": _versions(),
        "provenance": dict(provenance) if provenance else None,
        "config": config or None,
        "policies": jobs.policies, "tasks": jobs.tasks, "factors": jobs.factors,
        "integrity": integrity_table(jobs, len(records), replaced, config),
        "clean": (clean := [_clean_row(jobs, policy, task, competent) for policy, task in jobs.clean_cells()]),
        "clean_pooled": clean_pooled_rows(clean),
        "conditions": [_condition_row(jobs, key, boot) for key in jobs.conditions()],
        "aggregates": [_aggregate_row(jobs, policy, factor, level, competent[policy], boot)
                       for policy, factor, level in jobs.factor_levels()],
        "uplift": (uplift := _uplift_rows(jobs, boot)),
        "headline": headline_rows(uplift, shown_pairs(jobs.policies, config.get("base_policy"))),
        "errors": [{**{f: rec[f] for f in JOB_FIELDS}, "error": rec["error"]}
                   for rec in sorted(jobs.all, key=job_key) if rec.get("error") is not None],
        "failure_frames": _failure_frames(jobs),
        "wrapper": _wrapper_rows(jobs),
        "harmonize": _harmonize_rows(jobs),
    }
    return to_json_safe(summary)


def _summaries_by_condition(jobs: Jobs, key: str) -> list[tuple[tuple[str, str, int], list[Mapping[str, Any]]]]:
    """The per-episode ``key`` summaries of the valid records, grouped by (policy, factor, level), sorted."""
    groups: dict[tuple[str, str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for rec in jobs.valid:
        if isinstance(rec.get(key), Mapping):
            groups[(rec["policy"], rec["factor"], int(rec["level"]))].append(rec[key])
    return sorted(groups.items())


def _wrapper_rows(jobs: Jobs) -> list[dict[str, Any]]:
    """Per policy and condition, what the R2A wrapper did (records of wrapped policies carry ``r2a``): the share of
    its chunks that fell back to the base and why, its mean gate per dimension, the mean seed distance and how
    many episodes started with a start-pose recovery."""
    rows = []
    for (policy, factor, level), summaries in _summaries_by_condition(jobs, "r2a"):
        queries = sum(int(s.get("queries") or 0) for s in summaries)
        reasons: dict[str, int] = defaultdict(int)
        for s in summaries:
            for reason, count in (s.get("fallbacks") or {}).items():
                reasons[reason] += int(count)
        gates = [s["mean_gate"] for s in summaries if s.get("mean_gate") is not None]
        seeds = [s["mean_seed_distance"] for s in summaries if s.get("mean_seed_distance") is not None]
        rows.append({"policy": policy, "factor": factor, "level": level, "episodes": len(summaries),
                     "queries": queries, "fallback_share": sum(reasons.values()) / queries if queries else math.nan,
                     "fallbacks": dict(reasons),
                     "mean_gate": np.mean(gates, axis=0).round(4).tolist() if gates else None,
                     "mean_seed_distance": float(np.mean(seeds)) if seeds else math.nan,
                     "recovered_episodes": sum(1 for s in summaries if int(s.get("recovery_steps") or 0) > 0)})
    return rows


def _harmonize_rows(jobs: Jobs) -> list[dict[str, Any]]:
    """Per policy and condition, how often observation harmonization acted (records of harmonized policies carry
    ``harmonize``): the share of the base's queries whose images it mapped, on any camera and per camera."""
    rows = []
    for (policy, factor, level), summaries in _summaries_by_condition(jobs, "harmonize"):
        queries = sum(int(s.get("queries") or 0) for s in summaries)

        def share(get: Any, summaries: list[Mapping[str, Any]] = summaries, queries: int = queries) -> float:
            acted = sum(float(get(s) or 0.0) * int(s.get("queries") or 0) for s in summaries)
            return acted / queries if queries else math.nan

        cameras = sorted({cam for s in summaries for cam in (s.get("active_share") or {})})
        rows.append({"policy": policy, "factor": factor, "level": level, "episodes": len(summaries),
                     "queries": queries, "active_share": share(lambda s: s.get("any_active_share")),
                     "camera_share": {cam: share(lambda s, c=cam: (s.get("active_share") or {}).get(c))
                                      for cam in cameras}})
    return rows


def _failure_frames(jobs: Jobs) -> list[dict[str, Any]]:
    """Every failed episode with a frame strip, beside the strip of its clean twin (when it has one)."""
    rows = []
    for rec in sorted(jobs.all, key=job_key):
        if rec["success"] or not rec.get("frames"):
            continue
        twin = None if rec["factor"] == CLEAN else jobs.any_by_job.get((rec["policy"], rec["task"], CLEAN, 0,
                                                                         int(rec["episode"])))
        rows.append({**{f: rec[f] for f in JOB_FIELDS}, "error": rec.get("error"), "frames": rec["frames"],
                     "frame_steps": rec.get("frame_steps"), "clean_frames": (twin or {}).get("frames"),
                     "clean_success": None if twin is None else bool(twin["success"])})
    return rows


def _successes(records: Iterable[Record]) -> np.ndarray:
    return np.array([bool(rec["success"]) for rec in records], dtype=bool)


def _sr(records: Sequence[Record]) -> float:
    return float(np.mean(_successes(records))) if records else math.nan


def _with_ci(successes: np.ndarray) -> dict[str, Any]:
    k, n = int(successes.sum()), int(successes.size)
    return {"n": n, "successes": k, "sr": k / n if n else math.nan, "sr_ci": list(wilson_interval(k, n))}


def _score(records: Sequence[Record]) -> float:
    return mean_normalized_score([bool(r["success"]) for r in records],
                                 [float(r.get("progress") or 0.0) for r in records])


def _stage_names(records: Sequence[Record]) -> list[str]:
    return list(next((r.get("stage_names") for r in records if r.get("stage_names")), []))


def _failure_stages(records: Sequence[Record]) -> dict[str, Any]:
    failures = [r for r in records if not r["success"]]
    return stage_statistics(failures, _stage_names(records))


def _events(records: Iterable[Record]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for rec in records:
        for name, count in (rec.get("events") or {}).items():
            totals[name] += int(count or 0)
    return dict(sorted(totals.items()))


def _mean_metrics(records: Sequence[Record]) -> dict[str, float]:
    """Mean of each trajectory metric over the records that have a finite value for it."""
    values: dict[str, list[float]] = defaultdict(list)
    for rec in records:
        for name, value in (rec.get("metrics") or {}).items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                values[name].append(float(value))
            else:
                values.setdefault(name, [])
    return {name: float(np.mean(v)) if v else math.nan for name, v in sorted(values.items())}


def _competence(jobs: Jobs, threshold: float, base_policy: str | None) -> dict[str, dict[str, bool]]:
    """Per policy: task → passes clean-competence screening."""
    def clean_sr(policy: str) -> dict[str, float]:
        return {task: _sr(jobs.cell(policy, task, CLEAN)) for task in jobs.tasks}

    if base_policy is not None and base_policy not in jobs.policies:
        log.info("base_policy %r has no records here (a run made for 'r2a bench merge'?); screening each policy "
                 "on its own clean SR", base_policy)
        base_policy = None
    if base_policy is not None:
        shared = clean_competence(clean_sr(base_policy), threshold)
        return {policy: shared for policy in jobs.policies}
    return {policy: clean_competence(clean_sr(policy), threshold) for policy in jobs.policies}


def _clean_row(jobs: Jobs, policy: str, task: str, competent: Mapping[str, Mapping[str, bool]]) -> dict[str, Any]:
    runs = jobs.cell(policy, task, CLEAN)
    return {"policy": policy, "task": task, **_with_ci(_successes(runs)), "normalized_score": _score(runs),
            "competent": competent[policy].get(task, False), "failure_stages": _failure_stages(runs),
            "events": _events(runs), "trajectory": _mean_metrics([r for r in runs if r["success"]])}


def clean_pooled_rows(clean: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each policy's clean episodes pooled per suite (the part of a task's name before ``/``: LIBERO's
    ``libero_spatial/3``) and over every task (``all``), with Wilson intervals — the per-suite clean table a
    LIBERO paper reports. Tasks without a suite pool into ``all`` only."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for row in clean:
        groups[row["policy"], ALL].append(row)
        if "/" in row["task"]:
            groups[row["policy"], row["task"].split("/", 1)[0]].append(row)
    out = []
    for (policy, group), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] == ALL, kv[0][1])):
        k, n = sum(r["successes"] for r in rows), sum(r["n"] for r in rows)
        out.append({"policy": policy, "group": group, "tasks": len(rows), "n": n, "successes": k,
                    "sr": k / n if n else math.nan, "sr_ci": list(wilson_interval(k, n))})
    return out


def _condition_row(jobs: Jobs, key: tuple[str, str, str, int], boot: Mapping[str, int]) -> dict[str, Any]:
    policy, task, factor, level = key
    runs = jobs.cell(policy, task, factor, level)
    pairs = jobs.clean_pairs(runs)
    clean_ok, shift_ok = _successes(c for c, _ in pairs), _successes(s for _, s in pairs)
    delta = paired_bootstrap_delta({task: (clean_ok, shift_ok)}, **boot)
    trans = transitions(clean_ok, shift_ok)
    s_to_f = [s for c, s in pairs if c["success"] and not s["success"]]
    both = [(c, s) for c, s in pairs if c["success"] and s["success"]]
    return {"policy": policy, "task": task, "factor": factor, "level": level, **_with_ci(_successes(runs)),
            "n_pairs": len(pairs), "clean_sr": float(clean_ok.mean()) if pairs else math.nan,
            "delta_sr": delta["delta"], "delta_sr_ci": [delta["lo"], delta["hi"]],
            "transitions": trans, "mcnemar_p": mcnemar_exact(trans["S->F"], trans["F->S"]),
            "normalized_score": _score(runs), "clean_normalized_score": _score([c for c, _ in pairs]),
            "s_to_f_stages": stage_statistics(s_to_f, _stage_names(runs)),
            "failure_stages": _failure_stages(runs),
            "trajectory_both_success": {"n": len(both), "clean": _mean_metrics([c for c, _ in both]),
                                        "shifted": _mean_metrics([s for _, s in both])},
            "events": _events(runs), "clean_events": _events(c for c, _ in pairs),
            "modifies_state": modifies_state(runs)}


def _aggregate_row(jobs: Jobs, policy: str, factor: str, level: int, competent: Mapping[str, bool],
                   boot: Mapping[str, int]) -> dict[str, Any]:
    """Macro ΔSR over the tasks that pass clean-competence screening; screened-out tasks are listed."""
    pairs_by_task = {}
    for task in jobs.tasks:
        pairs = jobs.clean_pairs(jobs.cell(policy, task, factor, level))
        if pairs:
            pairs_by_task[task] = (_successes(c for c, _ in pairs), _successes(s for _, s in pairs))
    included = {t: p for t, p in pairs_by_task.items() if competent.get(t, False)}
    delta = paired_bootstrap_delta(included, **boot)
    clean_ok = np.concatenate([c for c, _ in included.values()]) if included else np.zeros(0, bool)
    shift_ok = np.concatenate([s for _, s in included.values()]) if included else np.zeros(0, bool)
    trans = transitions(clean_ok, shift_ok)
    return {"policy": policy, "factor": factor, "level": level, "tasks": sorted(included),
            "screened_out": sorted(set(pairs_by_task) - set(included)), "n_pairs": delta["n_pairs"],
            "clean_sr": _macro(c for c, _ in included.values()), "sr": _macro(s for _, s in included.values()),
            "delta_sr": delta["delta"], "delta_sr_ci": [delta["lo"], delta["hi"]],
            "transitions": trans, "mcnemar_p": mcnemar_exact(trans["S->F"], trans["F->S"])}


def _macro(arrays: Iterable[np.ndarray]) -> float:
    means = [float(np.mean(a)) for a in arrays]
    return float(np.mean(means)) if means else math.nan


def _uplift_rows(jobs: Jobs, boot: Mapping[str, int]) -> list[dict[str, Any]]:
    """SR(candidate) − SR(baseline) on the same jobs, for every ordered pair of policies: per perturbed
    (factor, level) stratified by task, per factor pooled over its levels (level None, strata task × level),
    over every perturbed job (factor ``"all"``, strata task × factor × level) and on the clean jobs
    (factor ``"clean"``, level 0)."""
    rows = []
    keys = [job_key(r) for r in jobs.valid]
    factor_levels = sorted({(f, lvl) for _, _, f, lvl, _ in keys if f != CLEAN})
    factors = sorted({f for f, _ in factor_levels})
    by_task, by_task_level = (lambda k: k[0]), (lambda k: f"{k[0]}|L{k[2]}")
    for baseline in jobs.policies:
        for candidate in jobs.policies:
            if candidate == baseline:
                continue
            shared = sorted({k[1:] for k in keys if k[0] == baseline and (candidate, *k[1:]) in jobs.by_job})
            shifted = [k for k in shared if k[1] != CLEAN]
            for factor, level in factor_levels:
                cells = [k for k in shifted if k[1] == factor and k[2] == level]
                rows.append(_uplift_row(jobs, baseline, candidate, factor, level, cells, by_task, boot))
            for factor in factors:
                cells = [k for k in shifted if k[1] == factor]
                rows.append(_uplift_row(jobs, baseline, candidate, factor, None, cells, by_task_level, boot))
            rows.append(_uplift_row(jobs, baseline, candidate, "all", None, shifted,
                                    lambda k: f"{k[0]}|{k[1]}|L{k[2]}", boot))
            rows.append(_uplift_row(jobs, baseline, candidate, CLEAN, 0, [k for k in shared if k[1] == CLEAN],
                                    by_task, boot))
    return rows


def _uplift_row(jobs: Jobs, baseline: str, candidate: str, factor: str, level: int | None,
                shared: Sequence[tuple[str, str, int, int]], group: Any, boot: Mapping[str, int]) -> dict[str, Any]:
    """One uplift row; ``group`` maps a shared (task, factor, level, episode) job to its bootstrap stratum."""
    grouped: dict[str, tuple[list[bool], list[bool]]] = defaultdict(lambda: ([], []))
    for job in shared:
        base_list, cand_list = grouped[group(job)]
        base_list.append(bool(jobs.by_job[(baseline, *job)]["success"]))
        cand_list.append(bool(jobs.by_job[(candidate, *job)]["success"]))
    pairs = {g: (np.array(b, bool), np.array(c, bool)) for g, (b, c) in grouped.items()}
    delta = paired_bootstrap_delta({g: (c, b) for g, (b, c) in pairs.items()}, **boot)
    base_all = np.concatenate([b for b, _ in pairs.values()]) if pairs else np.zeros(0, bool)
    cand_all = np.concatenate([c for _, c in pairs.values()]) if pairs else np.zeros(0, bool)
    trans = transitions(base_all, cand_all)
    record_pairs = [(jobs.by_job[(baseline, *job)], jobs.by_job[(candidate, *job)]) for job in shared]
    return {"baseline": baseline, "candidate": candidate, "factor": factor, "level": level,
            "n_pairs": delta["n_pairs"], "n_strata": delta["n_tasks"],
            "baseline_sr": _macro(b for b, _ in pairs.values()), "candidate_sr": _macro(c for _, c in pairs.values()),
            "baseline_sr_ci": list(wilson_interval(int(base_all.sum()), len(base_all))),
            "candidate_sr_ci": list(wilson_interval(int(cand_all.sum()), len(cand_all))),
            "uplift": delta["delta"], "uplift_ci": [delta["lo"], delta["hi"]],
            "strata_resampled": delta["strata_resampled"],
            "transitions": trans, "mcnemar_p": mcnemar_exact(trans["S->F"], trans["F->S"]),
            **_paired_diagnostics(record_pairs)}


def _paired_diagnostics(pairs: Sequence[tuple[Record, Record]]) -> dict[str, Any]:
    """What changed between the baseline's and the candidate's run of the same jobs, beyond the SR.

    ``fixed_at``: where the baseline had stopped (first incomplete stage) on the F→S pairs — the stage the
    candidate fixes; ``broken_at``: where the candidate stops on the S→F pairs. ``both_failed``: on pairs that
    fail in both, the mean progress of each and how often the candidate gets further or less far (does it move
    failures later?). ``trajectory_both_success``: mean trajectory metrics of each on the pairs that succeed in
    both (smoother or jerkier successful motion?).
    """
    def first_incomplete(records: Sequence[Record]) -> dict[str, int]:
        hist: dict[str, int] = defaultdict(int)
        for rec in records:  # per record: tasks differ in their stages
            for stage, n in stage_statistics([rec], rec.get("stage_names") or [])["first_incomplete"].items():
                hist[stage] += n
        return {stage: n for stage, n in sorted(hist.items()) if n}

    fixed = [b for b, c in pairs if not b["success"] and c["success"]]
    broken = [c for b, c in pairs if b["success"] and not c["success"]]
    failed = [(float(b.get("progress") or 0.0), float(c.get("progress") or 0.0))
              for b, c in pairs if not b["success"] and not c["success"]]
    both = [(b, c) for b, c in pairs if b["success"] and c["success"]]
    return {"fixed_at": first_incomplete(fixed), "broken_at": first_incomplete(broken),
            "both_failed": {"n": len(failed),
                            "baseline_progress": float(np.mean([b for b, _ in failed])) if failed else math.nan,
                            "candidate_progress": float(np.mean([c for _, c in failed])) if failed else math.nan,
                            "later": sum(c > b for b, c in failed), "earlier": sum(c < b for b, c in failed)},
            "trajectory_both_success": {"n": len(both), "baseline": _mean_metrics([b for b, _ in both]),
                                        "candidate": _mean_metrics([c for _, c in both])}}


def shown_pairs(policies: Sequence[str], base_policy: str | None) -> list[tuple[str, str]]:
    """The (baseline, candidate) pairs the report shows: the base policy against each other policy when it is
    configured and present, else each unordered pair once in sorted order."""
    if base_policy in policies:
        return [(base_policy, p) for p in policies if p != base_policy]
    return [(a, b) for i, a in enumerate(policies) for b in policies[i + 1:]]


def is_shown_pair(row: Mapping[str, Any], base_policy: str | None, policies: set[str]) -> bool:
    """Whether an ordered uplift row is the one shown for its unordered pair: the base policy as baseline when
    it is one of the two, else the pair in sorted order."""
    pair = {row["baseline"], row["candidate"]}
    if base_policy in pair and base_policy in policies:
        return row["baseline"] == base_policy
    return row["baseline"] < row["candidate"]


def _versions() -> dict[str, str]:
    from importlib import metadata

    versions = {"python": sys.version.split()[0], "numpy": np.__version__}
    try:
        versions["r2a"] = metadata.version("r2a")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        versions["r2a"] = "unknown"
    return versions


__all__ = ["build_summary", "is_shown_pair", "shown_pairs"]
