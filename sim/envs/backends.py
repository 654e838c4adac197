"""Build the simulator of any registered task: the backend its :class:`sim.envs.tasks.Task` names."""

from __future__ import annotations

from typing import Any

from sim.envs.robosuite_env import SimConfig, SimEnv, env_args_for
from sim.envs.tasks import get_task


def make_sim(config: SimConfig) -> SimEnv:
    """The simulator for ``config.task``: robosuite's built-in tasks, or LIBERO's (the ``libero`` extra)."""
    if get_task(config.task).backend == "libero":
        from sim.envs.libero_env import LiberoSimEnv

        return LiberoSimEnv(config)
    return SimEnv(config)


def task_env_args(config: SimConfig) -> dict[str, Any]:
    """robomimic-style ``env_args`` of the simulator ``config`` describes, without building it."""
    if get_task(config.task).backend == "libero":
        from sim.envs.libero_env import libero_env_args, libero_spec

        return libero_env_args(config, libero_spec(config.task))
    return env_args_for(config)


def task_file_attrs(config: SimConfig) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """What a demonstration file of this task carries besides ``env_args``: its ``problem_info`` (None: the
    writer's default) and further ``data`` attributes — for a LIBERO task those of LIBERO's own files (the BDDL
    file's name and content, the problem class), so that LIBERO's tools read them too."""
    if get_task(config.task).backend == "libero":
        from sim.envs.libero_env import libero_file_attrs, libero_spec

        return libero_file_attrs(libero_spec(config.task))
    return None, {}
