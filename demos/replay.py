"""Recomputing privileged quantities from recorded simulator states (robomimic ``states``), without rendering."""

from __future__ import annotations

import numpy as np

from r2a_core.types import Episode


class StateReplayer:
    """Sets recorded states in camera-less simulators (one per task, created on first use) and reads them."""

    def __init__(self) -> None:
        self._sims: dict = {}

    def object_positions(self, episode: Episode) -> tuple[tuple[str, ...], np.ndarray] | None:
        """The task objects' names and world positions ``(T, n_objects, 3)``; None without recorded states."""
        if episode.sim_states is None:
            return None
        sim = self._sim(episode.task)
        names = tuple(sim.task.objects)
        positions = np.zeros((len(episode), len(names), 3))
        for i, state in enumerate(episode.sim_states):
            sim.set_state(state)
            positions[i] = [sim.object_pos(name) for name in names]
        return names, positions

    def _sim(self, task: str):
        if task not in self._sims:
            from sim.envs.backends import make_sim
            from sim.envs.robosuite_env import SimConfig

            self._sims[task] = make_sim(SimConfig(task=task, cameras=()))
        return self._sims[task]

    def close(self) -> None:
        for sim in self._sims.values():
            sim.close()
        self._sims.clear()

    def __enter__(self) -> "StateReplayer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
