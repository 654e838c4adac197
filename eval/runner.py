"""The benchmark runner: every (policy, task, factor, level, episode) job in parallel, resumable.

Each finished episode is appended to ``DIR/results.jsonl`` at once (flushed and fsync'ed), so a ``kill -9``
loses at most the episodes in flight; a rerun skips every job already recorded. ``DIR/run.json`` pins the
config and policies: resuming with different ones is refused, since the results would not be comparable.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from tqdm import tqdm

from eval.bench_config import BenchConfig
from eval.episode_job import Job, run_job
from r2a_core.errors import R2AInputError
from r2a_core.files import to_json_safe, write_json_atomic

log = logging.getLogger(__name__)

RESULTS, RUN_FILE = "results.jsonl", "run.json"
EXECUTORS = ("local", "ray")


def plan_jobs(config: BenchConfig, policies: list[str]) -> list[Job]:
    """All jobs, grouped by task and episode so a worker reuses its simulator and pairs finish together."""
    return sorted(Job(task, ep, factor, level, policy)
                  for task in config.tasks for ep in range(config.episodes)
                  for factor, level in config.conditions() for policy in policies)


def run_benchmark(config: BenchConfig, policies: list[str], out_dir: str | Path, workers: int = 1,
                  executor: str = "local", progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the benchmark into ``out_dir`` and write its report; returns the summary."""
    from eval.report import build_summary, write_report

    out_dir = Path(out_dir)
    _check_args(policies, workers, executor)
    _pin_run(out_dir, config, policies)
    jobs = plan_jobs(config, policies)
    done = _finished_keys(out_dir / RESULTS)
    pending = [job for job in jobs if job.key not in done]
    log.info("%d jobs planned, %d already recorded, %d to run", len(jobs), len(jobs) - len(pending), len(pending))
    if pending:
        _execute(pending, config, out_dir, workers, executor, progress)
    return write_summary(out_dir, config, jobs, build_summary, write_report)


def write_summary(out_dir: Path, config: BenchConfig, jobs: list[Job], build_summary: Callable,
                  write_report: Callable) -> dict[str, Any]:
    from eval.report import load_records

    records = load_records(out_dir / RESULTS)
    summary = build_summary(records, n_resamples=config.n_resamples, seed=config.seed,
                            competence_threshold=config.competence_threshold,
                            config={**config.to_dict(), "expected_jobs": [list(j.key) for j in jobs]})
    write_report(out_dir, summary)
    return summary


def report_from_dir(out_dir: str | Path) -> dict[str, Any]:
    """Rebuild summary.json, report.md and figures from ``DIR/results.jsonl`` and ``DIR/run.json``."""
    from eval.report import build_summary, write_report

    out_dir = Path(out_dir)
    run_file = out_dir / RUN_FILE
    if not run_file.is_file() or not (out_dir / RESULTS).is_file():
        raise R2AInputError(f"{out_dir}: expected {RUN_FILE} and {RESULTS} from 'r2a bench run'")
    pinned = json.loads(run_file.read_text())
    config = BenchConfig.from_dict(pinned["config"], where=str(run_file))
    return write_summary(out_dir, config, plan_jobs(config, pinned["policies"]), build_summary, write_report)


def _check_args(policies: list[str], workers: int, executor: str) -> None:
    from r2a.policies import parse_policy_spec

    if not policies:
        raise R2AInputError("give at least one --policy")
    for spec in policies:
        parse_policy_spec(spec)
    if workers < 1:
        raise R2AInputError(f"--workers must be ≥ 1, got {workers}")
    if executor not in EXECUTORS:
        raise R2AInputError(f"unknown executor '{executor}'; valid executors: {', '.join(EXECUTORS)}")


def _pin_run(out_dir: Path, config: BenchConfig, policies: list[str]) -> None:
    """Write run.json on the first run; on a resume, refuse a different config or policy list."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pinned = {"config": config.to_dict(), "policies": sorted(policies)}
    path = out_dir / RUN_FILE
    if path.exists():
        previous = json.loads(path.read_text())
        if previous != pinned:
            raise R2AInputError(f"{path}: {out_dir} holds results of a different config or policy list; "
                                f"use a new --out directory (or delete it) to start over")
        return
    write_json_atomic(path, pinned)


def _finished_keys(path: Path) -> set[tuple]:
    """Keys of recorded jobs; a torn last line (killed mid-write) is cut off so appends start clean."""
    from eval.report import job_key, load_records

    if not path.exists():
        return set()
    _drop_torn_tail(path)
    return {job_key(rec) for rec in load_records(path)}


def _drop_torn_tail(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data[: data.rfind(b"\n") + 1]
        log.warning("%s: dropping an incomplete last record (%d bytes) from an interrupted run", path,
                    len(data) - len(keep))
        with open(path, "r+b") as handle:
            handle.truncate(len(keep))


def _execute(jobs: list[Job], config: BenchConfig, out_dir: Path, workers: int, executor: str,
             progress: bool) -> None:
    runner = _ray_results if executor == "ray" else _local_results
    start = time.perf_counter()
    with open(out_dir / RESULTS, "a", encoding="utf-8") as sink, \
            tqdm(total=len(jobs), desc=f"bench {config.name}", unit="ep", disable=not progress) as bar:
        for record in runner(jobs, config, str(out_dir), workers):
            sink.write(json.dumps(to_json_safe(record)) + "\n")
            sink.flush()
            os.fsync(sink.fileno())
            bar.update(1)
            bar.set_postfix(ep_s=f"{bar.n / (time.perf_counter() - start):.2f}")


def _call(args: tuple[Job, BenchConfig, str]) -> dict[str, Any]:
    return run_job(*args)


def _local_results(jobs: list[Job], config: BenchConfig, out_dir: str, workers: int) -> Iterator[dict]:
    if workers == 1:
        yield from map(_call, ((job, config, out_dir) for job in jobs))
        return
    with mp.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap_unordered(_call, [(job, config, out_dir) for job in jobs])


def _ray_results(jobs: list[Job], config: BenchConfig, out_dir: str, workers: int) -> Iterator[dict]:
    """The same job function as Ray tasks (a Ray worker process keeps its simulators between tasks)."""
    try:
        import ray
    except ImportError:
        raise R2AInputError("--executor ray needs Ray: pip install 'r2a[ray]'") from None
    if not ray.is_initialized():
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(run_job)
    pending = [remote.remote(job, config, out_dir) for job in jobs]
    while pending:
        finished, pending = ray.wait(pending, num_returns=1)
        yield ray.get(finished[0])
