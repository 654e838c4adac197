"""The calibration sweep: episodes at severity points per knob, fitted, refined coarse to fine, resumable.

Layout of ``OUT/``: ``results.jsonl`` holds one benchmark episode record per calibration episode (the runner's
job records, plus ``knob``, ``severity`` and the level parameters it ran at), appended and fsync'ed as each
finishes; ``run.json`` pins the policy (its spec and the sha256 of every file it loaded), the tasks, seeds,
episodes and image size — a resume with any of them changed is refused, more severities and factors are welcome.
The clean episodes (the ceilings) are run once and shared by every factor. ``calibration.json`` is the result:
per factor and knob the measured points, the fit and the chosen levels.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from tqdm import tqdm

from eval.bench_config import BenchConfig
from eval.calibration.config import CalibrationConfig
from eval.calibration.fit import LogisticFit, Observation, choose_levels, fit_logistic, next_severities
from eval.episode_job import Job, JobOptions, JobResult
from eval.schema import CLEAN, RESULTS, RUN_FILE
from r2a_core.errors import R2AInputError
from r2a_core.files import write_json_atomic
from r2a_core.provenance import artifact_digests, collect_provenance

log = logging.getLogger(__name__)

RESULT_FILE = "calibration.json"
RUN_FORMAT = "r2a.calibration.run"
RESULT_FORMAT, RESULT_VERSION = "r2a.calibration", 1
#: the level a calibration job runs its factor at (its parameters come with the job)
CALIBRATION_LEVEL = 1


@dataclass(frozen=True)
class Point:
    """One severity of one knob of one factor (clean: factor ``clean``, knob ``""``, severity 0)."""

    factor: str
    knob: str
    severity: float

    def key(self, task: str, episode: int) -> tuple[str, str, float, str, int]:
        return (self.factor, self.knob, round(self.severity, 4), task, episode)


CLEAN_POINT = Point(CLEAN, "", 0.0)


def knobs_of(factor: str, only: Sequence[str] | None = None) -> tuple[str, ...]:
    """The factor's knobs (all, or those of ``only`` that it has; an unknown one lists the valid ones)."""
    from sim.shifts import get_factor

    knobs = get_factor(factor).knobs
    if not only:
        return knobs
    bad = [k for k in only if k not in knobs]
    if bad:
        raise R2AInputError(f"factor '{factor}' has no knob {bad[0]!r}; its knobs: {', '.join(knobs)}")
    return tuple(k for k in knobs if k in only)


def bench_config(config: CalibrationConfig) -> BenchConfig:
    """The benchmark config a calibration episode runs under (its seeds, tasks, image size)."""
    return BenchConfig(name="calibration", tasks=list(config.tasks), episodes=config.episodes, seed=config.seed,
                       image_size=config.image_size)


class Sweep:
    """The records of one calibration directory and the means to add more (episodes run on a local pool)."""

    def __init__(self, out_dir: Path, config: CalibrationConfig, policy: str, artifacts: dict[str, dict[str, str]],
                 execute: Callable[[list[tuple[Job, BenchConfig, JobOptions]]], Iterator[JobResult]],
                 progress: bool = True) -> None:
        self.out_dir, self.config, self.policy, self.progress = out_dir, config, policy, progress
        self.artifacts = artifact_digests(artifacts)
        self.execute = execute
        self.records: dict[tuple, dict[str, Any]] = {}
        path = out_dir / RESULTS
        if path.exists():
            from eval.report import load_records
            from eval.runner import drop_torn_tail  # a kill mid-write leaves a torn last line

            drop_torn_tail(path)
            for rec in load_records(path, dedupe=False):  # the last record of an episode wins
                if rec.get("error") is None:  # errored episodes are run again
                    self.records[_record_key(rec)] = rec

    def ensure(self, points: Iterable[Point]) -> None:
        """Run every (point, task, episode) not yet recorded."""
        from eval.runner import append_result
        from sim.shifts import get_factor

        bench = bench_config(self.config)
        tasks = []
        for point in points:
            clean = point.factor == CLEAN
            params = None if clean else get_factor(point.factor).params_at({point.knob: point.severity})
            fields = {"calibration": True, "knob": point.knob, "severity": round(point.severity, 4),
                      "shift_levels": params}
            options = JobOptions(artifacts=self.artifacts, shift_levels=params, record_fields=fields)
            for task in self.config.tasks:
                for ep in range(self.config.episodes):
                    if point.key(task, ep) not in self.records:
                        job = Job(task, ep, point.factor, 0 if clean else CALIBRATION_LEVEL, self.policy)
                        tasks.append((job, bench, options))
        if not tasks:
            return
        start = time.perf_counter()
        with open(self.out_dir / RESULTS, "a", encoding="utf-8") as sink, \
                tqdm(total=len(tasks), desc="calibrate", unit="ep", disable=not self.progress) as bar:
            for result in self.execute(tasks):
                rec = result.record
                append_result(sink, self.out_dir, result)
                if rec.get("error") is None:
                    self.records[_record_key(rec)] = rec
                else:
                    log.error("calibration episode %s failed: %s", _record_key(rec), rec["error"])
                bar.update(1)
                bar.set_postfix(ep_s=f"{bar.n / (time.perf_counter() - start):.2f}")

    def observations(self, point_filter: Callable[[Point], bool]) -> list[Observation]:
        return [Observation(key[3], key[2], bool(rec["success"])) for key, rec in self.records.items()
                if point_filter(Point(key[0], key[1], key[2]))]

    def clean_rates(self) -> dict[str, float]:
        rates = {}
        for task in self.config.tasks:
            runs = [rec["success"] for key, rec in self.records.items() if key[0] == CLEAN and key[3] == task]
            rates[task] = sum(runs) / len(runs) if runs else 0.0
        return rates

    def measured(self, factor: str, knob: str) -> list[float]:
        return sorted({key[2] for key in self.records if key[0] == factor and key[1] == knob})


def _record_key(rec: dict[str, Any]) -> tuple[str, str, float, str, int]:
    return (rec["factor"], rec.get("knob") or "", round(float(rec.get("severity") or 0.0), 4), rec["task"],
            int(rec["episode"]))


def calibrate(factors: Sequence[str], policy: str, config: CalibrationConfig, out_dir: str | Path,
              workers: int = 1, knobs: Sequence[str] | None = None, progress: bool = True) -> dict[str, Any]:
    """Sweep each factor's knobs against ``policy`` (resuming ``out_dir``), fit, choose levels; returns (and writes
    to ``OUT/calibration.json``) the calibration of every factor and knob recorded in ``out_dir`` so far."""
    from eval.preflight import build_policies
    from eval.runner import local_pool
    from sim.shifts import get_factor

    for factor in factors:
        get_factor(factor)  # an unknown name lists the valid ones before anything runs
        knobs_of(factor, knobs)
    out_dir = Path(out_dir)
    artifacts = build_policies([policy], bench_config(config))[policy]
    started = time.time()
    _pin(out_dir, config, policy, artifacts)
    with local_pool(workers) as execute:
        sweep = Sweep(out_dir, config, policy, artifacts, execute, progress)
        sweep.ensure([CLEAN_POINT])
        for factor in factors:
            for knob in knobs_of(factor, knobs):
                _sweep_knob(sweep, factor, knob)
    result = summarize(sweep, started)
    write_json_atomic(out_dir / RESULT_FILE, result)
    return result


def _sweep_knob(sweep: Sweep, factor: str, knob: str) -> None:
    """Coarse to fine: the grid (an ordinal factor's steps), then up to ``refine`` rounds of new points."""
    from sim.shifts import get_factor

    config = sweep.config
    ordinal = get_factor(factor).ordinal
    grid = list(ordinal) if ordinal is not None else list(config.severities)
    sweep.ensure(Point(factor, knob, s) for s in grid)
    for round_ in range(0 if ordinal is not None else config.refine):
        fit = _fit(sweep, factor, knob)
        new = next_severities(fit, sweep.measured(factor, knob), config.targets, config.min_step)
        log.info("%s/%s round %d: a=%.2f b=%.2f; new severities %s", factor, knob, round_ + 1, fit.a, fit.b,
                 new or "none")
        if not new:
            break
        sweep.ensure(Point(factor, knob, s) for s in new)


def _fit(sweep: Sweep, factor: str, knob: str) -> LogisticFit:
    observations = sweep.observations(lambda p: p.factor == factor and p.knob == knob)
    return fit_logistic(observations, sweep.clean_rates())


def summarize(sweep: Sweep, started: float | None = None) -> dict[str, Any]:
    """Per factor and knob: the measured points (per task), the fit, the chosen levels and their status."""
    from eval.stats import wilson_interval
    from sim.shifts import get_factor

    config = sweep.config
    clean = sweep.clean_rates()
    factors: dict[str, Any] = {}
    recorded = sorted({(key[0], key[1]) for key in sweep.records if key[0] != CLEAN})
    for factor, knob in recorded:
        ordinal = get_factor(factor).ordinal
        fit = _fit(sweep, factor, knob)
        levels = choose_levels(fit, config.targets, ordinal)
        points = []
        for s in sweep.measured(factor, knob):
            per_task = {}
            for task in config.tasks:
                runs = [rec["success"] for key, rec in sweep.records.items()
                        if key[:3] == (factor, knob, s) and key[3] == task]
                per_task[task] = [int(sum(runs)), len(runs)]
            k, n = sum(v[0] for v in per_task.values()), sum(v[1] for v in per_task.values())
            points.append({"severity": s, "successes": k, "episodes": n,
                           "wilson95": [round(x, 4) for x in wilson_interval(k, n)], "per_task": per_task,
                           "fitted_relative": round(float(fit.relative(s)), 4)})
        factors.setdefault(factor, {})[knob] = {"fit": fit.to_dict(), **levels, "points": points}
    clean_runs = {task: [int(sum(rec["success"] for key, rec in sweep.records.items()
                                 if key[0] == CLEAN and key[3] == task)),
                         sum(1 for key in sweep.records if key[0] == CLEAN and key[3] == task)]
                  for task in config.tasks}
    wall = sum(float(rec.get("wall_s") or 0.0) for rec in sweep.records.values())
    return {"format": RESULT_FORMAT, "format_version": RESULT_VERSION, "policy": sweep.policy,
            "artifacts": sweep.artifacts, "config": config.to_dict(),
            "clean": {task: {"successes": k, "episodes": n, "rate": round(clean.get(task, 0.0), 4),
                             "wilson95": [round(x, 4) for x in wilson_interval(k, n)]}
                      for task, (k, n) in clean_runs.items()},
            "factors": factors, "episodes": len(sweep.records),
            "episode_seconds": round(wall, 1),
            "episode_seconds_per_task": _seconds_per_task(sweep),
            "date": time.strftime("%Y-%m-%d"),
            "session_wall_s": None if started is None else round(time.time() - started, 1)}


def _seconds_per_task(sweep: Sweep) -> dict[str, float]:
    """Mean wall seconds of one episode per task (one worker): what sizes a benchmark config's run time."""
    out = {}
    for task in sweep.config.tasks:
        walls = [float(rec["wall_s"]) for key, rec in sweep.records.items() if key[3] == task and rec.get("wall_s")]
        if walls:
            out[task] = round(sum(walls) / len(walls), 2)
    return out


def load_calibration(path: str | Path) -> dict[str, Any]:
    """A ``calibration.json`` (a file or the directory holding it), its format checked."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULT_FILE
    if not path.is_file():
        raise R2AInputError(f"{path}: no calibration result here (r2a bench calibrate writes {RESULT_FILE})")
    doc = json.loads(path.read_text())
    if doc.get("format") != RESULT_FORMAT or doc.get("format_version") != RESULT_VERSION:
        raise R2AInputError(f"{path}: format {doc.get('format')!r} v{doc.get('format_version')!r} is not a "
                            f"calibration result this r2a reads ({RESULT_FORMAT} v{RESULT_VERSION})")
    return doc


def _pin(out_dir: Path, config: CalibrationConfig, policy: str, artifacts: dict[str, dict[str, str]]) -> None:
    """Write ``run.json`` on the first run; on a resume refuse a different policy, its files, tasks or seeds."""
    pinned = {"format": RUN_FORMAT, "policy": policy,
              "artifacts": artifact_digests(artifacts),
              "tasks": list(config.tasks), "seed": config.seed, "episodes": config.episodes,
              "image_size": config.image_size}
    path = out_dir / RUN_FILE
    if path.exists():
        before = json.loads(path.read_text())
        changed = [k for k, v in pinned.items() if before.get(k) != v]
        if changed:
            raise R2AInputError(f"{out_dir} holds a calibration with other {', '.join(changed)} "
                                f"({', '.join(f'{k}: {before.get(k)!r}' for k in changed)}); use another --out "
                                "or the same settings, since the episodes would not be comparable")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {**pinned, "provenance": collect_provenance()})


__all__ = ["CLEAN_POINT", "Point", "Sweep", "bench_config", "calibrate", "knobs_of", "load_calibration",
           "summarize"]
