"""One benchmark job — (policy, task, factor, level, episode) — run to a JSON-ready record.

This is the function every executor calls (local processes or Ray tasks). A worker process keeps one
simulator per task and reuses it; the shift's ``undo`` restores the clean scene after every episode.
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.bench_config import BenchConfig
from eval.schema import CLEAN, EPISODE_SCHEMA, EPISODE_SCHEMA_VERSION
from r2a_core.files import atomic_path

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
        return f"{self.policy.replace(':', '-').replace('/', '_')}__{self.task}__{self.factor}{self.level}__{self.episode}"


def _sim(task: str, image_size: int):
    from sim.envs.robosuite_env import SimConfig, SimEnv

    key = (task, image_size)
    if key not in _SIMS:
        _SIMS[key] = SimEnv(SimConfig(task=task, image_size=image_size))
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


def run_job(job: Job, config: BenchConfig, out_dir: str | None = None) -> dict[str, Any]:
    """Run one episode and return its record; a crash becomes a record with ``error`` set, never an exception."""
    start = time.perf_counter()
    seed = config.seed + job.episode
    base = {"schema": EPISODE_SCHEMA, "schema_version": EPISODE_SCHEMA_VERSION, **asdict(job),
            "env_seed": seed, "policy_seed": seed, "config_name": config.name}
    try:
        record = {**base, **_run(job, config, seed, out_dir)}
    except Exception as err:  # noqa: BLE001 - a blow-up is recorded, the benchmark goes on
        log.error("job %s failed: %s", job.key, err)
        record = {**base, "success": False, "error": f"{type(err).__name__}: {err}",
                  "traceback": traceback.format_exc(limit=5)}
    record["wall_s"] = round(time.perf_counter() - start, 3)
    return record


def _run(job: Job, config: BenchConfig, seed: int, out_dir: str | None) -> dict[str, Any]:
    from demos.rollout import run_episode
    from sim.shifts import ShiftHooks
    from r2a.policies import make_policy

    sim = _sim(job.task, config.image_size)
    shift = ShiftHooks(None if job.factor == CLEAN else job.factor, job.level)
    hooks = BenchHooks(shift, sim.task)
    policy = make_policy(job.policy, sim, seed)
    # the config's execution horizon wins; otherwise the policy's own (openpi's action_horizon), else all of it
    n_action_steps = config.n_action_steps or getattr(policy, "n_action_steps", None)
    _, summary = run_episode(sim, policy, seed, record=False, n_action_steps=n_action_steps, hooks=hooks)
    if config.save_trajectories and out_dir is not None:
        _save_trajectory(Path(out_dir), job, summary["trace"])
    return _record_fields(sim, hooks, summary)


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


def _save_trajectory(out_dir: Path, job: Job, trace: dict[str, np.ndarray]) -> None:
    folder = out_dir / "trajectories"
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / f"{job.slug()}.npz") as tmp:
        np.savez_compressed(tmp, **trace)
