"""One benchmark job — (policy, task, factor, level, episode) — run to a JSON-ready record and its files.

This is the function every executor calls (local processes or Ray tasks). A worker process keeps one
simulator per task and reuses it; the shift's ``undo`` restores the clean scene after every episode. A job
writes nothing itself: its record and its files (trajectory, failure frames) travel back to the driver, which
writes them, so workers need no filesystem shared with the driver (a Ray cluster).
"""

from __future__ import annotations

import io
import logging
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np

from eval.bench_config import BenchConfig
from eval.frames import FrameStrip
from eval.schema import CLEAN, EPISODE_SCHEMA, EPISODE_SCHEMA_VERSION
from r2a_core.provenance import artifact_digests, policy_artifacts

log = logging.getLogger(__name__)

_SIMS: dict[tuple[str, int], Any] = {}


@dataclass(frozen=True, order=True)
class Job:
    task: str
    episode: int
    factor: str
    level: int
    policy: str

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        return (self.policy, self.task, self.factor, self.level, self.episode)

    def slug(self) -> str:
        policy = self.policy.replace(":", "-").replace("/", "_")
        return f"{policy}__{self.task}__{self.factor}{self.level}__{self.episode}"


#: ``--save-frames`` choices: none, or a frame strip of every failed episode (and of every clean run, its twin)
SAVE_FRAMES = ("none", "failures")


@dataclass(frozen=True)
class JobOptions:
    """How to run a job besides its config: what the driver established up front, and what to bring back."""

    build_spec: str | None = None
    """the spec to build when it differs from the job's (the policy's files moved into this worker's cache)"""
    artifacts: Mapping[str, str] | None = None
    """role → sha256 of each file the driver's policy loaded; the worker's policy must load the same (None: a job
    run on its own, with no driver to agree with)"""
    save_frames: str = "none"
    """one of :data:`SAVE_FRAMES`"""
    shift_levels: Mapping[str, Any] | None = None
    """level parameters to run the job's factor at instead of ``configs/bench/factors.yaml``'s (calibration)"""
    record_fields: Mapping[str, Any] = field(default_factory=dict)
    """extra fields for the job's record (calibration: the knob and severity the levels came from)"""


@dataclass
class JobResult:
    """A job's record and its files (path relative to the results directory → content) for the driver."""

    record: dict[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)


def _sim(task: str, image_size: int):
    """The worker's simulator for a task (kept across jobs). A LIBERO scene holds ~2.5 GB, and robosuite's
    cleanup of a freed render context corrupts the newest one's images: one LIBERO scene per worker, the previous
    one closed before the next is built."""
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig
    from sim.envs.tasks import get_task

    key = (task, image_size)
    if key not in _SIMS:
        if get_task(task).backend == "libero":
            for other in [k for k in _SIMS if get_task(k[0]).backend == "libero"]:
                _SIMS.pop(other).close()
        _SIMS[key] = make_sim(SimConfig(task=task, image_size=image_size))
    return _SIMS[key]


class BenchHooks:
    """The shift's hooks (:class:`sim.shifts.ShiftHooks`) plus event counting: drops and wrong grasps."""

    def __init__(self, shift, task) -> None:
        self.shift, self.task = shift, task
        self.events = {"object_dropped": 0, "wrong_object_grasped": 0}
        self._held: dict[str, bool] = {}
        self.prompt: str | None = None

    def after_reset(self, sim) -> dict[str, Any] | None:
        self._held = {name: sim.is_grasped(name) for name in self.task.objects}
        return self.shift.after_reset(sim)

    def transform(self, obs: dict[str, Any]) -> dict[str, Any]:
        obs = self.shift.transform(obs)
        self.prompt = obs.get("prompt")
        return obs

    @property
    def stepwise_transform(self) -> bool:
        return self.shift.stepwise_transform

    def after_step(self, sim, action: np.ndarray) -> None:
        for name in self.task.objects:
            held = sim.is_grasped(name)
            if self._held[name] and not held and action[-1] > 0:  # slipped out of a closed hand
                self.events["object_dropped"] += 1
            if held and not self._held[name] and name in self.task.wrong_objects:
                self.events["wrong_object_grasped"] += 1
            self._held[name] = held

    def close(self) -> None:
        self.shift.close()


def _base_record(job: Job, config: BenchConfig) -> dict[str, Any]:
    seed = config.seed + job.episode
    return {"schema": EPISODE_SCHEMA, "schema_version": EPISODE_SCHEMA_VERSION, **asdict(job),
            "env_seed": seed, "policy_seed": seed, "config_name": config.name}


def _error_record(job: Job, config: BenchConfig, err: BaseException) -> dict[str, Any]:
    log.error("job %s failed: %s", job.key, err)
    return {**_base_record(job, config), "success": False, "error": f"{type(err).__name__}: {err}",
            "traceback": "".join(traceback.format_exception(err, limit=5))}


def failed_job(job: Job, config: BenchConfig, err: BaseException) -> JobResult:
    """The result of a job that could not run at all (its worker died, its files could not be fetched)."""
    return JobResult({**_error_record(job, config, err), "wall_s": None})


def run_job(job: Job, config: BenchConfig, options: JobOptions | None = None) -> JobResult:
    """Run one episode; a crash becomes a record with ``error`` set, never an exception."""
    options = options or JobOptions()
    start = time.perf_counter()
    seed = config.seed + job.episode
    base = {**_base_record(job, config), **options.record_fields}
    frames = FrameStrip() if options.save_frames == "failures" else None
    files: dict[str, bytes] = {}
    try:
        record = {**base, **_run(job, config, seed, options, frames, files)}
    except Exception as err:  # noqa: BLE001 - a blow-up is recorded, the benchmark goes on
        record = _error_record(job, config, err)
    if frames is not None and frames.count and (not record["success"] or job.factor == CLEAN):
        data, suffix = frames.encoded()
        path = f"frames/{job.slug()}{suffix}"
        files[path] = data
        record["frames"], record["frame_steps"] = path, frames.steps
    record["wall_s"] = round(time.perf_counter() - start, 3)
    return JobResult(record, files)


def _run(job: Job, config: BenchConfig, seed: int, options: JobOptions, frames: FrameStrip | None,
         files: dict[str, bytes]) -> dict[str, Any]:
    from demos.rollout import run_episode
    from eval.diagnostics import register_diagnostics
    from r2a.policies import make_policy

    register_diagnostics()  # a spawned worker process builds the measurement-only policies too
    sim = _sim(job.task, config.image_size)
    shift = _shift_hooks(job, config, options)
    hooks = BenchHooks(shift, sim.task)
    policy = make_policy(options.build_spec or job.policy, sim, seed)
    wrapper, harmonize, canon = (ReplyDiagnostics("r2a"), ReplyDiagnostics("harmonize"),
                                 ReplyDiagnostics("canonicalize"))
    try:
        _check_artifacts(job.policy, policy, options.artifacts)
        # the config's execution horizon wins; otherwise the policy's own (openpi's action_horizon), else all of it
        n_action_steps = config.n_action_steps or getattr(policy, "n_action_steps", None)
        # cameras render only for the observations the policy is queried on (a frame strip looks at no others)
        _, summary = run_episode(sim, policy, seed, record=False, n_action_steps=n_action_steps, hooks=hooks,
                                 observer=_both(frames, wrapper, harmonize, canon), render_unseen=False)
    finally:
        close = getattr(policy, "close", None)  # a server connection is released at once, not at GC
        if callable(close):
            close()
    if config.save_trajectories:
        files[f"trajectories/{job.slug()}.npz"] = _npz_bytes(summary["trace"])
    record = _record_fields(sim, hooks, summary)
    for diagnostics in (wrapper, harmonize, canon):
        if diagnostics.replies:
            record[diagnostics.key] = diagnostics.summary()
    return record


def _shift_hooks(job: Job, config: BenchConfig, options: JobOptions) -> Any:
    """The episode's shift hooks: a factor of sim/shifts, or the LIBERO-Plus task the config assigns to the job
    (factor ``liberoplus:<family>``, sim/shifts/liberoplus.py)."""
    from sim.shifts import ShiftHooks

    if job.factor.startswith("liberoplus:"):
        from sim.envs.liberoplus_tasks import load_index
        from sim.shifts.liberoplus import LiberoPlusHooks

        name = config.liberoplus_jobs().get((job.task, job.episode, job.factor, job.level))
        if name is None:
            raise RuntimeError(f"no LIBERO-Plus task of the config runs as {job.key}")
        index = load_index()
        return LiberoPlusHooks(index, index.get(name), job.level)
    return ShiftHooks(None if job.factor == CLEAN else _factor(job, options), job.level)


def _factor(job: Job, options: JobOptions) -> Any:
    """The job's factor: by name (levels from factors.yaml), or built on the options' level parameters."""
    if options.shift_levels is None:
        return job.factor
    from sim.shifts.registry import FACTOR_CLASSES

    return FACTOR_CLASSES[job.factor]({job.level: dict(options.shift_levels)})


class ReplyDiagnostics:
    """A rollout observer keeping one diagnostic of a policy's replies per query — ``r2a`` (the R2A wrapper's, per
    chunk), ``harmonize`` (observation harmonization's, per camera) or ``canonicalize`` (view canonicalization's
    estimate, one per episode) — and summarizing them for the record."""

    def __init__(self, key: str) -> None:
        self.key, self.replies, self.steps = key, [], []

    def __call__(self, step: Any) -> None:
        if step.reply is not None and isinstance(step.reply.get(self.key), dict):
            self.replies.append(step.reply[self.key])
            self.steps.append(step.index)

    def summary(self) -> dict[str, Any]:
        """The episode's summary; for ``r2a`` and ``harmonize`` with its per-query ``trace`` (episode schema v2)."""
        if self.key == "canonicalize":  # estimated once, at the first frame: the last reply says it all
            return dict(self.replies[-1])
        if self.key == "harmonize":
            from r2a.observation.harmonize import summarize_harmonize, trace_harmonize

            return {**summarize_harmonize(self.replies), "trace": trace_harmonize(self.steps, self.replies)}
        from r2a.wrapper.policy import summarize_diagnostics, trace_diagnostics

        return {**summarize_diagnostics(self.replies), "trace": trace_diagnostics(self.steps, self.replies)}


def _both(*observers: Any) -> Any:
    """One observer calling each of ``observers`` that is not None."""
    active = [o for o in observers if o is not None]

    def observe(step: Any) -> None:
        for observer in active:
            observer(step)

    return observe


def _check_artifacts(spec: str, policy: Any, expected: Mapping[str, str] | None) -> None:
    """The worker's policy must have loaded exactly the files the driver's did (the same roles, the same sha256)."""
    if expected is None:
        return
    loaded = artifact_digests(policy_artifacts(policy))
    wrong = sorted(r for r in expected.keys() | loaded.keys() if loaded.get(r) != expected.get(r))
    if wrong:
        raise RuntimeError(f"policy '{spec}' loaded other files here than when the run started ({', '.join(wrong)}: "
                           f"sha256 {[loaded.get(r) for r in wrong]} instead of {[expected.get(r) for r in wrong]})")


def _record_fields(sim, hooks: BenchHooks, summary: dict[str, Any]) -> dict[str, Any]:
    from eval.metrics import trajectory_metrics

    stages = summary["stages"]
    names = list(sim.task.stages)
    first_incomplete = next((s for s in names if not stages[s]), None)
    trace = summary["trace"]
    success_step = summary["steps"] if summary["success"] else None
    return {
        "success": bool(summary["success"]), "steps": summary["steps"], "horizon": sim.horizon,
        "fingerprint": summary["fingerprint"],
        "modifies_state": None if hooks.shift.factor is None else hooks.shift.factor.modifies_state,
        "shift_params": hooks.shift.params, "instruction": hooks.prompt,
        "stage_names": names, "stages": stages, "first_incomplete_stage": first_incomplete,
        "progress": sum(stages.values()) / len(names), "events": hooks.events,
        "metrics": trajectory_metrics(trace["ee_pos"], trace["gripper"], 1.0 / sim.config.control_freq, success_step),
        "ee_summary": {"start": trace["ee_pos"][0].round(4).tolist(), "end": trace["ee_pos"][-1].round(4).tolist(),
                       "min_z": float(trace["ee_pos"][:, 2].min().round(4))},
        "error": None,
    }


def _npz_bytes(trace: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **trace)
    return buffer.getvalue()
