"""StackThree: a longer multi-stage robosuite task — red cube on green cube, then blue cube on red cube.

robosuite ships no three-block task; this extends its Stack environment with a third cube so the benchmark has
a four-stage task (grasp red, stack red, grasp blue, stack blue) whose early stages can succeed while later
ones fail.
"""

from __future__ import annotations

from robosuite.environments.manipulation.stack import Stack
from robosuite.models.arenas import TableArena
from robosuite.models.objects import BoxObject
from robosuite.models.tasks import ManipulationTask
from robosuite.utils.mjcf_utils import CustomMaterial
from robosuite.utils.placement_samplers import UniformRandomSampler


def _wood(texture: str, name: str) -> CustomMaterial:
    return CustomMaterial(texture=texture, tex_name=name, mat_name=f"{name}_mat",
                          tex_attrib={"type": "cube"},
                          mat_attrib={"texrepeat": "1 1", "specular": "0.4", "shininess": "0.1"})


class StackThree(Stack):
    """Stack with a third (blue) cube; success is judged by the r2a task predicates, not by robosuite."""

    def _load_model(self) -> None:
        super(Stack, self)._load_model()  # robot + base model, skipping Stack's own object setup
        self.robots[0].robot_model.set_base_xpos(
            self.robots[0].robot_model.base_xpos_offset["table"](self.table_full_size[0]))
        arena = TableArena(table_full_size=self.table_full_size, table_friction=self.table_friction,
                           table_offset=self.table_offset)
        arena.set_origin([0, 0, 0])
        self.cubeA = BoxObject(name="cubeA", size_min=[0.02] * 3, size_max=[0.02] * 3, rgba=[1, 0, 0, 1],
                               material=_wood("WoodRed", "redwood"))
        self.cubeB = BoxObject(name="cubeB", size_min=[0.025] * 3, size_max=[0.025] * 3, rgba=[0, 1, 0, 1],
                               material=_wood("WoodGreen", "greenwood"))
        self.cubeC = BoxObject(name="cubeC", size_min=[0.02] * 3, size_max=[0.02] * 3, rgba=[0, 0, 1, 1],
                               material=_wood("WoodBlue", "bluewood"))
        cubes = [self.cubeA, self.cubeB, self.cubeC]
        if self.placement_initializer is not None:
            self.placement_initializer.reset()
            self.placement_initializer.add_objects(cubes)
        else:
            self.placement_initializer = UniformRandomSampler(
                name="ObjectSampler", mujoco_objects=cubes, x_range=[-0.1, 0.1], y_range=[-0.1, 0.1],
                rotation=None, ensure_object_boundary_in_range=False, ensure_valid_placement=True,
                reference_pos=self.table_offset, z_offset=0.01, rng=self.rng)
        self.model = ManipulationTask(mujoco_arena=arena, mujoco_robots=[r.robot_model for r in self.robots],
                                      mujoco_objects=cubes)

    def _setup_references(self) -> None:
        super()._setup_references()
        self.cubeC_body_id = self.sim.model.body_name2id(self.cubeC.root_body)
