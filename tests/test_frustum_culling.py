"""Frustum culling (sim/envs/rendering.py) on a scene made to catch it out: small spheres strewn across the edges
of a camera's view. A sphere culled while any part of it is in view changes pixels; the test needs no robosuite."""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

SIZE = 48


def _edge_scene(n: int = 240, seed: int = 0) -> str:
    """A camera looking down (fovy 60) and ``n`` spheres near the four sides of its frustum, inside and out."""
    rng = np.random.default_rng(seed)
    tan = np.tan(np.radians(30.0))
    bodies = []
    for i in range(n):
        depth = rng.uniform(0.15, 0.9)
        side = rng.integers(4)
        along = rng.uniform(-1.0, 1.0) * tan * depth
        across = (1.0 if side % 2 else -1.0) * tan * depth + rng.uniform(-0.03, 0.03)
        x, y = (across, along) if side < 2 else (along, across)
        bodies.append(f'<geom type="sphere" size="0.01" pos="{x:.5f} {y:.5f} {1.0 - depth:.5f}" '
                      f'rgba="1 {i / n:.3f} 0.2 1"/>')
    return f"""<mujoco><visual><global offwidth="{SIZE}" offheight="{SIZE}"/></visual>
      <worldbody><light pos="0 0 2" dir="0 0 -1"/><camera name="down" pos="0 0 1" fovy="60"/>
      {''.join(bodies)}</worldbody></mujoco>"""


def _no_shadows(renderer) -> None:
    """As the simulators render (culling is only exact without shadows and reflections)."""
    renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
    renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0


def test_culling_changes_no_pixel_at_the_frustum_edges():
    from sim.envs.rendering import cull_outside_frustum

    model = mujoco.MjModel.from_xml_string(_edge_scene())
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    with mujoco.Renderer(model, SIZE, SIZE) as renderer:
        renderer.update_scene(data, camera="down")
        _no_shadows(renderer)
        full = renderer.render().copy()
        renderer.update_scene(data, camera="down")
        _no_shadows(renderer)
        culled = cull_outside_frustum(renderer.scene, model, aspect=1.0)
        fast = renderer.render().copy()
    assert 0 < culled < model.ngeom  # the scene straddles the edges: some spheres out, some in
    assert np.array_equal(fast, full)


def test_an_orthographic_camera_is_left_alone():
    from sim.envs.rendering import cull_outside_frustum

    xml = _edge_scene(n=20).replace('fovy="60"', 'projection="orthographic" fovy="1"')
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    with mujoco.Renderer(model, SIZE, SIZE) as renderer:
        renderer.update_scene(data, camera="down")
        assert cull_outside_frustum(renderer.scene, model, aspect=1.0) == 0
