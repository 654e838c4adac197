"""The benchmark runner: every (policy, task, factor, level, episode) job in parallel, resumable.

Before the first episode every policy is built once (eval/preflight.py): a policy that cannot be built or
reached, or a missing optional package, fails in seconds and writes nothing. Each finished episode is appended
to ``DIR/results.jsonl`` at once (flushed and fsync'ed), after the files it brought back (trajectory, frames),
so a ``kill -9`` loses at most the episodes in flight; a rerun skips every job already recorded — except jobs
that ended with an error, which it runs again (``retry_errors``). ``DIR/run.json`` pins the config and policies
and records the provenance (r2a_core/provenance.py: commit, versions, machine, command line, the sha256 of
what each policy loaded): resuming with a different config, policy list or policy files is refused, since the
results would not be comparable; a resume on another commit or machine is logged and recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from tqdm import tqdm

from eval.bench_config import BenchConfig
from eval.episode_job import SAVE_FRAMES, Job, JobOptions, JobResult, run_job
from eval.schema import RESULTS, RESULTS_GZ, RUN_FILE, SUMMARY, results_file
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_write, to_json_safe, write_json_atomic
from r2a_core.provenance import artifact_digests, collect_provenance, provenance_differences

log = logging.getLogger(__name__)

EXECUTORS = ("local", "ray")
#: spec → role → {"path", "sha256"}: what each policy loaded when the run was checked
Artifacts = Mapping[str, Mapping[str, Mapping[str, str]]]


def plan_jobs(config: BenchConfig, policies: list[str]) -> list[Job]:
    """All jobs, grouped by task and episode so a worker reuses its simulator and pairs finish together."""
    return sorted(Job(task, ep, factor, level, policy)
                  for task, ep, factor, level in config.planned() for policy in policies)


def run_benchmark(config: BenchConfig, policies: list[str], out_dir: str | Path, workers: int = 1,
                  executor: str = "local", progress: bool = True, *, retry_errors: bool = True,
                  save_frames: str = "none", ray_address: str | None = None) -> dict[str, Any]:
    """Run (or resume) the benchmark into ``out_dir`` and write its report; returns the summary.

    ``retry_errors`` runs jobs whose last record has an error again; ``save_frames="failures"`` brings back a
    frame strip of every failed episode and of every clean run (eval/frames.py); ``ray_address`` (or
    ``RAY_ADDRESS``) joins an existing Ray cluster with ``executor="ray"``.
    """
    from eval.preflight import build_policies
    from eval.report import build_summary, write_report

    out_dir = Path(out_dir)
    _check_args(policies, workers, executor, save_frames, ray_address)
    if (out_dir / RESULTS_GZ).exists():  # a run appends to results.jsonl: beside published records, both would count
        raise R2AInputError(f"{out_dir}: a published results directory ({RESULTS_GZ}, 'r2a bench publish'), which a "
                            "run never resumes; run into a new --out directory (or resume the run it was published "
                            "from)")
    with _executor(executor, workers, ray_address) as execute:  # first: an unreachable cluster fails in seconds
        artifacts = build_policies(policies, config)
        provenance = {**collect_provenance(), "artifacts": artifacts, "shift_levels": shift_levels_artifact()}
        resuming = _pin_run(out_dir, config, policies, provenance)
        jobs = plan_jobs(config, policies)
        done = _finished_keys(out_dir / RESULTS, retry_errors)
        pending = [job for job in jobs if job.key not in done]
        log.info("%d jobs planned, %d already recorded, %d to run", len(jobs), len(jobs) - len(pending),
                 len(pending))
        if pending:
            if resuming:
                _record_resume(out_dir / RUN_FILE, provenance, len(pending))
            options = {spec: JobOptions(artifacts=artifact_digests(artifacts[spec]),
                                        save_frames=save_frames) for spec in policies}
            _execute(pending, config, out_dir, execute, options, artifacts, progress)
    return write_summary(out_dir, config, jobs, build_summary, write_report)


def write_summary(out_dir: Path, config: BenchConfig, jobs: list[Job], build_summary: Callable,
                  write_report: Callable) -> dict[str, Any]:
    summary = summarize_records(out_dir, config, jobs, build_summary)
    write_report(out_dir, summary)
    return summary


def summarize_records(out_dir: Path, config: BenchConfig, jobs: list[Job], build_summary: Callable,
                      records: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The summary of ``out_dir``'s records (read from its results file unless given) and ``run.json``'s provenance,
    with ``built_from``: the records' count and digest (:func:`records_digest`), by which a reader tells a summary
    that no longer describes its records (:func:`summary_staleness`)."""
    from eval.report import load_records

    records = load_records(results_file(out_dir)) if records is None else records
    run_file = out_dir / RUN_FILE
    provenance = json.loads(run_file.read_text()).get("provenance") if run_file.is_file() else None
    summary = build_summary(records, n_resamples=config.n_resamples, seed=config.seed,
                            competence_threshold=config.competence_threshold,
                            config={**config.to_dict(), "expected_jobs": [list(j.key) for j in jobs]},
                            provenance=provenance)
    summary["built_from"] = records_digest(records)
    return summary


def records_digest(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"records": N, "sha256": HEX}`` of episode records as :func:`eval.report.load_records` returns them (the last
    of each job): each record as canonical JSON, in job order, so the digest depends on what the records say, not
    on the order or the form (compressed or not) the file holds them in."""
    from eval.report import job_key

    ordered = sorted(records, key=job_key)
    digest = hashlib.sha256()
    for rec in ordered:
        digest.update(json.dumps(rec, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    return {"records": len(ordered), "sha256": digest.hexdigest()}


def summary_staleness(out_dir: str | Path, records: Sequence[Mapping[str, Any]],
                      summary: Mapping[str, Any]) -> str | None:
    """Why ``DIR/summary.json`` (read as ``summary``) does not describe ``records`` (the directory's, as
    :func:`eval.report.load_records` returns them), or None when it does.

    A summary that says what it was built from (``built_from``) is compared by digest; an older one by its count of
    jobs, then by whether the records file changed after the summary was written.
    """
    out_dir = Path(out_dir)
    results = results_file(out_dir)
    built = summary.get("built_from")
    if isinstance(built, Mapping) and built.get("sha256"):
        now = records_digest(records)
        if built["sha256"] == now["sha256"]:
            return None
        return (f"it was built from other records than {results.name} holds now ({built.get('records')} then, "
                f"{now['records']} now)")
    counted = (summary.get("integrity") or {}).get("jobs")
    if isinstance(counted, int) and counted != len(records):
        return f"it counts {counted} jobs, {results.name} holds {len(records)} now"
    with contextlib.suppress(OSError):
        if results.stat().st_mtime_ns > (out_dir / SUMMARY).stat().st_mtime_ns:
            return f"{results.name} changed after it was written"
    return None


def _pinned_plan(out_dir: Path) -> tuple[BenchConfig, list[Job]]:
    """The config ``DIR/run.json`` pins and its jobs (a one-line error when it or the records are missing)."""
    run_file = out_dir / RUN_FILE
    if not run_file.is_file() or not results_file(out_dir).is_file():
        raise R2AInputError(f"{out_dir}: expected {RUN_FILE} and {RESULTS} from 'r2a bench run'")
    pinned = json.loads(run_file.read_text())
    config = BenchConfig.from_dict(pinned["config"], where=str(run_file))
    return config, plan_jobs(config, pinned["policies"])


def report_from_dir(out_dir: str | Path) -> dict[str, Any]:
    """Rebuild summary.json, report.md and figures from ``DIR/results.jsonl`` and ``DIR/run.json``."""
    from eval.report import build_summary, write_report

    out_dir = Path(out_dir)
    config, jobs = _pinned_plan(out_dir)
    return write_summary(out_dir, config, jobs, build_summary, write_report)


def summary_from_dir(out_dir: str | Path, records: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The summary :func:`report_from_dir` would write, built in memory from ``records`` (default: the directory's);
    nothing is written."""
    from eval.report import build_summary

    out_dir = Path(out_dir)
    config, jobs = _pinned_plan(out_dir)
    return summarize_records(out_dir, config, jobs, build_summary, records)


def _check_args(policies: list[str], workers: int, executor: str, save_frames: str,
                ray_address: str | None) -> None:
    from eval.diagnostics import register_diagnostics
    from r2a.policies import parse_policy_spec

    if not policies:
        raise R2AInputError("give at least one --policy")
    register_diagnostics()  # the benchmark builds the measurement-only policies too
    for spec in policies:
        parse_policy_spec(spec)
    if workers < 1:
        raise R2AInputError(f"--workers must be ≥ 1, got {workers}")
    if executor not in EXECUTORS:
        raise R2AInputError(f"unknown executor '{executor}'; valid executors: {', '.join(EXECUTORS)}")
    if save_frames not in SAVE_FRAMES:
        raise R2AInputError(f"--save-frames {save_frames}: expected one of {', '.join(SAVE_FRAMES)}")
    if ray_address and executor != "ray":
        raise R2AInputError("--ray-address needs --executor ray")
    if executor == "ray":
        from eval.preflight import require_module

        require_module("ray")  # before the policies are built: the cheapest check first


@contextlib.contextmanager
def _executor(kind: str, workers: int, ray_address: str | None) -> Iterator[Callable[..., Iterator[JobResult]]]:
    """``execute(jobs, config, options, artifacts)`` for the chosen executor; Ray connects here, before any
    file is written, so an unreachable cluster fails like a bad argument."""
    if kind == "ray":
        from eval.ray_executor import RayExecutor

        with RayExecutor(workers, ray_address) as ray_executor:
            yield ray_executor.results
        return
    yield lambda jobs, config, options, artifacts: _local_results(jobs, config, options, workers)


def is_merged(run: Mapping[str, Any]) -> bool:
    """Whether a ``run.json`` was written by ``r2a bench merge`` (rewritten by a merge, never resumed by a run)."""
    return isinstance(run, Mapping) and bool((run.get("provenance") or {}).get("merged_from"))


def _pin_run(out_dir: Path, config: BenchConfig, policies: list[str], provenance: Mapping[str, Any]) -> bool:
    """Write run.json on the first run and return False; on a resume, refuse a different config, policy list or
    policy files, warn about another commit, simulator or machine, and return True."""
    pinned = {"config": config.to_dict(), "policies": sorted(policies)}
    path = out_dir / RUN_FILE
    if not path.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {**pinned, "provenance": provenance})
        return False
    previous = json.loads(path.read_text())
    if is_merged(previous):
        raise R2AInputError(f"{path}: {out_dir} was written by 'r2a bench merge'; run into a new --out directory and "
                            "merge again")
    try:  # fields added to the config since the run started take their defaults
        before = {"config": BenchConfig.from_dict(previous.get("config"), where=str(path)).to_dict(),
                  "policies": previous.get("policies")}
    except R2AInputError:
        before = previous
    if before != pinned:
        raise R2AInputError(f"{path}: {out_dir} holds results of a different config or policy list; "
                            f"use a new --out directory (or delete it) to start over")
    old = previous.get("provenance") or {}
    _check_same_artifacts(path, old.get("artifacts"), provenance["artifacts"])
    if not same_shift_levels(old, provenance):
        raise R2AInputError(f"{path}: the shift levels file changed since the run started "
                            f"({shift_levels_sha(old)[:12]} then, {shift_levels_sha(provenance)[:12]} now); the "
                            "results would mix two sets of levels — use a new --out directory")
    for difference in provenance_differences(old, provenance):
        log.warning("%s: resuming with another %s than the run started with", out_dir, difference)
    return True


def shift_levels_artifact() -> dict[str, str]:
    """Path and sha256 of the levels file every shifted episode of a run draws from (configs/bench/factors.yaml)."""
    from r2a_core.provenance import artifact
    from sim.shifts.config import DEFAULT_FACTORS_YAML

    return artifact(DEFAULT_FACTORS_YAML)


def shift_levels_sha(provenance: Mapping[str, Any] | None) -> str:
    return str(((provenance or {}).get("shift_levels") or {}).get("sha256") or "")


def same_shift_levels(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two runs drew their shifts from the same levels file (True when either predates the record)."""
    sha_a, sha_b = shift_levels_sha(a), shift_levels_sha(b)
    return not sha_a or not sha_b or sha_a == sha_b


def _check_same_artifacts(path: Path, before: Artifacts | None, now: Artifacts) -> None:
    """A resumed run's policies must load exactly the files they loaded when it started (a role gained or lost is
    another model too)."""
    for spec, roles in (before or {}).items():
        recorded, loaded = artifact_digests(roles), artifact_digests(now.get(spec))
        differ = sorted(r for r in recorded.keys() | loaded.keys() if recorded.get(r) != loaded.get(r))
        if differ:
            paths = {**(now.get(spec) or {}), **roles}
            shown = "; ".join(f"{role} ({(paths.get(role) or {}).get('path', '?')}): sha256 "
                              f"{(recorded.get(role) or 'none')[:12]} when the run started, "
                              f"{(loaded.get(role) or 'none')[:12]} now" for role in differ)
            raise R2AInputError(f"{path}: policy '{spec}' now loads other files ({shown}); the results would mix "
                                "two models — use a new --out directory")


def _record_resume(path: Path, provenance: Mapping[str, Any], pending: int) -> None:
    """Append this resume's provenance (without the artifacts, which must be the same) to run.json."""
    pinned = json.loads(path.read_text())
    entry = {k: v for k, v in provenance.items() if k != "artifacts"}
    entry.update(pending_jobs=pending, time=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    pinned.setdefault("provenance", {}).setdefault("resumes", []).append(entry)
    write_json_atomic(path, pinned)


def _finished_keys(path: Path, retry_errors: bool = True) -> set[tuple]:
    """Keys of recorded jobs — with ``retry_errors`` only those whose last record has no error; a torn last line
    (killed mid-write) is cut off so appends start clean."""
    from eval.report import job_key, load_records

    if not path.exists():
        return set()
    drop_torn_tail(path)
    records = load_records(path)
    errored = sum(rec.get("error") is not None for rec in records)
    if errored:
        log.info("%d recorded job(s) ended with an error: %s", errored,
                 "running them again" if retry_errors else "kept (--no-retry-errors)")
    return {job_key(rec) for rec in records if not retry_errors or rec.get("error") is None}


def drop_torn_tail(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data[: data.rfind(b"\n") + 1]
        log.warning("%s: dropping an incomplete last record (%d bytes) from an interrupted run", path,
                    len(data) - len(keep))
        with open(path, "r+b") as handle:
            handle.truncate(len(keep))


def _execute(jobs: list[Job], config: BenchConfig, out_dir: Path, execute: Callable[..., Iterator[JobResult]],
             options: Mapping[str, JobOptions], artifacts: Artifacts, progress: bool) -> None:
    start = time.perf_counter()
    with open(out_dir / RESULTS, "a", encoding="utf-8") as sink, \
            tqdm(total=len(jobs), desc=f"bench {config.name}", unit="ep", disable=not progress) as bar:
        for result in execute(jobs, config, options, artifacts):
            append_result(sink, out_dir, result)
            bar.update(1)
            bar.set_postfix(ep_s=f"{bar.n / (time.perf_counter() - start):.2f}")


def append_result(sink: Any, out_dir: Path, result: JobResult) -> None:
    """Write a job's files, then append its record to the open results file, flushed and fsync'ed (a kill loses
    at most the episodes in flight)."""
    _write_files(out_dir, result.files)  # before the record, which names them
    sink.write(json.dumps(to_json_safe(result.record)) + "\n")
    sink.flush()
    os.fsync(sink.fileno())


def _write_files(out_dir: Path, files: Mapping[str, bytes]) -> None:
    root = out_dir.resolve()
    for name, data in files.items():
        target = (root / name).resolve()
        if root not in target.parents:
            raise RuntimeError(f"a job returned a file outside the results directory: {name!r}")
        with atomic_write(target, "wb") as fh:
            fh.write(data)


def _call(args: tuple[Job, BenchConfig, JobOptions]) -> JobResult:
    return run_job(*args)


def _local_results(jobs: list[Job], config: BenchConfig, options: Mapping[str, JobOptions],
                   workers: int) -> Iterator[JobResult]:
    with local_pool(workers) as execute:
        yield from execute([(job, config, options[job.policy]) for job in jobs])


@contextlib.contextmanager
def local_pool(workers: int) -> Iterator[Callable[[list[tuple[Job, BenchConfig, JobOptions]]], Iterator[JobResult]]]:
    """``execute(tasks)`` running ``(job, config, options)`` tasks on ``workers`` local processes (spawned once,
    reused by every call, so each keeps its simulators), results in completion order; in-process for one."""
    if workers == 1:
        yield lambda tasks: map(_call, tasks)
        return
    with mp.get_context("spawn").Pool(workers) as pool:
        yield lambda tasks: pool.imap_unordered(_call, tasks)
