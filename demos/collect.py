"""Record scripted-expert demonstrations in parallel worker processes and stream them into one HDF5 file.

Episode ``i`` uses environment seed ``seed + i``, so a collection is reproducible whatever the worker count.
Workers are spawned processes (each owns one simulator and GL context); episodes are written as they arrive,
into a temp file renamed into place at the end. The expert's actions are always the recorded labels; what the
simulator executes may be disturbed (DART, :mod:`demos.perturb`) or come from another policy entirely (DAgger:
a higher layer injects an ``executor``, so this module never imports a learner).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from tqdm import tqdm

from demos.perturb import PerturbConfig
from r2a_core.errors import R2AInputError
from r2a_core.types import CAMERAS, Episode

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimConfig

log = logging.getLogger(__name__)

_WORKER: dict[str, Any] = {}


@dataclass
class CollectConfig:
    """What to record."""

    task: str
    episodes: int
    out: Path
    #: seed of episode 0; episode i uses seed + i
    seed: int = 0
    workers: int = 1
    image_size: int = 128
    cameras: tuple[str, ...] = CAMERAS
    #: DART-style disturbance of the executed actions (labels stay the expert's); default: none
    perturb: PerturbConfig = field(default_factory=PerturbConfig)
    #: picklable ``executor(sim, seed) -> perturbation`` built once per episode: what the simulator executes
    #: instead of the expert's action (e.g. a learner, for DAgger); the expert then labels in relabel mode
    executor: Callable[[Any, int], Any] | None = None
    #: record the expert's own next ``lookahead`` actions from every state (``Episode.label_chunks``; 0: off),
    #: the chunk labels of on-policy data (:mod:`demos.lookahead`)
    lookahead: int = 0
    #: the scripted-expert variant that labels (``demos.experts.scripted.EXPERT_VARIANTS``)
    expert: str = "scripted"
    #: ``FACTOR:LEVEL``: every episode runs under this shift (sampled with the episode's seed); None: clean
    shift: str | None = None
    #: LIBERO: Gaussian offset (rad) on each arm joint at the start (:attr:`SimConfig.start_joint_noise`)
    start_joint_noise: float = 0.0

    def sim_config(self) -> "SimConfig":
        """The simulator every worker builds (its fields are the file's ``env_args``)."""
        from sim.envs.robosuite_env import SimConfig

        return SimConfig(task=self.task, image_size=self.image_size, cameras=self.cameras,
                         start_joint_noise=self.start_joint_noise)


@dataclass
class CollectResult:
    path: Path
    episodes: int
    successes: int
    frames: int
    seconds: float

    @property
    def success_rate(self) -> float:
        return self.successes / max(self.episodes, 1)

    @property
    def steps_per_second(self) -> float:
        return self.frames / max(self.seconds, 1e-9)

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary the CLIs print."""
        return {"out": str(self.path), "episodes": self.episodes, "successes": self.successes,
                "success_rate": round(self.success_rate, 4), "frames": self.frames,
                "seconds": round(self.seconds, 2), "steps_per_second": round(self.steps_per_second, 1)}


def _init_worker(config: CollectConfig) -> None:
    from sim.envs.backends import make_sim

    _WORKER["sim"] = make_sim(config.sim_config())
    _WORKER["config"] = config


def _record(args: tuple[int, int]) -> tuple[int, Episode]:
    from demos.experts.scripted import make_expert
    from demos.lookahead import ExpertLookahead, chain
    from demos.rollout import run_episode

    index, seed = args
    sim, config = _WORKER["sim"], _WORKER["config"]
    perturbation = _episode_perturbation(config, sim, seed)
    expert = make_expert(sim, relabel=config.executor is not None, variant=config.expert)
    lookahead = ExpertLookahead(sim, expert, config.lookahead) if config.lookahead else None
    hooks = _shift_hooks(config.shift)
    executed: list[np.ndarray] = []
    episode, _ = run_episode(sim, expert, seed, perturb=chain(lookahead, perturbation), hooks=hooks,
                             observer=lambda step: executed.append(step.executed))
    episode.meta["expert"] = config.expert
    if hooks is not None:
        episode.meta["shift"] = {"factor": hooks.factor.name, "level": hooks.level, "seed": seed,
                                 "params": hooks.params}
    if perturbation is not None:  # what really moved the robot (the label is the expert's action)
        episode.meta["executed_actions"] = np.round(np.asarray(executed, np.float64), 5).tolist()
    if perturbation is not None:
        episode.meta[perturbation.META_KEY] = perturbation.summary()
    if lookahead is not None:
        episode.label_chunks = lookahead.chunks()
    return index, episode


def _shift_hooks(spec: str | None):
    """The benchmark's shift hooks for ``FACTOR:LEVEL`` (None: no shift)."""
    if not spec:
        return None
    from sim.shifts import ShiftHooks, check_level, get_factor

    name, _, level = spec.partition(":")
    try:
        return ShiftHooks(get_factor(name.strip()), check_level(int(level)))
    except ValueError:
        raise R2AInputError(f"--shift {spec}: expected FACTOR:LEVEL with a level 1, 2 or 3, "
                            "e.g. background:2") from None


def _episode_perturbation(config: CollectConfig, sim, seed: int):
    """What turns the expert's label into the executed action this episode (None: the label itself)."""
    from demos.perturb import ActionPerturbation

    if config.executor is not None:
        return config.executor(sim, seed)
    return ActionPerturbation(config.perturb, seed) if config.perturb.active else None


def collect(config: CollectConfig, progress: bool = True) -> CollectResult:
    """Record ``config.episodes`` expert episodes into ``config.out`` (atomically)."""
    from demos.experts.scripted import expert_variant
    from demos.hdf5_io import HDF5EpisodeWriter
    from sim.envs.backends import task_env_args, task_file_attrs
    from sim.envs.tasks import get_task

    config = replace(config, task=get_task(config.task).name)  # any case in; fail fast before processes start
    expert_variant(config.expert)
    _shift_hooks(config.shift)  # an unknown factor or level fails here, before any worker starts
    if config.episodes < 1 or config.workers < 1:
        raise R2AInputError(f"--episodes and --workers must be ≥ 1 (got {config.episodes}, {config.workers})")
    if config.lookahead < 0:
        raise R2AInputError(f"--lookahead must be ≥ 0 steps (got {config.lookahead})")
    sim_config = config.sim_config()
    env_args = task_env_args(sim_config)
    problem_info, extra_attrs = task_file_attrs(sim_config)
    jobs = [(i, config.seed + i) for i in range(config.episodes)]
    successes = frames = 0
    start = time.perf_counter()
    with HDF5EpisodeWriter(config.out, env_args, problem_info, extra_attrs=extra_attrs) as writer, \
            _pool(config) as pool, \
            tqdm(total=len(jobs), desc=f"collect {config.task}", unit="ep", disable=not progress) as bar:
        # in episode order, whichever worker finishes first, so that the file's layout does not follow the workers'
        # timing and re-collected demos usually hash as before (a training run resumes on the same episodes even
        # where the bytes differ: training/vla/train.py, same_sources)
        for index, episode in pool.imap(_record, jobs):
            writer.add(episode, index)
            successes += int(episode.success)
            frames += len(episode)
            bar.update(1)
            bar.set_postfix(success=f"{successes}/{bar.n}", steps_s=f"{frames / (time.perf_counter() - start):.1f}")
    seconds = time.perf_counter() - start
    log.info("%s: %d/%d successful, %d frames, %.1f steps/s", config.out, successes, len(jobs), frames,
             frames / seconds)
    return CollectResult(Path(config.out), len(jobs), successes, frames, seconds)


class _InProcessPool:
    """The pool interface for ``workers=1``: no process start-up, easier debugging."""

    def __init__(self, config: CollectConfig) -> None:
        _init_worker(config)

    def imap(self, fn, jobs):
        return map(fn, jobs)

    def __enter__(self) -> "_InProcessPool":
        return self

    def __exit__(self, *exc) -> None:
        _WORKER.pop("sim").close()
        _WORKER.pop("config", None)


def _pool(config: CollectConfig):
    if config.workers == 1:
        return _InProcessPool(config)
    ctx = mp.get_context("spawn")
    return ctx.Pool(config.workers, initializer=_init_worker, initargs=(config,))
