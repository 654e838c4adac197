"""The LIBERO tasks r2a registers: suites, their step limits, each task's target and goal, its stage predicates.

Plain data and predicates, no LIBERO import: the tasks are listed (``r2a demos tasks``, the task registry, the
benchmark configs) on machines without the ``libero`` extra, and building one says what to install
(:mod:`sim.envs.libero_env`). The names, objects and goals are LIBERO's own (its BDDL files, checked against the
installed package by ``tests/test_libero.py``). A task is called ``<suite>/<index>``, e.g. ``libero_spatial/0``,
with LIBERO's task order.

Stages are simulator predicates of the one pick-and-place goal every libero_spatial and libero_object task has
(``On(bowl, plate)``, ``In(item, basket)``): reached, grasped the target, lifted, above the goal, placed (LIBERO's
own success check).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: LIBERO's evaluation step limits per suite (its ``main`` loop; openpi's LIBERO example uses the same)
STEP_LIMITS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520}
#: no-op steps LIBERO's evaluation runs before the policy's first observation (objects settle from the init state)
SETTLE_STEPS = 10
LIBERO_STAGES = ("reached", "grasped", "lifted", "above_goal", "placed")
#: the grip site within this of the target's body origin counts as reached (bowls are grasped at the rim, 4.5 cm out)
LIBERO_REACH_RADIUS = 0.06
#: raised this far above where it rested counts as lifted (a bowl on the ramekin is carried down to the plate)
LIBERO_LIFT_CLEARANCE = 0.02
#: the target's centre within this of the goal's, horizontally, counts as above the goal
ABOVE_GOAL_RADIUS = 0.06

_SPATIAL_SCENE = "pick_up_the_black_bowl_{}_and_place_it_on_the_plate"
_SPATIAL = ("between_the_plate_and_the_ramekin", "next_to_the_ramekin", "from_table_center", "on_the_cookie_box",
            "in_the_top_drawer_of_the_wooden_cabinet", "on_the_ramekin", "next_to_the_cookie_box", "on_the_stove",
            "next_to_the_plate", "on_the_wooden_cabinet")
#: libero_object: (target item, the other items in its scene) in LIBERO's task order
_OBJECT = (("alphabet_soup", ("salad_dressing", "cream_cheese", "milk", "tomato_sauce", "butter")),
           ("cream_cheese", ("alphabet_soup", "milk", "tomato_sauce", "butter", "orange_juice")),
           ("salad_dressing", ("ketchup", "alphabet_soup", "cream_cheese", "milk", "tomato_sauce")),
           ("bbq_sauce", ("chocolate_pudding", "ketchup", "salad_dressing", "alphabet_soup", "cream_cheese")),
           ("ketchup", ("bbq_sauce", "salad_dressing", "alphabet_soup", "cream_cheese", "milk")),
           ("tomato_sauce", ("milk", "butter", "orange_juice", "chocolate_pudding", "bbq_sauce")),
           ("butter", ("tomato_sauce", "orange_juice", "chocolate_pudding", "bbq_sauce", "ketchup")),
           ("milk", ("cream_cheese", "tomato_sauce", "butter", "orange_juice", "chocolate_pudding")),
           ("chocolate_pudding", ("orange_juice", "bbq_sauce", "ketchup", "salad_dressing", "alphabet_soup")),
           ("orange_juice", ("butter", "chocolate_pudding", "bbq_sauce", "ketchup", "salad_dressing")))


@dataclass(frozen=True)
class LiberoTaskSpec:
    """One LIBERO task: where LIBERO keeps it and what moves where."""

    suite: str
    index: int
    #: LIBERO's task name (its BDDL file's stem)
    bddl_name: str
    instruction: str
    #: the object to move and the goal it goes on or into (LIBERO object names)
    target: str
    goal: str
    #: the other movable objects of the scene (grasping one counts as a "wrong object grasped" event)
    distractors: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.suite}/{self.index}"


def _spatial_specs() -> list[LiberoTaskSpec]:
    specs = []
    for index, where in enumerate(_SPATIAL):
        bddl = _SPATIAL_SCENE.format(where)
        specs.append(LiberoTaskSpec("libero_spatial", index, bddl, bddl.replace("_", " "), "akita_black_bowl_1",
                                    "plate_1", ("akita_black_bowl_2", "cookies_1", "glazed_rim_porcelain_ramekin_1")))
    return specs


def _object_specs() -> list[LiberoTaskSpec]:
    specs = []
    for index, (item, others) in enumerate(_OBJECT):
        bddl = f"pick_up_the_{item}_and_place_it_in_the_basket"
        specs.append(LiberoTaskSpec("libero_object", index, bddl, bddl.replace("_", " "), f"{item}_1", "basket_1",
                                    tuple(f"{other}_1" for other in others)))
    return specs


#: every registered LIBERO task by name (``libero_spatial/0`` …)
LIBERO_TASKS: dict[str, LiberoTaskSpec] = {spec.name: spec for spec in _spatial_specs() + _object_specs()}
#: suites r2a registers (libero_goal and libero_10 have goals other than one pick-and-place: not yet)
LIBERO_SUITES = tuple(dict.fromkeys(spec.suite for spec in LIBERO_TASKS.values()))


def suite_task_names(suite: str) -> list[str]:
    """The registered task names of one suite, in LIBERO's order."""
    return [name for name, spec in LIBERO_TASKS.items() if spec.suite == suite]


# ---------------------------------------------------------------------------------------------------- stages
def libero_stages(sim: Any) -> dict[str, bool]:
    """The pick-and-place stages, now (not latched); ``sim`` is a :class:`sim.envs.libero_env.LiberoSimEnv`."""
    spec: LiberoTaskSpec = sim.libero_spec
    target = sim.object_pos(spec.target)
    goal = sim.object_pos(spec.goal)
    grasped = sim.is_grasped(spec.target)
    reached = grasped or float(np.linalg.norm(sim.ee_pos() - target)) < LIBERO_REACH_RADIUS
    lifted = bool(target[2] > sim.initial_object_pos(spec.target)[2] + LIBERO_LIFT_CLEARANCE)
    above_goal = bool(np.linalg.norm(target[:2] - goal[:2]) < ABOVE_GOAL_RADIUS and target[2] > goal[2])
    return {"reached": bool(reached), "grasped": grasped, "lifted": lifted, "above_goal": above_goal,
            "placed": sim.goal_satisfied()}


def libero_success(sim: Any, flags: dict[str, bool]) -> bool:
    """LIBERO's own success check (its BDDL goal), which ``placed`` already evaluated this step."""
    return bool(flags["placed"])
