"""Build the simulator of any registered task: the backend its :class:`sim.envs.tasks.Task` names."""

from __future__ import annotations

from sim.envs.robosuite_env import SimConfig, SimEnv
from sim.envs.tasks import get_task


def make_sim(config: SimConfig) -> SimEnv:
    """The simulator for ``config.task``: robosuite's built-in tasks, or LIBERO's (the ``libero`` extra)."""
    if get_task(config.task).backend == "libero":
        from sim.envs.libero_env import LiberoSimEnv

        return LiberoSimEnv(config)
    return SimEnv(config)
