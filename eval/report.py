"""Per-episode benchmark records → versioned JSON summary, Markdown report and PNG figures
(docs/architecture.md, "The shift benchmark").

The runner appends one ``r2a.bench.episode`` record per job to ``results.jsonl``; a job is keyed by
(policy, task, factor, level, episode) and the clean run is factor ``"clean"``, level 0. This module reads
those records (:func:`load_records`), computes every statistic of the benchmark from them
(:func:`build_summary`) and writes ``summary.json``, ``report.md`` and figures (:func:`write_report`).

Choices the design leaves open, written down here:

- Records with a non-null ``error`` are counted in the integrity table and left out of every statistic: an
  infrastructure failure is not the policy's failure. A runner that wants a simulator blow-up to count as a
  failed episode (robomimic's habit) records it with ``success: false`` and ``error: null``.
- Shifted runs are compared with the clean run of the same policy, task and episode; only such pairs enter
  ΔSR, transitions, McNemar and the S→F cohort. ``sr`` and its Wilson interval use all the condition's runs.
- Clean-competence screening uses ``config["base_policy"]``'s clean SR for every policy when the config names
  one (so that all policies' aggregates cover the same tasks), otherwise each policy's own clean SR.
- Uplift for an ordered policy pair (A, B) is SR(B) − SR(A) on the perturbed jobs both ran; per factor/level it
  is macro-averaged over tasks, and overall over (task, factor, level) cells, each with a paired bootstrap.
- Bootstraps all use the summary's ``seed`` (common random numbers), so the summary is a pure function of the
  records and the settings.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from eval.headline import REFERENCE_LABEL, REFERENCE_UPLIFT, headline_rows
from eval.stats import (
    ALL_STAGES_REACHED,
    clean_competence,
    mcnemar_exact,
    mean_normalized_score,
    paired_bootstrap_delta,
    stage_statistics,
    transitions,
    wilson_interval,
)
from eval.schema import (CLEAN, EPISODE_SCHEMA, EPISODE_SCHEMA_VERSIONS, JOB_FIELDS, SUMMARY_SCHEMA,
                         SUMMARY_SCHEMA_VERSION)
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_path, to_json_safe, write_json_atomic, write_text_atomic

log = logging.getLogger(__name__)

REQUIRED_FIELDS = (*JOB_FIELDS, "success")
#: errored jobs listed in report.md (all of them are in summary.json)
MAX_ERRORS_LISTED = 20

Record = Mapping[str, Any]
JobKey = tuple[str, str, str, int, int]


# ----------------------------------------------------------------------------------------------- reading

def load_records(path: Path, dedupe: bool = True) -> list[dict[str, Any]]:
    """Read ``results.jsonl``: one episode record per line, the last record of a job wins (``dedupe=False``: every
    record in file order, for files whose jobs are told apart by more than the job key — calibration).

    A killed run can leave a truncated last line: it is skipped with a warning (the job is simply re-run on
    resume). A malformed line elsewhere, a record of another schema or of an unknown ``schema_version`` raises
    :class:`R2AInputError` naming the file and line.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == last:
                log.warning("%s:%d: skipping a truncated last record (a killed run?): %s", path, i + 1, exc.msg)
                continue
            raise R2AInputError(f"{path}:{i + 1}: not a JSON record ({exc.msg}); fix or delete that line") from exc
        problem = validate_record(rec)
        if problem:
            raise R2AInputError(f"{path}:{i + 1}: {problem}")
        records.append(rec)
    if not dedupe:
        return records
    unique, replaced = dedupe_records(records)
    log.info("%s: %d records, %d jobs (%d superseded by a later record)", path, len(records), len(unique), replaced)
    return unique


def validate_record(rec: Any) -> str | None:
    """What is wrong with an episode record, or None if it can be used."""
    if not isinstance(rec, dict):
        return f"expected a JSON object, got {type(rec).__name__}"
    if rec.get("schema") != EPISODE_SCHEMA:
        return f"not an episode record: schema is {rec.get('schema')!r}, expected {EPISODE_SCHEMA!r}"
    version = rec.get("schema_version")
    if version not in EPISODE_SCHEMA_VERSIONS:
        return (f"unknown {EPISODE_SCHEMA} schema_version {version!r} (this r2a reads "
                f"{sorted(EPISODE_SCHEMA_VERSIONS)}); upgrade r2a or re-run the benchmark with this version")
    missing = [field for field in REQUIRED_FIELDS if field not in rec]
    if missing:
        return f"episode record lacks {', '.join(missing)}"
    if rec["factor"] == CLEAN and rec["level"] != 0:
        return f"a clean run must have level 0, got level {rec['level']!r}"
    return None


def job_key(rec: Record) -> JobKey:
    """The runner's job key: (policy, task, factor, level, episode)."""
    return (str(rec["policy"]), str(rec["task"]), str(rec["factor"]), int(rec["level"]), int(rec["episode"]))


def dedupe_records(records: Iterable[Record]) -> tuple[list[dict[str, Any]], int]:
    """Keep the last record of each job (a resumed or re-run job appends a newer one); also return how many
    records were superseded."""
    by_job: dict[JobKey, dict[str, Any]] = {}
    n = 0
    for rec in records:
        n += 1
        key = job_key(rec)
        by_job.pop(key, None)
        by_job[key] = dict(rec)
    return list(by_job.values()), n - len(by_job)


# ----------------------------------------------------------------------------------------------- summary

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
    jobs = _Jobs(unique)
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
        "integrity": _integrity(jobs, len(records), replaced, config),
        "clean": [_clean_row(jobs, policy, task, competent) for policy, task in jobs.clean_cells()],
        "conditions": [_condition_row(jobs, key, boot) for key in jobs.conditions()],
        "aggregates": [_aggregate_row(jobs, policy, factor, level, competent[policy], boot)
                       for policy, factor, level in jobs.factor_levels()],
        "uplift": (uplift := _uplift_rows(jobs, boot)),
        "headline": headline_rows(uplift, _shown_pairs(jobs.policies, config.get("base_policy"))),
        "errors": [{**{f: rec[f] for f in JOB_FIELDS}, "error": rec["error"]}
                   for rec in sorted(jobs.all, key=job_key) if rec.get("error") is not None],
        "failure_frames": _failure_frames(jobs),
        "wrapper": _wrapper_rows(jobs),
        "harmonize": _harmonize_rows(jobs),
    }
    return to_json_safe(summary)


def _summaries_by_condition(jobs: _Jobs, key: str) -> list[tuple[tuple[str, str, int], list[Mapping[str, Any]]]]:
    """The per-episode ``key`` summaries of the valid records, grouped by (policy, factor, level), sorted."""
    groups: dict[tuple[str, str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for rec in jobs.valid:
        if isinstance(rec.get(key), Mapping):
            groups[(rec["policy"], rec["factor"], int(rec["level"]))].append(rec[key])
    return sorted(groups.items())


def _wrapper_rows(jobs: _Jobs) -> list[dict[str, Any]]:
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


def _harmonize_rows(jobs: _Jobs) -> list[dict[str, Any]]:
    """Per policy and condition, how often observation harmonization acted (records of harmonized policies carry
    ``harmonize``): the share of the base's queries whose images it mapped, on any camera and per camera."""
    rows = []
    for (policy, factor, level), summaries in _summaries_by_condition(jobs, "harmonize"):
        queries = sum(int(s.get("queries") or 0) for s in summaries)

        def share(get: Any) -> float:
            acted = sum(float(get(s) or 0.0) * int(s.get("queries") or 0) for s in summaries)
            return acted / queries if queries else math.nan

        cameras = sorted({cam for s in summaries for cam in (s.get("active_share") or {})})
        rows.append({"policy": policy, "factor": factor, "level": level, "episodes": len(summaries),
                     "queries": queries, "active_share": share(lambda s: s.get("any_active_share")),
                     "camera_share": {cam: share(lambda s, c=cam: (s.get("active_share") or {}).get(c))
                                      for cam in cameras}})
    return rows


def _failure_frames(jobs: _Jobs) -> list[dict[str, Any]]:
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


class _Jobs:
    """The valid records indexed by job, and the pairings between them."""

    def __init__(self, records: Sequence[dict[str, Any]]):
        self.all = records
        self.valid = [rec for rec in records if rec.get("error") is None]
        self.any_by_job = {job_key(rec): rec for rec in records}
        self.by_job = {job_key(rec): rec for rec in self.valid}
        self.cells: dict[tuple[str, str, str, int], list[dict[str, Any]]] = defaultdict(list)
        for key in sorted(self.by_job):
            self.cells[key[:4]].append(self.by_job[key])
        self.policies = sorted({rec["policy"] for rec in records})
        self.tasks = sorted({rec["task"] for rec in records})
        self.factors = sorted({rec["factor"] for rec in records if rec["factor"] != CLEAN})

    def clean(self, policy: str, task: str, episode: int) -> dict[str, Any] | None:
        return self.by_job.get((policy, task, CLEAN, 0, episode))

    def cell(self, policy: str, task: str, factor: str, level: int = 0) -> list[dict[str, Any]]:
        """The valid records of one condition (or of the clean run), in episode order."""
        return self.cells.get((policy, task, factor, level), [])

    def clean_cells(self) -> list[tuple[str, str]]:
        return sorted({(r["policy"], r["task"]) for r in self.valid if r["factor"] == CLEAN})

    def conditions(self) -> list[tuple[str, str, str, int]]:
        return sorted({job_key(r)[:4] for r in self.valid if r["factor"] != CLEAN})

    def factor_levels(self) -> list[tuple[str, str, int]]:
        return sorted({(p, f, lvl) for p, _, f, lvl in self.conditions()})

    def clean_pairs(self, shifted: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(clean, shifted) record pairs: same policy, task and episode."""
        pairs = [(self.clean(s["policy"], s["task"], int(s["episode"])), s) for s in shifted]
        return [(c, s) for c, s in pairs if c is not None]


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


def _competence(jobs: _Jobs, threshold: float, base_policy: str | None) -> dict[str, dict[str, bool]]:
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


def _clean_row(jobs: _Jobs, policy: str, task: str, competent: Mapping[str, Mapping[str, bool]]) -> dict[str, Any]:
    runs = jobs.cell(policy, task, CLEAN)
    return {"policy": policy, "task": task, **_with_ci(_successes(runs)), "normalized_score": _score(runs),
            "competent": competent[policy].get(task, False), "failure_stages": _failure_stages(runs),
            "events": _events(runs), "trajectory": _mean_metrics([r for r in runs if r["success"]])}


def _condition_row(jobs: _Jobs, key: tuple[str, str, str, int], boot: Mapping[str, int]) -> dict[str, Any]:
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
            "modifies_state": _modifies_state(runs)}


def _modifies_state(records: Iterable[Record]) -> bool | None:
    return next((bool(r["modifies_state"]) for r in records if r.get("modifies_state") is not None), None)


def _aggregate_row(jobs: _Jobs, policy: str, factor: str, level: int, competent: Mapping[str, bool],
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


def _uplift_rows(jobs: _Jobs, boot: Mapping[str, int]) -> list[dict[str, Any]]:
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


def _uplift_row(jobs: _Jobs, baseline: str, candidate: str, factor: str, level: int | None,
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


# --------------------------------------------------------------------------------------------- integrity

def _integrity(jobs: _Jobs, n_records: int, replaced: int, config: Mapping[str, Any]) -> dict[str, Any]:
    """Expected vs valid jobs, errors, and broken pairings (fingerprint or seed mismatches)."""
    checks = [_pairing_check(jobs, rec) for rec in jobs.all]
    rows = []
    for policy, factor in sorted({(r["policy"], r["factor"]) for r in jobs.all}):
        idx = [i for i, r in enumerate(jobs.all) if (r["policy"], r["factor"]) == (policy, factor)]
        recs = [jobs.all[i] for i in idx]
        rows.append({"policy": policy, "factor": factor, "modifies_state": _modifies_state(recs),
                     "jobs": len(recs), "valid": sum(r.get("error") is None for r in recs),
                     "errors": sum(r.get("error") is not None for r in recs),
                     **{name: sum(checks[i][name] for i in idx) for name in _CHECKS}})
    expected, missing, unexpected = _expected(jobs, config)
    table = {"expected_jobs": expected, "records": n_records, "superseded": replaced, "jobs": len(jobs.all),
             "valid": len(jobs.valid), "errors": len(jobs.all) - len(jobs.valid), "missing": missing,
             "unexpected": unexpected, **{name: sum(c[name] for c in checks) for name in _CHECKS},
             "by_factor": rows}
    table["problems"] = _integrity_problems(table)
    for problem in table["problems"]:
        log.warning("integrity: %s", problem)
    return table


_CHECKS = ("hash_mismatch", "hash_unchecked", "seed_mismatch", "unpaired")


def _pairing_check(jobs: _Jobs, rec: Record) -> dict[str, int]:
    """Check one record's pairing.

    Fingerprint: against the clean run of the same (task, episode) by the first policy that has one (the state
    after reset does not depend on the policy), else against the record's ``expected_fingerprint``.
    Seeds: against the same policy's clean run and against the same job run by the first policy that has it.
    """
    task, episode = rec["task"], int(rec["episode"])
    clean_runs = _runs_of(jobs, (task, CLEAN, 0, episode))
    ref_print = next((r.get("fingerprint") for r in clean_runs if r.get("fingerprint") is not None),
                     rec.get("expected_fingerprint"))
    own_print = rec.get("fingerprint")
    own_clean = jobs.any_by_job.get((rec["policy"], task, CLEAN, 0, episode))
    same_job = _runs_of(jobs, job_key(rec)[1:])
    seed_refs = [r for r in (own_clean, same_job[0] if same_job else None) if r is not None and r is not rec]
    seeds_differ = any(r.get(s) != rec.get(s) for r in seed_refs for s in ("env_seed", "policy_seed"))
    unpaired = rec["factor"] != CLEAN and rec.get("error") is None and (own_clean is None
                                                                         or own_clean.get("error") is not None)
    return {"hash_mismatch": int(own_print is not None and ref_print is not None and own_print != ref_print),
            "hash_unchecked": int(own_print is None or ref_print is None),
            "seed_mismatch": int(seeds_differ), "unpaired": int(unpaired)}


def _runs_of(jobs: _Jobs, job: tuple[str, str, int, int]) -> list[dict[str, Any]]:
    """The records (valid or not) of one (task, factor, level, episode) job across policies, in policy order."""
    found = (jobs.any_by_job.get((policy, *job)) for policy in jobs.policies)
    return [r for r in found if r is not None]


def _expected(jobs: _Jobs, config: Mapping[str, Any]) -> tuple[int | None, int | None, int | None]:
    """Expected job count and, when the config lists the jobs, how many are missing / not expected."""
    listed = config.get("expected_jobs")
    if listed is not None:
        expected = {_as_job_key(job) for job in listed}
        present = {job_key(r) for r in jobs.all}
        return len(expected), len(expected - present), len(present - expected)
    count = config.get("expected_job_count")
    return (int(count), max(0, int(count) - len(jobs.all)), None) if count is not None else (None, None, None)


def _as_job_key(job: Any) -> JobKey:
    if isinstance(job, Mapping):
        return job_key(job)
    policy, task, factor, level, episode = job
    return str(policy), str(task), str(factor), int(level), int(episode)


def _integrity_problems(table: Mapping[str, Any]) -> list[str]:
    problems = []
    if table["missing"]:
        problems.append(f"{table['missing']} expected job(s) have no record: resume the run")
    if table["errors"]:
        problems.append(f"{table['errors']} job(s) ended with an error and are left out of the statistics")
    for row in table["by_factor"]:
        if row["hash_mismatch"] and row["modifies_state"] is False:
            problems.append(f"{row['policy']}/{row['factor']}: {row['hash_mismatch']} fingerprint mismatch(es) for "
                            "an observation-only factor: the shift leaked into the simulator state or the "
                            "episodes are not paired")
        elif row["hash_mismatch"]:
            problems.append(f"{row['policy']}/{row['factor']}: {row['hash_mismatch']} fingerprint mismatch(es): "
                            "the state before the shift differs from the clean run's")
        if row["seed_mismatch"]:
            problems.append(f"{row['policy']}/{row['factor']}: {row['seed_mismatch']} seed mismatch(es) "
                            "between paired runs")
    return problems


# ------------------------------------------------------------------------------------------------ JSON

def _versions() -> dict[str, str]:
    from importlib import metadata

    versions = {"python": sys.version.split()[0], "numpy": np.__version__}
    try:
        versions["r2a"] = metadata.version("r2a")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        versions["r2a"] = "unknown"
    return versions


# ---------------------------------------------------------------------------------------------- writing

def write_report(out_dir: Path, summary: Mapping[str, Any]) -> list[Path]:
    """Write ``summary.json`` (atomically), ``report.md`` and the PNG figures into ``out_dir``; return the paths.

    Figures: ΔSR per factor/level with CIs, the task × condition SR heatmap, the failure-depth plot and, with
    two or more policies, the uplift plot. Needs matplotlib (drawn with the Agg canvas, no display).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [write_json_atomic(out_dir / "summary.json", summary)]
    figures, omitted = _write_figures(out_dir, summary)
    paths.append(write_text_atomic(out_dir / "report.md",
                                   render_markdown(summary, [p.name for p in figures], omitted)))
    return paths + figures


def render_markdown(summary: Mapping[str, Any], figures: Sequence[str] = (),
                    omitted: Mapping[str, str] | None = None) -> str:
    """The Markdown report: integrity, per-condition, aggregate, uplift and stage-diagnostics tables, the
    figures (and why any was left out), failure frames, errors and provenance."""
    s = summary["settings"]
    parts = [
        "# Shift benchmark report", "",
        f"Schema `{summary['schema']}` v{summary['schema_version']}; {s['n_resamples']} bootstrap resamples, "
        f"seed {s['seed']}, 95 % intervals (Wilson for SR, paired percentile bootstrap for ΔSR and uplift); "
        f"clean-competence threshold {s['competence_threshold']}"
        + (f" on `{s['base_policy']}`'s clean SR." if s.get("base_policy") else " on each policy's clean SR."), "",
        *_integrity_md(summary["integrity"]),
        *_headline_md(summary.get("headline") or []),
        "## Clean runs", "", _table(["policy", "task", "n", "SR [95% CI]", "score", "competent"],
                                    [[r["policy"], r["task"], r["n"], _sr_ci(r["sr"], r["sr_ci"]),
                                      _num(r["normalized_score"]), "yes" if r["competent"] else "no"]
                                     for r in summary["clean"]]), "",
        "## Per condition", "", "ΔSR = SR_clean − SR_shift on paired episodes; transitions clean→shifted.", "",
        _table(["policy", "task", "factor", "L", "n", "SR [95% CI]", "clean SR", "ΔSR [95% CI]",
                "S→S", "S→F", "F→S", "F→F", "McNemar p", "score"],
               [[r["policy"], r["task"], r["factor"], r["level"], r["n"], _sr_ci(r["sr"], r["sr_ci"]),
                 _num(r["clean_sr"]), _sr_ci(r["delta_sr"], r["delta_sr_ci"]), *r["transitions"].values(),
                 _num(r["mcnemar_p"]), _num(r["normalized_score"])] for r in summary["conditions"]]), "",
        "## Per factor and level (macro over competent tasks)", "",
        _table(["policy", "factor", "L", "tasks", "screened out", "pairs", "clean SR", "SR", "ΔSR [95% CI]",
                "S→F", "F→S", "McNemar p"],
               [[r["policy"], r["factor"], r["level"], len(r["tasks"]), ", ".join(r["screened_out"]) or "–",
                 r["n_pairs"], _num(r["clean_sr"]), _num(r["sr"]), _sr_ci(r["delta_sr"], r["delta_sr_ci"]),
                 r["transitions"]["S->F"], r["transitions"]["F->S"], _num(r["mcnemar_p"])]
                for r in summary["aggregates"]]), "",
        *_uplift_md(summary["uplift"], summary["settings"].get("base_policy")),
        *_paired_md(summary["uplift"], summary.get("headline") or []),
        *_wrapper_md(summary.get("wrapper") or []),
        *_harmonize_md(summary.get("harmonize") or []),
        *_stages_md(summary["conditions"]),
        *_trajectory_md(summary["conditions"]),
        *_figures_md(figures, omitted or {}),
        *_frames_md(summary.get("failure_frames") or []),
        *_errors_md(summary.get("errors") or []),
        *_provenance_md(summary.get("provenance")),
    ]
    return "\n".join(parts)


def _figures_md(figures: Sequence[str], omitted: Mapping[str, str]) -> list[str]:
    if not figures and not omitted:
        return []
    lines = ["## Figures", ""] + [f"![{name}]({name})" for name in figures] + [""]
    lines += [f"- `{name}` is left out: {why}." for name, why in omitted.items()]
    return lines + ([""] if omitted else [])


def _frames_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each failed episode's frame strip beside its clean twin's (``--save-frames failures``)."""
    if not rows:
        return []
    def link(path: str | None, alt: str) -> str:
        return f"![{alt}]({quote(path)})" if path else "–"

    body = [[r["policy"], r["task"], r["factor"], r["level"], r["episode"],
             link(r["frames"], "failed") + (f" (error: {_cell(r['error'])})" if r.get("error") else ""),
             link(r.get("clean_frames"), "clean twin") if r["factor"] != CLEAN else "(the clean run)",
             "–" if r.get("clean_success") is None else ("success" if r["clean_success"] else "failure")]
            for r in rows]
    steps = next((r["frame_steps"] for r in rows if r.get("frame_steps")), None)
    return ["## Failure frames", "",
            "What the policy saw (agentview, shift applied) at evenly spaced steps of each failed episode, left "
            "to right" + (f" (e.g. steps {', '.join(map(str, steps))})" if steps else "")
            + ", beside the same episode without the shift.", "",
            _table(["policy", "task", "factor", "L", "ep", "failed episode", "clean twin", "clean outcome"], body),
            ""]


def _errors_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    if not rows:
        return []
    shown = rows[:MAX_ERRORS_LISTED]
    more = ["", f"… and {len(rows) - len(shown)} more (summary.json, `errors`)."] if len(rows) > len(shown) else []
    return ["## Errors", "", f"{len(rows)} job(s) ended with an error (left out of every statistic; their tracebacks "
            "are in the `traceback` field of their records in results.jsonl; a rerun retries them).", "",
            _table(["policy", "task", "factor", "L", "ep", "error"],
                   [[r["policy"], r["task"], r["factor"], r["level"], r["episode"], _cell(r["error"])]
                    for r in shown]), *more, ""]


def _provenance_md(provenance: Mapping[str, Any] | None) -> list[str]:
    if not provenance:
        return []
    if provenance.get("merged_from"):
        lines = ["## Provenance", "", f"Merged by `{provenance.get('command')}` from runs made separately:", ""]
        for source in provenance["merged_from"]:
            body = _provenance_md(source.get("provenance"))[2:] or ["- no provenance recorded", ""]
            lines += [f"### `{source['dir']}` ({', '.join(source['policies'])})", "", *body]
        return lines
    git, versions = provenance.get("git") or {}, provenance.get("versions") or {}
    machine = provenance.get("machine") or {}
    dirty = " (uncommitted changes)" if git.get("dirty") else ""
    lines = ["## Provenance", "",
             f"- commit: {git.get('commit') or 'unknown (not a git checkout)'}{dirty}",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v is not None),
             f"- machine: {machine.get('cpu')}, {machine.get('cores')} cores, GPU {machine.get('gpu') or 'none'}",
             f"- command: `{provenance.get('command')}`"]
    if provenance.get("shift_levels"):
        lines.append(f"- shift levels `{provenance['shift_levels'].get('path')}` (sha256 "
                     f"{str(provenance['shift_levels'].get('sha256'))[:16]}…)")
    for spec, roles in (provenance.get("artifacts") or {}).items():
        lines += [f"- `{spec}` loaded {role} `{e.get('path')}` (sha256 {str(e.get('sha256'))[:16]}…)"
                  for role, e in roles.items()]
    resumes = provenance.get("resumes") or []
    if resumes:
        lines.append(f"- resumed {len(resumes)} time(s); run.json records each resume's commit, versions and machine")
    return lines + [""]


def _cell(text: Any) -> str:
    """One line of text, safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")[:200]


def _integrity_md(t: Mapping[str, Any]) -> list[str]:
    lines = ["## Integrity", "",
             _table(["expected", "records", "superseded", "jobs", "valid", "errors", "missing", "hash mismatch",
                     "hash unchecked", "seed mismatch", "unpaired"],
                    [[_num(t["expected_jobs"]), t["records"], t["superseded"], t["jobs"], t["valid"], t["errors"],
                      _num(t["missing"]), t["hash_mismatch"], t["hash_unchecked"], t["seed_mismatch"],
                      t["unpaired"]]]), "",
             _table(["policy", "factor", "modifies state", "jobs", "valid", "errors", "hash mismatch",
                     "seed mismatch", "unpaired"],
                    [[r["policy"], r["factor"], _num(r["modifies_state"]), r["jobs"], r["valid"], r["errors"],
                      r["hash_mismatch"], r["seed_mismatch"], r["unpaired"]] for r in t["by_factor"]]), ""]
    lines += [f"- **{p}**" for p in t["problems"]] or ["No integrity problems."]
    return lines + [""]


def _uplift_md(rows: Sequence[Mapping[str, Any]], base_policy: str | None = None) -> list[str]:
    """Each policy pair once: the base policy as baseline when configured, else the first in sorted order
    (summary.json keeps both orders)."""
    rows = [r for r in rows if _is_shown_pair(r, base_policy, {p for row in rows for p in (row["baseline"],
                                                                                      row["candidate"])})]
    if not rows:
        return []
    return ["## Uplift (SR(candidate) − SR(baseline) on the same jobs)", "",
            "Per factor and level (strata: tasks); L `all` on a factor: pooled over its levels (strata: task × "
            "level); factor `all`: every shifted job (strata: task × factor × level); `clean`: the clean jobs. "
            "SR: the macro average over the strata with the Wilson 95% CI of the pooled pairs; uplift: the paired "
            "stratified bootstrap CI; McNemar: exact, on the S→F / F→S pairs.", "",
            _table(["baseline", "candidate", "factor", "L", "pairs", "baseline SR [95% CI]", "candidate SR [95% CI]",
                    "uplift [95% CI]", "S→F", "F→S", "McNemar p"],
                   [[r["baseline"], r["candidate"], r["factor"], _num(r["level"]) if r["level"] is not None else "all",
                     r["n_pairs"], _sr_ci(r["baseline_sr"], r["baseline_sr_ci"]),
                     _sr_ci(r["candidate_sr"], r["candidate_sr_ci"]),
                     _sr_ci(r["uplift"], r["uplift_ci"]), r["transitions"]["S->F"], r["transitions"]["F->S"],
                     _num(r["mcnemar_p"])] for r in rows]), ""]


def _headline_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Does the candidate help? One line per pair, with the goal's three checks."""
    if not rows:
        return []
    def mark(ok: bool | None) -> str:
        return "n/a" if ok is None else "yes" if ok else "no"

    body = [[r["baseline"], r["candidate"], r["n_conditions"], _num(r["mean_uplift"]),
             _sr_ci(r["pooled_uplift"], r["pooled_ci"]), r["n_pairs"],
             ", ".join(r["factors_ci_above_zero"]) or "–", ", ".join(r["factors_ci_below_zero"]) or "–",
             f"{_num(r['clean']['baseline_sr'])} → {_num(r['clean']['candidate_sr'])}",
             _sr_ci(r["clean"]["uplift"], r["clean"]["ci"]),
             " / ".join(mark(r["goal"][k]) for k in ("mean_uplift", "factors_ci_above_zero", "clean_not_lower"))]
            for r in rows]
    return ["## Headline", "", "Uplift = SR(candidate) − SR(baseline) on the same episodes. Mean uplift: over the "
            "perturbed conditions (factor × level, each macro-averaged over tasks); pooled: the macro average over "
            "task × factor × level cells with its paired bootstrap CI (the two agree when every condition has the "
            "same tasks); factors whose CI, pooled over their levels, lies above / below zero. Goal (issue 24): "
            "mean uplift ≥ +0.15, CI above zero on ≥ 4 factors, clean SR not lower by more than 0.01 (a cell reads "
            "n/a where no paired episodes judge it).", "",
            _table(["baseline", "candidate", "conditions", "mean uplift", "pooled uplift [95% CI]", "pairs",
                    "CI > 0", "CI < 0", "clean SR", "clean uplift [95% CI]", "goal met (mean / factors / clean)"],
                   body), ""]


def _paired_md(rows: Sequence[Mapping[str, Any]], headlines: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per factor (pooled over levels) for each headline pair: which stage the candidate fixes and breaks,
    whether failures move later, and trajectory quality on the pairs that succeed in both."""
    shown = {(h["baseline"], h["candidate"]) for h in headlines}
    rows = [r for r in rows if (r["baseline"], r["candidate"]) in shown and r["level"] is None
            and r["factor"] != "all"]
    if not rows:
        return []
    def hist(h: Mapping[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in h.items() if v) or "–"

    def traj(r: Mapping[str, Any], metric: str) -> str:
        t = r["trajectory_both_success"]
        return f"{_num(t['baseline'].get(metric))} → {_num(t['candidate'].get(metric))}" if t["n"] else "–"

    body = [[r["baseline"], r["candidate"], r["factor"], r["transitions"]["F->S"], hist(r["fixed_at"]),
             r["transitions"]["S->F"], hist(r["broken_at"]), r["both_failed"]["n"],
             f"{_num(r['both_failed']['baseline_progress'])} → {_num(r['both_failed']['candidate_progress'])}",
             f"{r['both_failed']['later']} / {r['both_failed']['earlier']}", r["trajectory_both_success"]["n"],
             traj(r, "integrated_squared_jerk"), traj(r, "sparc"), traj(r, "time_to_success")] for r in rows]
    return ["## Paired diagnostics per factor (baseline → candidate, pooled over levels)", "",
            "F→S: the baseline's first incomplete stage on the pairs the candidate fixes; S→F: the candidate's on "
            "the pairs it breaks; both failed: mean progress and how often the candidate got further / less far; "
            "trajectory metrics on the pairs that succeed in both (jerk: integrated squared jerk, lower is "
            "smoother; SPARC: closer to 0 is smoother; time to success in s).", "",
            _table(["baseline", "candidate", "factor", "F→S", "fixed at", "S→F", "broken at", "both failed",
                    "progress", "further / less far", "both succeed", "jerk", "SPARC", "time to success"], body), ""]


def _wrapper_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the R2A wrapper did per condition (only for runs that include a wrapped policy)."""
    if not rows:
        return []
    def gate(r: Mapping[str, Any]) -> str:
        g = r.get("mean_gate")
        return "–" if not g else f"{np.mean(g[0:3]):.3f} / {np.mean(g[3:6]):.3f}"

    return ["## R2A wrapper", "", "Share of chunks that fell back to the base policy (and why), the mean gate on "
            "translation / rotation over the chunks that blended, the mean key distance of the nearest graph node, "
            "and the episodes that began with a start-pose recovery.", "",
            _table(["policy", "factor", "L", "episodes", "chunks", "fallback share", "fallback reasons",
                    "mean S (trans / rot)", "seed distance", "recovered"],
                   [[r["policy"], r["factor"], r["level"], r["episodes"], r["queries"], _num(r["fallback_share"]),
                     ", ".join(f"{k} {v}" for k, v in sorted(r["fallbacks"].items())) or "–", gate(r),
                     _num(r["mean_seed_distance"]), r["recovered_episodes"]] for r in rows]), ""]


def _harmonize_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """How often harmonization acted per condition (only for runs that include a harmonized policy)."""
    if not rows:
        return []
    return ["## Observation harmonization", "", "Share of the base policy's queries whose camera images were "
            "harmonized (any camera, then per camera).", "",
            _table(["policy", "factor", "L", "episodes", "queries", "harmonized", "per camera"],
                   [[r["policy"], r["factor"], r["level"], r["episodes"], r["queries"], _num(r["active_share"]),
                     ", ".join(f"{c} {_num(v)}" for c, v in r["camera_share"].items()) or "–"] for r in rows]), ""]


def _stages_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    def hist(h: Mapping[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in h.items() if v) or "–"

    body = [[r["policy"], r["task"], r["factor"], r["level"], st["n"], _num(st["mean_progress"]),
             _num(st["share_before_first_stage"]), hist(st["first_incomplete"]), hist(st["deepest_reached"])]
            for r in rows if (st := r["s_to_f_stages"])["n"]]
    return ["## Stage diagnostics of the S→F cohorts", "",
            _table(["policy", "task", "factor", "L", "S→F", "mean progress", "share before 1st stage",
                    "first incomplete stage", "deepest stage reached"], body) if body else "No S→F episodes.", ""]


def _trajectory_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    names = ("path_length", "mean_speed", "sparc", "gripper_toggles", "time_to_success")
    body = [[r["policy"], r["task"], r["factor"], r["level"], tr["n"],
             *(f"{_num(tr['clean'].get(m))} → {_num(tr['shifted'].get(m))}" for m in names)]
            for r in rows if (tr := r["trajectory_both_success"])["n"]]
    if not body:
        return []
    return ["## Trajectory quality on pairs that succeed in both runs (clean → shifted)", "",
            _table(["policy", "task", "factor", "L", "pairs", *names], body), ""]


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _sr_ci(value: Any, ci: Sequence[Any]) -> str:
    return f"{_num(value)} [{_num(ci[0])}, {_num(ci[1])}]"


# ---------------------------------------------------------------------------------------------- figures

FIGURES = ("delta_sr.png", "sr_heatmap.png", "failure_depth.png", "uplift.png", "uplift_by_factor.png")


def _write_figures(out_dir: Path, summary: Mapping[str, Any]) -> tuple[list[Path], dict[str, str]]:
    """Draw every figure that has something to show; return the written paths and, for each figure left
    out, why. A stale figure of an earlier report of the same directory is removed with it."""
    try:
        from matplotlib.figure import Figure  # noqa: F401  (imported here: heavy, needed only for figures)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise R2AInputError("the benchmark report's figures need matplotlib: pip install matplotlib") from exc
    plots = dict(zip(FIGURES, (_plot_delta_sr, _plot_heatmap, _plot_failure_depth, _plot_uplift,
                                 _plot_uplift_by_factor)))
    paths, omitted = [], {}
    for name, plot in plots.items():
        fig = plot(summary)
        if isinstance(fig, str):
            log.info("figure %s left out: %s", name, fig)
            omitted[name] = fig
            (out_dir / name).unlink(missing_ok=True)
            continue
        with atomic_path(out_dir / name) as tmp:
            fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
        paths.append(out_dir / name)
    return paths, omitted


def _new_figure(n_panels: int, width: float = 6.0, height: float = 3.5) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * n_panels), layout="constrained")
    return fig, [fig.add_subplot(n_panels, 1, i + 1) for i in range(n_panels)]


def _nothing_to_show(rows: Sequence[Mapping[str, Any]], value: str, ci: str) -> str | None:
    """Why bars of ``value`` would show nothing — no row has a value, or every value and interval bound is
    exactly 0 (invisible bars on an axis of ±0.04) — or None when they show something."""
    values = [v for r in rows for v in (r[value], *r[ci]) if v is not None]
    if not values:
        return "no value to draw"
    if all(v == 0 for v in values):
        return "every value is 0 with a zero-width interval"
    return None


def _grouped_bars(ax: Any, rows: Sequence[Mapping[str, Any]], value: str, ci: str, ylabel: str) -> None:
    """Bars per factor, one per level, with CI error bars (missing values are left out); the axis spans at
    least ±0.1, so that a small effect is not drawn as a large one."""
    factors = sorted({r["factor"] for r in rows})
    levels = sorted({r["level"] for r in rows})
    width = 0.8 / max(1, len(levels))
    for j, level in enumerate(levels):
        xs, ys, err = [], [], [[], []]
        for i, factor in enumerate(factors):
            row = next((r for r in rows if r["factor"] == factor and r["level"] == level), None)
            if row is None or row[value] is None or None in row[ci]:
                continue
            xs.append(i + (j - (len(levels) - 1) / 2) * width)
            ys.append(row[value])
            err[0].append(max(0.0, row[value] - row[ci][0]))
            err[1].append(max(0.0, row[ci][1] - row[value]))
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=f"L{level}")
    ax.axhline(0.0, color="black", linewidth=0.8)
    bounds = [abs(v) for r in rows for v in (r[value], *r[ci]) if v is not None]
    half = min(1.05, max([0.1, *bounds]) * 1.1)
    ax.set_ylim(-half, half)
    ax.set_xticks(range(len(factors)), factors)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")


def _plot_delta_sr(summary: Mapping[str, Any]) -> Any:
    rows = summary["aggregates"]
    if not rows:
        return "no shifted condition was run"
    why = _nothing_to_show(rows, "delta_sr", "delta_sr_ci")
    if why == "no value to draw":
        return "no task passed clean-competence screening, so no condition has a ΔSR (see the clean runs)"
    if why:
        return "ΔSR is 0 with a zero-width interval in every condition: no paired episode changed outcome"
    policies = sorted({r["policy"] for r in rows})
    fig, axes = _new_figure(len(policies))
    for ax, policy in zip(axes, policies):
        _grouped_bars(ax, [r for r in rows if r["policy"] == policy], "delta_sr", "delta_sr_ci", "ΔSR")
        ax.set_title(f"{policy}: ΔSR = SR_clean − SR_shift (95 % paired bootstrap CI)", fontsize="medium")
    return fig


def _plot_heatmap(summary: Mapping[str, Any]) -> Any:
    policies, tasks = summary["policies"], summary["tasks"]
    conditions = [(CLEAN, 0)] + sorted({(r["factor"], r["level"]) for r in summary["conditions"]})
    if not tasks or not policies:
        return "no valid episode"
    fig, axes = _new_figure(len(policies), width=max(5.0, 1.0 + 0.8 * len(conditions)),
                            height=max(2.0, 0.9 + 0.45 * len(tasks)))
    for ax, policy in zip(axes, policies):
        grid = np.full((len(tasks), len(conditions)), np.nan)
        for r in summary["clean"] + summary["conditions"]:
            if r["policy"] == policy and r["sr"] is not None:
                cond = (r.get("factor", CLEAN), r.get("level", 0))
                grid[tasks.index(r["task"]), conditions.index(cond)] = r["sr"]
        image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize="small",
                        color="white" if v < 0.5 else "black")
        ax.set_xticks(range(len(conditions)), [CLEAN if f == CLEAN else f"{f} L{lvl}" for f, lvl in conditions],
                      rotation=45, ha="right")
        ax.set_yticks(range(len(tasks)), tasks)
        ax.set_title(f"{policy}: success rate", fontsize="medium")
        fig.colorbar(image, ax=ax, fraction=0.03)
    return fig


#: the legend's words for a failure that latched every stage but did not hold success at the end
ALL_REACHED_LABEL = "every stage reached once, not held at the end"


def _plot_failure_depth(summary: Mapping[str, Any]) -> Any:
    """Stacked share of failures by first incomplete stage, per factor (levels and tasks pooled); only the
    policies and stages that have failures are drawn."""
    rows = [{**r, "factor": CLEAN} for r in summary["clean"]] + list(summary["conditions"])
    histograms = [{k: v for k, v in r["failure_stages"]["first_incomplete"].items() if v} for r in rows]
    stages = _stage_order(histograms)
    if not stages:
        return "no episode failed"
    failed = {r["policy"] for r, h in zip(rows, histograms) if h}
    policies = [p for p in summary["policies"] if p in failed]
    fig, axes = _new_figure(len(policies))
    for ax, policy in zip(axes, policies):
        factors = [CLEAN] + sorted({r["factor"] for r in rows if r["policy"] == policy and r["factor"] != CLEAN})
        counts = np.zeros((len(factors), len(stages)))
        for r in rows:
            if r["policy"] == policy:
                for stage, k in r["failure_stages"]["first_incomplete"].items():
                    if k:
                        counts[factors.index(r["factor"]), stages.index(stage)] += k
        totals = counts.sum(axis=1, keepdims=True)
        shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
        bottom = np.zeros(len(factors))
        for k, stage in enumerate(stages):
            ax.bar(range(len(factors)), shares[:, k], bottom=bottom,
                   label=ALL_REACHED_LABEL if stage == ALL_STAGES_REACHED else f"stopped before '{stage}'")
            bottom += shares[:, k]
        ax.set_xticks(range(len(factors)), [f"{f}\n(n={int(t)})" for f, t in zip(factors, totals[:, 0])])
        ax.set_ylabel("share of failures")
        ax.set_title(f"{policy}: first incomplete stage of failed episodes", fontsize="medium")
        ax.legend(fontsize="small", bbox_to_anchor=(1.01, 1.0), loc="upper left")
    return fig


def _stage_order(histograms: Iterable[Mapping[str, int]]) -> list[str]:
    """Union of stage names in first-seen order, with "all_reached" last when it occurs."""
    order: list[str] = []
    for hist in histograms:
        order += [k for k in hist if k not in order]
    return [k for k in order if k != ALL_STAGES_REACHED] + [k for k in order if k == ALL_STAGES_REACHED]


def _shown_pairs(policies: Sequence[str], base_policy: str | None) -> list[tuple[str, str]]:
    """The (baseline, candidate) pairs the report shows: the base policy against each other policy when it is
    configured and present, else each unordered pair once in sorted order."""
    if base_policy in policies:
        return [(base_policy, p) for p in policies if p != base_policy]
    return [(a, b) for i, a in enumerate(policies) for b in policies[i + 1:]]


def _is_shown_pair(row: Mapping[str, Any], base_policy: str | None, policies: set[str]) -> bool:
    """Whether an ordered uplift row is the one shown for its unordered pair: the base policy as baseline when
    it is one of the two, else the pair in sorted order."""
    pair = {row["baseline"], row["candidate"]}
    if base_policy in pair and base_policy in policies:
        return row["baseline"] == base_policy
    return row["baseline"] < row["candidate"]


def _plot_uplift(summary: Mapping[str, Any]) -> Any:
    """Uplift per factor/level for each unordered policy pair (the base policy as baseline when configured)."""
    if len(summary["policies"]) < 2:
        return "one policy only: there is no pair to compare"
    base = summary["settings"].get("base_policy")
    rows = [r for r in summary["uplift"] if r["level"] is not None and r["factor"] != CLEAN
            and _is_shown_pair(r, base, set(summary["policies"]))]
    pairs = sorted({(r["baseline"], r["candidate"]) for r in rows})
    if not pairs:
        return "the policies share no valid shifted episode"
    if _nothing_to_show(rows, "uplift", "uplift_ci"):
        return "the uplift is 0 with a zero-width interval everywhere: the policies agree on every shifted episode"
    fig, axes = _new_figure(len(pairs))
    for ax, (baseline, candidate) in zip(axes, pairs):
        _grouped_bars(ax, [r for r in rows if (r["baseline"], r["candidate"]) == (baseline, candidate)],
                      "uplift", "uplift_ci", "uplift")
        ax.set_title(f"SR({candidate}) − SR({baseline}) (95 % paired bootstrap CI)", fontsize="medium")
    return fig


def _plot_uplift_by_factor(summary: Mapping[str, Any]) -> Any:
    """Each headline pair's uplift per factor (pooled over levels, 95 % CI) beside the R2A page's per-category
    deltas for GR00T N1.7 on LIBERO-Plus — labelled as another policy and benchmark."""
    headlines = [h for h in summary.get("headline") or []
                 if any(f["uplift"] is not None for f in h["factors"].values())]
    if not headlines:
        return "no pair of policies shares a perturbed episode"
    fig, axes = _new_figure(len(headlines), width=7.0)
    for ax, h in zip(axes, headlines):
        factors = list(h["factors"])
        xs = np.arange(len(factors))
        ours = np.array([_or_nan(h["factors"][f]["uplift"]) for f in factors])
        lo = np.array([_or_nan(h["factors"][f]["ci"][0]) for f in factors])
        hi = np.array([_or_nan(h["factors"][f]["ci"][1]) for f in factors])
        err = np.nan_to_num(np.stack([np.maximum(0.0, ours - lo), np.maximum(0.0, hi - ours)]))
        ax.bar((xs - 0.2).tolist(), ours.tolist(), 0.4, yerr=err.tolist(), capsize=3,
               label=f"{h['candidate']} vs {h['baseline']} (this run)")
        ref = np.array([REFERENCE_UPLIFT.get(f, math.nan) / 100 for f in factors])
        ax.bar((xs + 0.2).tolist(), ref.tolist(), 0.4, color="lightgray", edgecolor="gray", hatch="//", label=REFERENCE_LABEL)
        ax.axhline(0.0, color="black", linewidth=0.8)
        values = np.abs(np.concatenate([ours, lo, hi, ref]))
        half = min(1.05, max(0.1, float(np.nanmax(values)) if np.isfinite(values).any() else 0.1) * 1.15)
        ax.set_ylim(-half, half)
        ax.set_xticks(xs, factors)
        ax.set_ylabel("uplift in SR (0.1 = 10 points)")
        ax.set_title(f"SR({h['candidate']}) − SR({h['baseline']}) per factor, pooled over levels", fontsize="medium")
        ax.legend(fontsize="x-small")
    return fig


def _or_nan(x: Any) -> float:
    return math.nan if x is None else float(x)
