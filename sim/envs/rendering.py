"""Offscreen-rendering setup for MuJoCo: choose a headless GL backend and fast visual settings.

Reflections and anti-aliasing cost most of the render time and barely change a 128 px image
(docs/architecture.md, "Platform notes"), so they are off unless asked for; shadows too.

On a software renderer a frame's cost is its triangles, not its pixels (a LIBERO scene holds ~300k mesh faces:
40-60 ms per camera at 64 px and at 128 px alike). With shadows and reflections off, a geom whose bounding sphere
lies wholly outside the camera's view frustum cannot change a pixel, so :func:`render_culled` leaves such geoms out
of the frame: the same image, bit for bit, in less time (most for the wrist camera, which sees a small part of
the scene).
"""

from __future__ import annotations

import functools
import logging
import os

import numpy as np

log = logging.getLogger(__name__)


def configure_headless_gl() -> None:
    """Pick EGL unless the user chose a backend; must run before robosuite/mujoco create a GL context."""
    logging.getLogger("OpenGL").setLevel(logging.WARNING)
    os.environ.setdefault("MUJOCO_GL", "egl")
    if os.environ["MUJOCO_GL"] in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])


def apply_render_quality(sim, *, shadows: bool, reflections: bool, antialias: bool, culling: bool = True) -> None:
    """Set scene flags on the offscreen context; rebuild its buffers if the multisampling changes; with
    ``culling``, leave the geoms outside the view frustum out of each frame while nothing off-screen can show."""
    import mujoco

    ctx = sim._render_context_offscreen
    if ctx is None:
        return
    ctx.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = int(shadows)
    ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = int(reflections)
    samples = 4 if antialias else 0
    if sim.model.vis.quality.offsamples != samples:
        sim.model.vis.quality.offsamples = samples
        ctx.con.free()
        ctx._set_mujoco_context_and_buffers()
    set_frustum_culling(ctx, enabled=culling and not shadows and not reflections)


def set_frustum_culling(ctx, enabled: bool) -> None:
    """Route robosuite's offscreen context ``ctx`` through :func:`render_culled` (or back to its own render)."""
    if enabled:
        ctx.render = functools.partial(render_culled, ctx)
    else:
        ctx.__dict__.pop("render", None)


def render_culled(ctx, width: int, height: int, camera_id: int | None = None, segmentation: bool = False) -> None:
    """robosuite's ``MjRenderContext.render`` with the geoms outside the view frustum left out of the scene."""
    import mujoco

    viewport = mujoco.MjrRect(0, 0, width, height)
    if width > ctx.con.offWidth or height > ctx.con.offHeight:
        ctx.update_offscreen_size(max(width, ctx.model.vis.global_.offwidth),
                                  max(height, ctx.model.vis.global_.offheight))
    if camera_id is not None:
        ctx.cam.type = mujoco.mjtCamera.mjCAMERA_FREE if camera_id == -1 else mujoco.mjtCamera.mjCAMERA_FIXED
        ctx.cam.fixedcamid = camera_id
    mujoco.mjv_updateScene(ctx.model._model, ctx.data._data, ctx.vopt, ctx.pert, ctx.cam, mujoco.mjtCatBit.mjCAT_ALL,
                           ctx.scn)
    if not (ctx.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] or ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION]):
        cull_outside_frustum(ctx.scn, ctx.model._model, aspect=width / height)
    flags = (mujoco.mjtRndFlag.mjRND_SEGMENT, mujoco.mjtRndFlag.mjRND_IDCOLOR)
    for flag in flags:
        ctx.scn.flags[flag] = int(segmentation)
    mujoco.mjr_render(viewport=viewport, scn=ctx.scn, con=ctx.con)
    for flag in flags:
        ctx.scn.flags[flag] = 0


#: metres of slack on every frustum test, far above float error and far below any geom's size
CULL_MARGIN_M = 1e-3


def cull_outside_frustum(scn, model, aspect: float) -> int:
    """Turn the model geoms of ``scn`` whose bounding sphere lies wholly outside the view frustum into empty geoms
    (drawn as nothing); return how many.

    The view is the two eyes' average, as ``mjr_render`` draws a mono scene (the eyes sit ``ipd`` apart); the
    sphere is the one around the geom's bounding box (``geom_aabb``: a mesh's box need not be centred on its
    frame). A perspective camera only: an orthographic one, or one with an explicit frustum width, is left alone;
    so are decorations (sites, markers)."""
    import mujoco

    cam = mujoco.mjv_averageCamera(scn.camera[0], scn.camera[1])
    if cam.orthographic or cam.frustum_width or scn.ngeom == 0:
        return 0
    geoms = [scn.geoms[i] for i in range(scn.ngeom)]
    ids = np.array([g.objid if g.objtype == mujoco.mjtObj.mjOBJ_GEOM else -1 for g in geoms])
    candidates = np.flatnonzero(ids >= 0)
    if not len(candidates):
        return 0
    aabb = np.asarray(model.geom_aabb)[ids[candidates]]  # per geom: centre (3), half sizes (3), geom frame
    radius = np.linalg.norm(aabb[:, 3:], axis=1) + CULL_MARGIN_M
    rotations = np.array([np.asarray(geoms[i].mat, dtype=np.float64).reshape(3, 3) for i in candidates])
    centres = np.array([geoms[i].pos for i in candidates]) + np.einsum("nij,nj->ni", rotations, aabb[:, :3])
    forward, up = np.asarray(cam.forward, dtype=np.float64), np.asarray(cam.up, dtype=np.float64)
    axes = np.stack([np.cross(forward, up), up, forward])  # camera frame: right, up, forward
    near, top, bottom = float(cam.frustum_near), float(cam.frustum_top), float(cam.frustum_bottom)
    half_width = 0.5 * aspect * (top - bottom)
    left, right = cam.frustum_center - half_width, cam.frustum_center + half_width
    # inward normals of the four side planes (through the eye) and the near plane, in the camera frame
    normals = np.array([[0.0, -near, top], [0.0, near, -bottom], [-near, 0.0, right], [near, 0.0, -left]])
    normals = np.vstack([normals / np.linalg.norm(normals, axis=1, keepdims=True), [0.0, 0.0, 1.0]])
    offsets = np.array([0.0, 0.0, 0.0, 0.0, -near])
    in_camera = (centres - np.asarray(cam.pos)) @ axes.T
    outside = ((in_camera @ normals.T + offsets) < -radius[:, None]).any(axis=1)
    for i in candidates[outside]:
        geoms[i].type = mujoco.mjtGeom.mjGEOM_NONE
    return int(outside.sum())
