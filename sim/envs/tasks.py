"""The task registry: which simulator and scene, the instruction, the stages and the success check.

The built-in robosuite tasks (Lift, Stack, PickPlaceCan, StackThree) are defined here; the LIBERO tasks
(``libero_spatial/0`` … ``libero_object/9``) come from :mod:`sim.envs.libero_tasks` and are built by the LIBERO
backend. ``Task.backend`` says which; :func:`sim.envs.backends.make_sim` builds either.

Stages are simulator predicates evaluated every step; the benchmark's stage tracker latches them (once a stage
was reached it counts as reached). Object placement is wider than robosuite's defaults (±12 cm, random yaw for
cubes) so that a policy must look at the scene to succeed (docs/architecture.md, "The simulator").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from r2a_core.config import unknown_name_error
from sim.envs.libero_tasks import (
    LIBERO_STAGES,
    LIBERO_TASKS,
    STEP_LIMITS,
    LiberoTaskSpec,
    libero_stages,
    libero_success,
)

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

#: cube half-sizes (m) used by the stacking predicates
RED_HALF, GREEN_HALF, BLUE_HALF = 0.02, 0.025, 0.02
LIFT_CLEARANCE = 0.04
REACH_RADIUS = 0.03


@dataclass(frozen=True)
class Task:
    """A built-in task. ``stage_fn`` returns the current (unlatched) stage predicates in stage order."""

    name: str
    env_name: str
    instruction: str
    horizon: int
    stages: tuple[str, ...]
    placement: tuple[float, float] | None
    stage_fn: Callable[["SimEnv"], dict[str, bool]]
    #: success from the simulator and the stage predicates just evaluated (so they are computed once a step)
    success_fn: Callable[["SimEnv", dict[str, bool]], bool]
    objects: tuple[str, ...]
    env_kwargs: tuple[tuple[str, Any], ...] = ()
    #: objects whose grasp is a mistake (the benchmark counts "wrong object grasped" events)
    wrong_objects: tuple[str, ...] = ()
    #: the simulator backend that builds it: "robosuite" (:mod:`sim.envs.robosuite_env`) or "libero"
    #: (:mod:`sim.envs.libero_env`, the ``libero`` extra)
    backend: str = "robosuite"


def _reached(sim: "SimEnv", obj: str) -> bool:
    return float(np.linalg.norm(sim.ee_pos() - sim.object_pos(obj))) < REACH_RADIUS


def _lifted(sim: "SimEnv", obj: str) -> bool:
    """Raised by the clearance above where the object rested after reset."""
    return bool(sim.object_pos(obj)[2] > sim.initial_object_pos(obj)[2] + LIFT_CLEARANCE)


def _on_top(sim: "SimEnv", top: str, bottom: str, top_half: float, bottom_half: float) -> bool:
    """``top`` rests on ``bottom``: right height, centred within the bottom face, touching, not held."""
    p_top, p_bottom = sim.object_pos(top), sim.object_pos(bottom)
    height_ok = abs(p_top[2] - p_bottom[2] - (top_half + bottom_half)) < 0.01
    centred = float(np.linalg.norm(p_top[:2] - p_bottom[:2])) < bottom_half
    return bool(height_ok and centred and sim.in_contact(top, bottom) and not sim.is_grasped(top))


def _lift_stages(sim: "SimEnv") -> dict[str, bool]:
    return {"reached": _reached(sim, "cube"), "grasped": sim.is_grasped("cube"), "lifted": _lifted(sim, "cube")}


def _stack_stages(sim: "SimEnv") -> dict[str, bool]:
    return {"reached": _reached(sim, "cubeA"), "grasped": sim.is_grasped("cubeA"),
            "lifted": _lifted(sim, "cubeA"), "stacked": _on_top(sim, "cubeA", "cubeB", RED_HALF, GREEN_HALF)}


def _can_stages(sim: "SimEnv") -> dict[str, bool]:
    return {"reached": _reached(sim, "Can"), "grasped": sim.is_grasped("Can"), "lifted": _lifted(sim, "Can"),
            "placed": sim.can_in_bin()}


def _stack_three_stages(sim: "SimEnv") -> dict[str, bool]:
    red_on_green = _on_top(sim, "cubeA", "cubeB", RED_HALF, GREEN_HALF)
    return {"grasped_red": sim.is_grasped("cubeA"), "stacked_red": red_on_green,
            "grasped_blue": sim.is_grasped("cubeC"),
            "stacked_blue": red_on_green and _on_top(sim, "cubeC", "cubeA", BLUE_HALF, RED_HALF)}


def _last_stage(sim: "SimEnv", flags: dict[str, bool]) -> bool:
    """Success is the final stage holding *now* (not latched): the object must stay where it belongs."""
    return bool(list(flags.values())[-1])


def _can_success(sim: "SimEnv", flags: dict[str, bool]) -> bool:
    return bool(sim.raw_env._check_success())


#: the built-in robosuite tasks (the shipped base policy, graph and gate were made on these)
BUILTIN_TASKS: dict[str, Task] = {
    "Lift": Task("Lift", "Lift", "pick up the red cube", 150, ("reached", "grasped", "lifted"), (0.12, 0.12),
                 _lift_stages, _last_stage, ("cube",)),
    "Stack": Task("Stack", "Stack", "stack the red cube on the green cube", 250,
                  ("reached", "grasped", "lifted", "stacked"), (0.12, 0.12),
                  _stack_stages, _last_stage, ("cubeA", "cubeB"), wrong_objects=("cubeB",)),
    "PickPlaceCan": Task("PickPlaceCan", "PickPlaceCan", "put the can into the bin", 300,
                         ("reached", "grasped", "lifted", "placed"), None,
                         _can_stages, _can_success, ("Can",)),
    "StackThree": Task("StackThree", "StackThree",
                       "stack the red cube on the green cube, then the blue cube on the red cube", 450,
                       ("grasped_red", "stacked_red", "grasped_blue", "stacked_blue"), (0.12, 0.12),
                       _stack_three_stages, _last_stage, ("cubeA", "cubeB", "cubeC"),
                       wrong_objects=("cubeB",)),
}




def _libero_task(spec: LiberoTaskSpec) -> Task:
    return Task(spec.name, spec.bddl_name, spec.instruction, STEP_LIMITS[spec.suite], LIBERO_STAGES, None,
                libero_stages, libero_success, (spec.target, spec.goal) + spec.distractors,
                wrong_objects=spec.distractors, backend="libero")


#: every registered task: the built-in ones first, then LIBERO's (listed without the extra; building one needs it)
TASKS: dict[str, Task] = {**BUILTIN_TASKS, **{name: _libero_task(spec) for name, spec in LIBERO_TASKS.items()}}

_BY_FOLDED_NAME: dict[str, Task] = {name.casefold(): task for name, task in TASKS.items()}


def get_task(name: str) -> Task:
    """Look a task up by name, in any case (``lift`` is Lift); an unknown name lists the valid ones."""
    task = TASKS.get(name) or _BY_FOLDED_NAME.get(str(name).casefold())
    if task is None:
        raise unknown_name_error("task", str(name), TASKS)
    return task


def canonical_task_name(name: str) -> str:
    """The registered spelling of a task name given in any case (``stackthree`` → ``StackThree``)."""
    return get_task(name).name


def task_file_stem(task: str) -> str:
    """A task name as a file-name part: ``libero_spatial/0`` → ``libero_spatial_0``."""
    return str(task).replace("/", "_")
