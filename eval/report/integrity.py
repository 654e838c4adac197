"""The integrity table of a summary: expected, valid, errored, missing and unpaired jobs, fingerprint and seed
mismatches per (policy, factor), and the problems they add up to (docs/architecture.md, "The shift benchmark")."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from eval.report.records import JobKey, Jobs, Record, job_key, modifies_state
from eval.schema import CLEAN

log = logging.getLogger(__name__)


def integrity_table(jobs: Jobs, n_records: int, replaced: int, config: Mapping[str, Any]) -> dict[str, Any]:
    """Expected vs valid jobs, errors, and broken pairings (fingerprint or seed mismatches)."""
    checks = [_pairing_check(jobs, rec) for rec in jobs.all]
    rows = []
    for policy, factor in sorted({(r["policy"], r["factor"]) for r in jobs.all}):
        idx = [i for i, r in enumerate(jobs.all) if (r["policy"], r["factor"]) == (policy, factor)]
        recs = [jobs.all[i] for i in idx]
        rows.append({"policy": policy, "factor": factor, "modifies_state": modifies_state(recs),
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


def _pairing_check(jobs: Jobs, rec: Record) -> dict[str, int]:
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


def _runs_of(jobs: Jobs, job: tuple[str, str, int, int]) -> list[dict[str, Any]]:
    """The records (valid or not) of one (task, factor, level, episode) job across policies, in policy order."""
    found = (jobs.any_by_job.get((policy, *job)) for policy in jobs.policies)
    return [r for r in found if r is not None]


def _expected(jobs: Jobs, config: Mapping[str, Any]) -> tuple[int | None, int | None, int | None]:
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


__all__ = ["integrity_table"]
