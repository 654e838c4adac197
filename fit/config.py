"""What ``r2a fit`` makes and how: every field documented once (``r2a fit --help`` shows them), YAML in
``configs/fit/``, ``--set field=value`` overrides.

Every seed a fit uses is a training seed: it draws episodes ``seed … seed + n − 1`` (DAgger round ``k``: from
``dagger_seed + 1000·k``), and the whole range must lie below 100000, where the benchmark's test seeds start —
a config that reaches past it is refused before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from r2a_core.config import TypedConfig
from r2a_core.errors import R2AInputError
from r2a_core.seeds import TEST_SEED_START

if TYPE_CHECKING:
    from r2a.wrapper.config import R2AConfig

#: the image factors whose renders fit the photometric detectors (at least one must be among shifts)
PHOTOMETRIC_FACTORS = ("light", "background")
#: fields that change how fast a fit runs, not what it makes: a resumed fit may change them
EXECUTION_FIELDS = ("workers", "gate_threads")
#: DAgger round k draws seeds dagger_seed + 1000·k …: at most this many episodes per round keeps rounds apart
ROUND_STRIDE = 1000
#: the fit's steps, in order (each skipped when its output exists)
STEPS = ("graph", "heldout", "statistics", "retriever", "gate", "config")
#: the steps that never query the base: a fit stopped after them (``--until statistics``) may go on with another base
BASE_FREE_STEPS = ("graph", "heldout", "statistics")
#: fields that only a later step reads, with the first step that does: a resumed fit may change such a field while
#: that step has not run (the base: a fit's data is made while the policy still trains; the deployed settings: chosen
#: on training seeds once the parts exist). Any other result field must stay as the fit started.
FIRST_READ_BY = {"base": STEPS[len(BASE_FREE_STEPS)], "retriever_config": "retriever", "retriever_steps": "retriever",
                 "gate_config": "gate", "gate_overrides": "gate", "dagger_rounds": "gate", "dagger_tasks": "gate",
                 "dagger_shifts": "gate", "dagger_episodes": "gate", "dagger_seed": "gate", "deploy": "config"}


@dataclass(frozen=True)
class FitConfig(TypedConfig):
    """R2A's parts for one frozen base policy on a set of simulated tasks with scripted experts."""

    CONFIG_WHAT: ClassVar[str] = "fit config"
    SHIPPED_KIND: ClassVar[str] = "fit"

    base: str = "builtin"
    """the frozen base policy the parts are fitted to: a registry name, builtin:CKPT, openpi:ws://HOST:PORT,
    lerobot:DIR — the retriever learns from its chunks, the gate from where it goes wrong"""
    tasks: tuple[str, ...] = ("Lift",)
    """tasks with a simulator and a scripted expert (built-in or LIBERO names)"""
    graph_demos: tuple[str, ...] = ()
    """demonstration files (HDF5 or LeRobot v3) for the graph; empty: collect graph_episodes per task"""
    graph_episodes: int = 10
    """expert episodes per task for the graph (state only), seeds graph_seed…, when graph_demos is empty"""
    graph_seed: int = 0
    """seed of the graph's first expert episode (episode i: graph_seed + i)"""
    heldout_episodes: int = 4
    """expert episodes per task held out of the graph (with cameras): the retriever's and the gate's queries"""
    heldout_seed: int = 20000
    """seed of the first held-out episode"""
    image_size: int = 128
    """camera side in pixels of the held-out demos and DAgger rollouts (what the base sees at run time)"""
    start_joint_noise: float = 0.0
    """LIBERO: the arm start spread (rad per joint) of every collected episode (sim.envs SimConfig)"""
    shifts: tuple[str, ...] = ("camera:2", "light:3", "background:2", "noise:2")
    """training-split shifts (FACTOR:LEVEL, observation-only) the held-out demos are re-rendered under"""
    shift_seed: int = 5000
    """episode i of a re-render draws the shift with shift_seed + i"""
    harmonize_factors: tuple[str, ...] = ("light", "background", "camera", "noise")
    """factors whose three levels re-render the first task's held-out demos for harmonization's statistics"""
    retriever_config: str = "configs/retriever/default.yaml"
    """the retriever's training config (its base and steps are this fit's)"""
    retriever_steps: int = 3000
    """the retriever's optimizer steps"""
    gate_config: str = "configs/gate/default.yaml"
    """the gate's training config (its training_shifts must admit this fit's shifts)"""
    gate_threads: int = 1
    """threads of the gate's training (a small MLP: one is fastest on a shared CPU)"""
    gate_overrides: tuple[str, ...] = ()
    """FIELD=VALUE overrides of the gate's training config (e.g. epochs=20)"""
    dagger_rounds: int = 2
    """online rounds: the wrapper with the current gate drives under each dagger shift, the expert labels every
    state it reaches with its own next 8 actions, the gate is retrained on all rows (0: the offline gate only)"""
    dagger_tasks: tuple[str, ...] = ()
    """tasks of the DAgger rounds (empty: every task)"""
    dagger_shifts: tuple[str, ...] = ("camera:2", "light:3", "background:2", "noise:2", "layout:2", "robot_init:2")
    """FACTOR:LEVEL shifts the DAgger rounds drive under (the gate's training split must admit each)"""
    dagger_episodes: int = 1
    """episodes per task and shift, per round"""
    dagger_seed: int = 62000
    """round k's episodes draw seeds dagger_seed + 1000·k …"""
    r2a_config: str = "configs/r2a/builtin.yaml"
    """the R2A settings the parts are fitted and measured with (retrieval, gate bounds, fallbacks)"""
    deploy: tuple[str, ...] = ("harmonize.enabled=true", "gate.holding_scale=0")
    """R2A overrides written into the fitted config (default: harmonized images, the base alone while it holds the
    gripper closed)"""
    workers: int = 2
    """simulator processes (collections, re-renders and DAgger files run this many at once)"""

    def validate(self) -> None:
        if not self.tasks:
            raise R2AInputError("tasks: give at least one task")
        repeated = sorted({t for t in self.tasks if self.tasks.count(t) > 1})
        if repeated:
            raise R2AInputError(f"tasks: {repeated} appear more than once")
        unknown = [t for t in self.dagger_tasks if t not in self.tasks]
        if unknown:
            raise R2AInputError(f"dagger_tasks {unknown}: not among tasks {list(self.tasks)}")
        counts = {"graph_episodes": self.graph_episodes, "heldout_episodes": self.heldout_episodes,
                  "workers": self.workers, "retriever_steps": self.retriever_steps}
        if any(n < 1 for n in counts.values()):
            raise R2AInputError(f"{counts}: each must be >= 1")
        if self.dagger_rounds < 0 or (self.dagger_rounds and self.dagger_episodes < 1):
            raise R2AInputError(f"dagger_rounds={self.dagger_rounds}, dagger_episodes={self.dagger_episodes}: "
                                "expected rounds >= 0 and, with rounds, episodes >= 1")
        if self.dagger_episodes > ROUND_STRIDE:
            raise R2AInputError(f"dagger_episodes={self.dagger_episodes}: at most {ROUND_STRIDE} (round k draws seeds "
                                f"dagger_seed + {ROUND_STRIDE}·k …, and rounds must not share episodes)")
        ranges = self.seed_ranges()
        for i, (name, first, last) in enumerate(ranges):
            for other, lo, hi in ranges[i + 1:]:
                if name != "shift_seed" and other != "shift_seed" and first <= hi and lo <= last:
                    raise R2AInputError(f"{name} ({first}…{last}) and {other} ({lo}…{hi}) overlap: held-out, graph "
                                        "and DAgger episodes must be different episodes")
        for name, first, last in ranges:
            if first < 0 or last >= TEST_SEED_START:
                raise R2AInputError(f"{name}: draws seeds {first}…{last}; a fit trains on training seeds only, 0 … "
                                    f"{TEST_SEED_START - 1} (the benchmark's test seeds start at {TEST_SEED_START})")
        for spec in (*self.shifts, *self.dagger_shifts):
            if ":" not in spec:
                raise R2AInputError(f"shift '{spec}': expected FACTOR:LEVEL, e.g. camera:2")
        for field_name, factors in (("shifts", [s.partition(":")[0] for s in self.shifts]),
                                    ("harmonize_factors", list(self.harmonize_factors))):
            if not set(factors) & set(PHOTOMETRIC_FACTORS):
                raise R2AInputError(f"{field_name} {factors}: the detectors are fitted against a photometric shift; "
                                    f"include one of {', '.join(PHOTOMETRIC_FACTORS)}")

    def check_parts(self, build_base: bool = True) -> dict[str, dict[str, str]] | None:
        """What :meth:`validate` cannot see from the fields alone, checked before a fit runs (not hours into it):
        every task can be simulated here (LIBERO's need the extra), every shift is a factor and level the simulator
        knows, the gate's training split admits them, the base builds (a server answers), and the retriever, gate and
        R2A configs load with this fit's settings. Returns the files the base declares it loaded (role → path and
        sha256; a server announces its checkpoint's), which the fit records and holds a resume to — or None without
        ``build_base`` (a fit that runs only :data:`BASE_FREE_STEPS`: its policy may still be training, its server
        not up yet)."""
        from gating.config import GateTrainConfig
        from r2a.wrapper.build import load_r2a_config
        from sim.envs.libero_env import libero_assets_dir
        from sim.envs.tasks import get_task
        from sim.shifts import check_level, get_factor
        from training.retriever.config import RetrieverTrainConfig

        if any(get_task(task).backend == "libero" for task in self.tasks):
            libero_assets_dir()  # a clear error naming make install-libero, not one hours in

        for spec in (*self.shifts, *self.dagger_shifts):
            factor, _, level = spec.partition(":")
            get_factor(factor.strip())
            check_level(int(level) if level.strip().isdigit() else level)
        for factor in self.harmonize_factors:
            get_factor(factor)
        gate = GateTrainConfig.from_yaml(self.gate_config, [f"threads={self.gate_threads}", *self.gate_overrides])
        outside = sorted(s for s in {*self.shifts, *self.dagger_shifts} if s not in gate.training_shifts)
        if outside:
            raise R2AInputError(f"{outside}: not in the gate's training split {gate.training_shifts} "
                                f"({self.gate_config}); the gate refuses data of other shifts")
        artifacts = self._check_base() if build_base else None
        RetrieverTrainConfig.from_yaml(self.retriever_config, [f"base={self.base}", f"steps={self.retriever_steps}"])
        load_r2a_config(self.r2a_config, [f"base={self.base}", *self.deploy])
        return artifacts

    def deployed_r2a_config(self, *, graph: str, retriever: str, gate: str, gate_image_stats: str,
                            harmonize_stats: str) -> R2AConfig:
        """The R2A config this fit deploys: the template around the base with these parts, the
        deploy overrides last. The fit's config step writes it with its own parts; a shipped preset made by a fit is
        checked against it with the shipped ones."""
        from r2a.wrapper.build import load_r2a_config

        return load_r2a_config(self.r2a_config, [
            f"base={self.base}", f"graph={graph}", f"retriever={retriever}", "gate.kind=learned",
            f"gate.checkpoint={gate}", f"gate.image_stats={gate_image_stats}",
            f"harmonize.image_stats={harmonize_stats}", *self.deploy])

    def _check_base(self) -> dict[str, dict[str, str]]:
        """Build the base once: a wrong spec, a missing checkpoint or a server that does not answer fails now (the
        retriever step, an hour or more into the fit, is the first to query it). Returns what it loaded."""
        from r2a.policies.registry import make_policy
        from r2a_core.provenance import policy_artifacts

        try:
            policy = make_policy(self.base, sim=None, seed=0)
        except R2AInputError:
            raise
        except Exception as err:  # a refused connection, a server error: say which base and what to do
            raise R2AInputError(f"base {self.base}: cannot be built ({type(err).__name__}: {err}); if it is a "
                                "server, start it first and keep it up for the whole fit") from err
        artifacts = policy_artifacts(policy)
        close = getattr(policy, "close", None)
        if callable(close):
            close()
        return artifacts

    def result_fields(self) -> dict:
        """The config without the fields that change only how fast it runs (what a resumed fit must keep)."""
        return {k: v for k, v in self.to_dict().items() if k not in EXECUTION_FIELDS}

    def seed_ranges(self) -> list[tuple[str, int, int]]:
        """Every seed range the fit draws: (what, first, last)."""
        ranges = [("heldout_seed", self.heldout_seed, self.heldout_seed + self.heldout_episodes - 1),
                  ("shift_seed", self.shift_seed, self.shift_seed + self.heldout_episodes - 1)]
        if not self.graph_demos:
            ranges.append(("graph_seed", self.graph_seed, self.graph_seed + self.graph_episodes - 1))
        for k in range(1, self.dagger_rounds + 1):
            first = self.dagger_seed + 1000 * k
            ranges.append((f"dagger_seed (round {k})", first, first + self.dagger_episodes - 1))
        return ranges

    @property
    def rollout_tasks(self) -> tuple[str, ...]:
        return self.dagger_tasks or self.tasks


__all__ = ["BASE_FREE_STEPS", "EXECUTION_FIELDS", "FIRST_READ_BY", "FitConfig", "PHOTOMETRIC_FACTORS", "STEPS"]
