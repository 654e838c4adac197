"""What ``r2a fit`` makes and how: every field documented once (``r2a fit --help`` shows them), YAML in
``configs/fit/``, ``--set field=value`` overrides.

Every seed a fit uses is a training seed: it draws episodes ``seed … seed + n − 1`` (DAgger round ``k``: from
``dagger_seed + 1000·k``), and the whole range must lie below 100000, where the benchmark's test seeds start —
a config that reaches past it is refused before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from r2a_core.config import TypedConfig
from r2a_core.errors import R2AInputError

#: the first benchmark (test) seed: a fit never draws an episode at or above it
TEST_SEED_START = 100_000


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
    dagger_episodes: int = 1
    """episodes per task and shift, per round"""
    dagger_seed: int = 62000
    """round k's episodes draw seeds dagger_seed + 1000·k …"""
    r2a_config: str = "configs/r2a/builtin.yaml"
    """the R2A settings the parts are fitted and measured with (retrieval, gate bounds, fallbacks)"""
    deploy: tuple[str, ...] = ("harmonize.enabled=true", "gate.holding_scale=0")
    """R2A overrides written into the fitted config (default: the published variant, r2a-harmonize-hold)"""
    workers: int = 2
    """simulator processes (collections, re-renders and DAgger files run this many at once)"""

    def validate(self) -> None:
        if not self.tasks:
            raise R2AInputError("tasks: give at least one task")
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
        for name, first, last in self.seed_ranges():
            if first < 0 or last >= TEST_SEED_START:
                raise R2AInputError(f"{name}: draws seeds {first}…{last}; a fit trains on training seeds only, 0 … "
                                    f"{TEST_SEED_START - 1} (the benchmark's test seeds start at {TEST_SEED_START})")
        for spec in (*self.shifts, *self.dagger_shifts):
            if ":" not in spec:
                raise R2AInputError(f"shift '{spec}': expected FACTOR:LEVEL, e.g. camera:2")

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


__all__ = ["FitConfig", "TEST_SEED_START"]
