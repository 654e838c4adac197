"""Offscreen-rendering setup for MuJoCo: choose a headless GL backend and fast visual settings.

Reflections and anti-aliasing cost most of the render time and barely change a 128 px image
(docs/architecture.md, "Platform notes"), so they are off unless asked for; shadows too.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def configure_headless_gl() -> None:
    """Pick EGL unless the user chose a backend; must run before robosuite/mujoco create a GL context."""
    logging.getLogger("OpenGL").setLevel(logging.WARNING)
    os.environ.setdefault("MUJOCO_GL", "egl")
    if os.environ["MUJOCO_GL"] in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])


def apply_render_quality(sim, *, shadows: bool, reflections: bool, antialias: bool) -> None:
    """Set scene flags on the offscreen context; rebuild its buffers if the multisampling changes."""
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
