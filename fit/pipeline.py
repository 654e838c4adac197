"""``r2a fit``: one base policy in, R2A's parts out, step by step and resumable.

R2A's parts are specific to the policy they wrap — the retriever learns from its chunks, the gate from where it goes
wrong — so a user with their own VLA fits them to it. The pipeline, one timed stage per step, each a call into the
module that owns it (the same recipe as ``r2a/assets/R2A_ASSETS.md``):

1. ``graph``: expert demonstrations per task (or the user's files), state only → the motion graph;
2. ``heldout``: expert demonstrations held out of the graph, with cameras, and their re-renders under the
   training-split shifts (only the pictures change);
3. ``statistics``: the image statistics of the gate's image signal (agentview) and of harmonization (both cameras,
   every level of the image factors) — the last step that neither queries nor builds the base;
4. ``retriever``: the GNN retriever trained on the base's chunks at those frames;
5. ``gate``: the learned gate on the held-out rows, then ``dagger_rounds`` online rounds — the wrapper with the
   current gate drives under the training-split shifts, the scripted expert labels every state with its own next
   8 actions, and the gate is retrained on all rows;
6. ``config``: ``OUT/r2a.yaml``, the R2A config that wraps the base with these parts (``--policy r2a:OUT``).

A step whose output exists is skipped, so a stopped fit resumes where it stopped (the trainers resume inside their
own directories). The base is asked its chunks on the held-out frames once: the retriever's queries and every gate
round read them from ``WORK/base_chunks`` (:class:`~training.retriever.queries.ChunkCache`). ``OUT/fit.json``
(``r2a.fit`` v1) records the config, the base, each step's time (over all its attempts), the demo files' and the
parts' sha256 — and every seed is a training seed (:mod:`fit.config`).
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tqdm import tqdm

from fit.config import BASE_FREE_STEPS, FIRST_READ_BY, STEPS, FitConfig
from r2a.wrapper.build import FITTED_CONFIG as R2A_CONFIG
from r2a_core.errors import R2AInputError
from r2a_core.files import (
    atomic_dir,
    read_manifest_json,
    remove_stale_temporaries,
    write_json_atomic,
    write_text_atomic,
)
from r2a_core.provenance import artifact_digests, collect_provenance, digests_shown, sha256_path
from sim.envs.tasks import task_file_stem

if TYPE_CHECKING:
    from training.retriever.queries import ChunkCache

log = logging.getLogger(__name__)

FIT_FORMAT, FIT_VERSION = "r2a.fit", 1
MANIFEST = "fit.json"
#: the fitted parts inside OUT (what OUT/r2a.yaml names, relative to itself)
GRAPH, RETRIEVER, GATE = "graph", "retriever", "gate"
IMAGE_STATS, HARMONIZE_STATS = "image_stats.json", "harmonize_stats.json"
#: work files (demonstrations, re-renders, rollouts, training runs): not needed to run the fitted R2A
WORK = "work"
#: each unfinished step's seconds so far, across interrupted attempts (:class:`StepClock`), one file per step
STEP_CLOCKS = f"{WORK}/step_clocks"
#: the files of a finished training run that a checkpoint consists of
CHECKPOINT_FILES = ("manifest.json", "model.safetensors", "train_summary.json")
#: what the trainers write once their last step is done (a run without it resumes)
FINISHED = "train_summary.json"


def fit(config: FitConfig, out: str | Path, progress: bool = True, until: str | None = None) -> dict[str, Any]:
    """Fit R2A's parts to ``config.base`` into ``out`` (resuming what is there); returns the manifest. ``until``
    stops after that step (the steps up to statistics do not query the base: ``until="statistics"`` makes their data
    while the base still trains — it is not even built, so its server need not be up — and the fit goes on later
    with the same command without ``until``)."""
    if until is not None and until not in STEPS:
        raise R2AInputError(f"until={until!r}: expected one of {', '.join(STEPS)}")
    out = Path(out)
    steps = STEPS if until is None else STEPS[:STEPS.index(until) + 1]
    base_artifacts = config.check_parts(build_base=not set(steps) <= set(BASE_FREE_STEPS))
    out.mkdir(parents=True, exist_ok=True)
    manifest = _start_manifest(config, out, base_artifacts)
    write_json_atomic(out / MANIFEST, manifest)  # before any step: a fit stopped in its first step resumes too
    fitting = Fitting(config, out, progress, base_artifacts)
    stages: dict[str, Callable[[], list[Path]]] = {
        "graph": fitting.graph, "heldout": fitting.heldout, "retriever": fitting.retriever,
        "statistics": fitting.statistics, "gate": fitting.gate, "config": fitting.write_config}
    for name in tqdm(steps, desc="r2a fit", unit="step", disable=not progress):
        log.info("r2a fit: %s", name)
        with StepClock(out / STEP_CLOCKS / f"{name}.json", name) as clock:
            outputs = stages[name]()
        done = manifest["steps"].get(name, {})
        manifest["steps"][name] = {"seconds": round(done.get("seconds", 0.0) + clock.seconds, 1),
                                   "outputs": [str(p.relative_to(out)) for p in outputs]}
        write_json_atomic(out / MANIFEST, manifest)
    manifest["sources"] = {"graph_demos": _digests(fitting.graph_files())}
    manifest["parts"] = _digests([out / GRAPH, out / RETRIEVER, out / GATE, out / IMAGE_STATS, out / HARMONIZE_STATS],
                                 relative_to=out)
    write_json_atomic(out / MANIFEST, manifest)
    return manifest


class StepClock:
    """The seconds one step took over all its attempts. A fit killed mid-step (a machine's session ending) loses no
    time but the last ``every`` seconds: the running total is rewritten to ``path`` (the step's own file) every
    ``every`` seconds and when the step raises, the next attempt at the same step starts from it, and a finished
    step's total goes to fit.json (the file is then removed)."""

    def __init__(self, path: Path, step: str, every: float = 30.0) -> None:
        self.path, self.step, self.every = path, step, every
        self.carried = self._carried()
        self._start, self._end = time.perf_counter(), None
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name=f"r2a-fit-clock-{step}", daemon=True)

    def _carried(self) -> float:
        """Seconds earlier, interrupted attempts at this step spent (0 without a clock of this step)."""
        if not self.path.exists():
            return 0.0
        try:
            clock = json.loads(self.path.read_text())
            return float(clock["seconds"]) if clock.get("step") == self.step else 0.0
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            log.warning("%s: not a step clock (%s); step %s's time counts from 0", self.path, err, self.step)
            return 0.0

    @property
    def seconds(self) -> float:
        """The step's seconds over all attempts, up to now (up to its end once the ``with`` block is left)."""
        return self.carried + (self._end if self._end is not None else time.perf_counter()) - self._start

    def _write(self) -> None:
        try:
            write_json_atomic(self.path, {"step": self.step, "seconds": round(self.seconds, 1)})
        except OSError as err:  # a full disk must not end the step, nor hide the error the step raised
            log.warning("%s: step %s's running time not saved (%s)", self.path, self.step, err)

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self._write()

    def __enter__(self) -> StepClock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._ticker.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        self._end = time.perf_counter()
        self._stop.set()
        self._ticker.join()
        if kind is None:
            self.path.unlink(missing_ok=True)
        else:
            self._write()  # an interrupted step: the next attempt goes on counting from here


def _start_manifest(config: FitConfig, out: Path, base_artifacts: dict[str, dict[str, str]] | None = None
                    ) -> dict[str, Any]:
    """The manifest of a new fit, or of the fit ``out`` holds — which must have been started with this config and,
    once a step has asked the base, the same base: the same spec loading the same files (``base_artifacts``, what
    the base declares it loaded; another checkpoint served at the same address is another base). ``base_artifacts``
    None: the base was not built (only base-free steps run), so there is nothing to compare and the record stays."""
    path = out / MANIFEST
    if path.exists():
        manifest = read_manifest_json(out, MANIFEST, FIT_FORMAT, "version", (FIT_VERSION,), "an r2a fit directory")
        before = {k: v for k, v in manifest.get("config", {}).items() if k in config.result_fields()}
        changed = sorted(k for k, v in config.result_fields().items() if before.get(k) != v)
        if "base" not in changed and base_artifacts is not None \
                and not _same_files(manifest.get("base_artifacts"), base_artifacts):
            changed = sorted([*changed, "base"])
            log.info("%s: base %s now loads other files (%s) than when the fit started (%s)", out, config.base,
                     digests_shown(artifact_digests(base_artifacts)),
                     digests_shown(artifact_digests(manifest.get("base_artifacts"))))
        done = set(manifest.get("steps", {}))
        refused = [k for k in changed if k not in FIRST_READ_BY
                   or done & set(STEPS[STEPS.index(FIRST_READ_BY[k]):])]
        if refused:
            later = ", ".join(f"{k} (until {FIRST_READ_BY[k]} runs)" for k in sorted(FIRST_READ_BY))
            raise R2AInputError(f"{out}: holds a fit started with another config (differs in {', '.join(refused)}"
                                f"{BASE_FILES_HINT if 'base' in refused else ''}); resume it with the same config "
                                "or give a new --out (only fields a step that has not run yet reads may change: "
                                f"{later})")
        if changed:
            log.info("%s: resumed with %s changed (read only by steps still to run)", out, ", ".join(changed))
        if "base" in changed:
            log.info("%s: its data (%s) was made for base %s; going on with %s", out, ", ".join(manifest["steps"]),
                     manifest.get("base"), config.base)
            manifest.setdefault("data_made_for_base", manifest.get("base"))
        manifest["config"], manifest["base"] = config.to_dict(), config.base  # workers and threads may differ too
        if base_artifacts is not None:
            manifest["base_artifacts"] = base_artifacts
        return manifest
    if any(out.iterdir()):
        raise R2AInputError(f"{out}: exists and holds no {MANIFEST}; give an empty or new --out")
    return {"format": FIT_FORMAT, "version": FIT_VERSION, "base": config.base, "base_artifacts": base_artifacts,
            "config": config.to_dict(), "provenance": collect_provenance(), "steps": {}}


#: said when a resumed fit's base spec is the same but the files behind it are not
BASE_FILES_HINT = " (its spec, or the files it loads: a server restarted with another checkpoint is another base)"


def _same_files(recorded: dict[str, dict[str, str]] | None, now: dict[str, dict[str, str]]) -> bool:
    """Whether the base loads what the fit recorded (role → sha256); a manifest from before the record, or of a fit
    that has not built its base yet (None), says nothing."""
    return recorded is None or artifact_digests(recorded) == artifact_digests(now)


def _digests(paths: Iterable[Path], relative_to: Path | None = None) -> dict[str, str]:
    """sha256 of each existing path, keyed by the path (relative to ``relative_to`` when given: the parts move
    with the fitted directory)."""
    return {str(p.relative_to(relative_to) if relative_to else p): sha256_path(p) for p in paths if p.exists()}


def task_file(task: str, suffix: str = "") -> str:
    """``libero_spatial/3`` → ``libero_spatial_3.hdf5`` (``suffix`` before the extension)."""
    return f"{task_file_stem(task)}{suffix}.hdf5"


class Fitting:
    """The steps of one fit (each returns what it made; an output that exists is kept)."""

    def __init__(self, config: FitConfig, out: Path, progress: bool,
                 base_artifacts: dict[str, dict[str, str]] | None = None) -> None:
        self.config, self.out, self.progress = config, out, progress
        self.base_artifacts = base_artifacts or {}
        self.work = out / WORK
        self.demos = self.work / "demos"

    # ------------------------------------------------------------------------------------------------ steps
    def graph(self) -> list[Path]:
        graph = self.out / GRAPH
        if graph.exists():
            return [graph]
        files = self.graph_files()
        if not self.config.graph_demos:
            for task, path in zip(self.config.tasks, files):
                self._collect(task, path, self.config.graph_episodes, self.config.graph_seed, cameras=())
        from graph_builder.build import build_graph_from_paths
        from graph_builder.config import load_config
        from graph_builder.storage import save_graph

        save_graph(build_graph_from_paths([str(p) for p in sorted(files)], load_config(None, []), self.progress),
                   graph)
        return [graph]

    def graph_files(self) -> list[Path]:
        if self.config.graph_demos:
            return [Path(p) for p in self.config.graph_demos]
        return [self.demos / "graph" / task_file(t) for t in self.config.tasks]

    def heldout(self) -> list[Path]:
        c = self.config
        for task in c.tasks:
            self._collect(task, self.heldout_file(task), c.heldout_episodes, c.heldout_seed)
        jobs = [(_rerender, dict(source=self.heldout_file(t), out=self.shifted_file(t, s), shift=s, seed=c.shift_seed))
                for t in c.tasks for s in c.shifts]
        first = c.tasks[0]
        jobs += [(_rerender, dict(source=self.heldout_file(first), out=self.level_file(first, f, level),
                                  shift=f"{f}:{level}", seed=c.shift_seed))
                 for f in c.harmonize_factors for level in (1, 2, 3)]
        self._parallel(jobs, "re-render")
        return [self.heldout_file(t) for t in c.tasks] + [job[1]["out"] for job in jobs]

    def retriever(self) -> list[Path]:
        final = self.out / RETRIEVER
        if not final.exists():
            from training.retriever.config import RetrieverTrainConfig
            from training.retriever.train import train_retriever

            config = RetrieverTrainConfig.from_yaml(self.config.retriever_config,
                                                    [f"base={self.config.base}",
                                                     f"steps={self.config.retriever_steps}"])
            run = self.work / "runs" / "retriever"
            train_retriever(config, self.out / GRAPH, [str(p) for p in self.query_files()], run,
                            progress=self.progress, chunk_cache=self._chunk_cache())
            _ship(run, final)
        return [final]

    def statistics(self) -> list[Path]:
        from demos.image_stats import write_image_stats

        heldout = sorted(self.heldout_file(t) for t in self.config.tasks)
        gate_stats, harmonize_stats = self.out / IMAGE_STATS, self.out / HARMONIZE_STATS
        if not gate_stats.exists():
            shifted = sorted(self.shifted_file(t, s) for t in self.config.tasks for s in self.config.shifts)
            write_image_stats(heldout, gate_stats, ("agentview",), clean=heldout, shifted=shifted)
        if not harmonize_stats.exists():
            first = self.config.tasks[0]
            levels = sorted(self.level_file(first, f, lv) for f in self.config.harmonize_factors for lv in (1, 2, 3))
            write_image_stats(heldout, harmonize_stats, ("agentview", "wrist"), clean=heldout, shifted=levels)
        return [gate_stats, harmonize_stats]

    def gate(self) -> list[Path]:
        """Gate v1 on the held-out rows, then the DAgger rounds; the last round's gate is the fitted one."""
        runs, final = self.work / "runs", self.out / GATE
        if final.exists():
            return [final]
        gate = self._train_gate(runs / "gate_v1", runs / "gate_rows0.npz", dagger=[])
        for k in range(1, self.config.dagger_rounds + 1):
            files = self._dagger_round(k, gate)
            gate = self._train_gate(runs / f"gate_dagger{k}", runs / f"gate_rows{k}.npz", dagger=files)
        _ship(gate, final)
        return [final]

    def write_config(self) -> list[Path]:
        """``OUT/r2a.yaml``: the R2A config around the base with the fitted parts (paths relative to itself)."""
        import yaml

        path = self.out / R2A_CONFIG
        if path.exists():  # written once (a hand edit stays)
            return [path]
        config = self.config.deployed_r2a_config(  # the ./ paths stay relative to the written file
            graph=f"./{GRAPH}", retriever=f"./{RETRIEVER}", gate=f"./{GATE}", gate_image_stats=f"./{IMAGE_STATS}",
            harmonize_stats=f"./{HARMONIZE_STATS}")
        text = yaml.safe_dump(config.to_dict(), sort_keys=False)
        header = (f"# R2A around {self.config.base}, fitted by `r2a fit` ({MANIFEST} beside this file says how):\n"
                  f"# --policy r2a:{self.out} (or r2a:{self.out / R2A_CONFIG}); paths starting with ./ are relative to "
                  "this file; the base spec is kept as written.\n")
        write_text_atomic(path, header + text)
        return [path]

    # ---------------------------------------------------------------------------------------------- helpers
    def heldout_file(self, task: str) -> Path:
        return self.demos / "heldout" / task_file(task)

    def shifted_file(self, task: str, shift: str) -> Path:
        return self.demos / "heldout_shift" / task_file(task, "_" + shift.replace(":", ""))

    def level_file(self, task: str, factor: str, level: int) -> Path:
        return self.demos / "heldout_levels" / task_file(task, f"_{factor}{level}")

    def query_files(self) -> list[Path]:
        """The retriever's and the gate's held-out frames: clean, then under each training-split shift (each group
        sorted by file name, as the shell recipe's globs listed them)."""
        return (sorted(self.heldout_file(t) for t in self.config.tasks)
                + sorted(self.shifted_file(t, s) for t in self.config.tasks for s in self.config.shifts))

    def fitting_config(self) -> Path:
        """The R2A config the parts are fitted with: the template with this fit's base, graph and retriever (the
        gate and its image statistics are each round's, set where a round's wrapper drives)."""
        import yaml

        from r2a.wrapper.build import load_r2a_config

        path = self.work / "r2a_fitting.yaml"  # written on every run: it follows the directory if moved
        config = load_r2a_config(self.config.r2a_config, [
            f"base={self.config.base}", f"graph={(self.out / GRAPH).resolve()}",
            f"retriever={(self.out / RETRIEVER).resolve()}"])
        write_text_atomic(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
        return path

    def _collect(self, task: str, path: Path, episodes: int, seed: int, cameras: tuple[str, ...] | None = None,
                 **extra: Any) -> None:
        if path.exists():
            return
        from demos.collect import CollectConfig, collect
        from r2a_core.types import CAMERAS

        collect(CollectConfig(task=task, episodes=episodes, out=path, seed=seed, workers=self.config.workers,
                              image_size=self.config.image_size, cameras=CAMERAS if cameras is None else cameras,
                              start_joint_noise=self.config.start_joint_noise, **extra), progress=self.progress)

    def _parallel(self, jobs: list[tuple[Callable[..., Any], dict[str, Any]]], what: str) -> None:
        """Run the jobs whose output is missing, ``workers`` at once, each in its own process (a simulator each)."""
        todo = [(fn, kwargs) for fn, kwargs in jobs if not Path(kwargs["out"]).exists()]
        if not todo:
            return
        for directory in sorted({Path(kwargs["out"]).parent for _, kwargs in todo}):
            for stale in remove_stale_temporaries(directory):  # a worker killed mid-file by the last stop
                log.info("removed %s, left by an interrupted run", stale)
        with ProcessPoolExecutor(self.config.workers, mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(fn, **kwargs) for fn, kwargs in todo]
            for future in tqdm(futures, desc=what, unit="file", disable=not self.progress):
                future.result()  # a failed job raises here; what finished stays for the resume

    def _train_gate(self, run: Path, rows: Path, dagger: list[Path]) -> Path:
        if not (run / FINISHED).exists():
            self._gate_rows(rows, dagger)
            from gating.config import GateTrainConfig
            from gating.train import train_gate

            config = GateTrainConfig.from_yaml(self.config.gate_config, [f"threads={self.config.gate_threads}",
                                                                         *self.config.gate_overrides])
            train_gate(config, [rows], run, progress=self.progress)
        return run

    def _gate_rows(self, rows: Path, dagger: list[Path]) -> None:
        if rows.exists():
            return
        from gating.data import build_gate_data, save_gate_data
        from r2a_core.visual_ood import load_image_stats
        from training.retriever.offline import build_offline

        _, base, wrapper, episodes = build_offline(self.fitting_config(), [], [str(p) for p in self.query_files()],
                                                   [str(p) for p in dagger])
        stats = self.out / IMAGE_STATS
        data = build_gate_data(episodes, wrapper, base, load_image_stats(stats), progress=self.progress,
                               chunk_cache=self._chunk_cache())
        data["meta"]["image_stats"] = {"path": str(stats), "sha256": sha256_path(stats)}
        save_gate_data(data, rows)

    def _chunk_cache(self) -> ChunkCache:
        """The base's chunks on the frames it was asked (``WORK/base_chunks``): the retriever asks each held-out frame
        once, every gate round reads the answers back."""
        from training.retriever.queries import CHUNK_CACHE_DIR, ChunkCache, base_identity

        return ChunkCache(self.work / CHUNK_CACHE_DIR, base_identity(self.config.base, self.base_artifacts))

    def _dagger_round(self, k: int, gate: Path) -> list[Path]:
        c = self.config
        learner = (f"r2a:{self.fitting_config()}?gate.image_stats={(self.out / IMAGE_STATS).resolve()}"
                   f"&gate.checkpoint={gate.resolve()}")
        folder = self.work / "dagger" / f"round{k}"
        jobs = [(_dagger, dict(task=t, out=folder / task_file(t, "_" + s.replace(":", "")), learner=learner, shift=s,
                               episodes=c.dagger_episodes, seed=c.dagger_seed + 1000 * k, image_size=c.image_size,
                               start_joint_noise=c.start_joint_noise))
                for s in c.dagger_shifts for t in c.rollout_tasks]
        self._parallel(jobs, f"DAgger round {k}")
        names = sorted(Path(kwargs["out"]).name for _, kwargs in jobs)
        return [f for j in range(1, k + 1) for f in (folder.parent / f"round{j}" / name for name in names)
                if f.exists()]


def _ship(run: Path, final: Path) -> None:
    """Copy a finished training run's checkpoint files (not its resume state) into ``final``, atomically."""
    missing = [name for name in CHECKPOINT_FILES if not (run / name).is_file()]
    if missing:
        raise R2AInputError(f"{run}: the finished training run lacks {', '.join(missing)}")
    with atomic_dir(final) as tmp:
        for name in CHECKPOINT_FILES:
            shutil.copyfile(run / name, tmp / name)


def _rerender(source: Path, out: Path, shift: str, seed: int) -> None:
    from demos.rerender import rerender_file

    rerender_file(source, out, shift=shift, seed=seed, progress=False)


def _dagger(task: str, out: Path, learner: str, shift: str, episodes: int, seed: int, image_size: int,
            start_joint_noise: float) -> None:
    from demos.collect import CollectConfig, collect
    from training.dagger import LearnerExecutor

    collect(CollectConfig(task=task, episodes=episodes, out=out, seed=seed, workers=1, image_size=image_size,
                          executor=LearnerExecutor(learner, 0.0), lookahead=8, shift=shift,
                          start_joint_noise=start_joint_noise), progress=False)


__all__ = ["FIT_FORMAT", "FIT_VERSION", "Fitting", "fit"]
