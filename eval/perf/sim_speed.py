"""Simulator speed per task and image size: how many control steps a second one process gets, and what a build and a
reset cost — the numbers that size a benchmark or a demonstration collection.

Each task's scripted expert drives the arm (so contacts, grasps and the controller cost what they cost in a real
episode); only ``sim.step`` is timed, the expert's labels and the resets are not. One simulator lives at a time
(a LIBERO scene holds ~2.5 GB): each is closed before the next is built. ``0`` as a size means no cameras
(state only). The machine's load average is recorded with the result: on a shared machine the numbers are upper
bounds on the time, and two rows compare only when measured in the same run. ``culling=(True, False)`` measures
each camera row with and without frustum culling (the same pixels; sim/envs/rendering.py) side by side.
``render_every=(1, 8)`` measures each camera row rendering every step and only every 8th (``sim.step(...,
render_images=False)`` in between, as a benchmark episode of a policy executing 8-step chunks renders), side by side.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.provenance import cpu_model
from r2a_core.types import STATE_STEP

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
#: one task per suite r2a registers: the built-in robosuite scenes and LIBERO's two suites
DEFAULT_TASKS = ("Lift", "libero_spatial/0", "libero_object/0")
DEFAULT_SIZES = (0, 64, 128)


def measure_sim_speed(tasks: tuple[str, ...] = DEFAULT_TASKS, sizes: tuple[int, ...] = DEFAULT_SIZES,
                      steps: int = 200, seed: int = 0, culling: tuple[bool, ...] = (True,),
                      render_every: tuple[int, ...] = (1,)) -> dict[str, Any]:
    """Time ``steps`` expert-driven control steps on each task at each image size (0: no cameras), with frustum
    culling on and/or off (``culling``; a camera-less row has nothing to cull and runs once), rendering every
    ``n``-th step for each ``n`` of ``render_every``."""
    if steps < 1:
        raise R2AInputError(f"steps={steps}: expected at least 1")
    if not render_every or min(render_every) < 1:
        raise R2AInputError(f"render_every={list(render_every)}: expected step counts of at least 1")
    bad = [s for s in sizes if s != 0 and not 8 <= s <= 1024]
    if bad:
        raise R2AInputError(f"--sizes {bad}: expected 0 (no cameras) or 8..1024 pixels")
    if not culling:
        raise R2AInputError("culling: expected True, False or both")
    rows = [_measure_one(task, size, steps, seed, cull, every) for task in tasks for size in sizes
            for cull in (culling[:1] if size == 0 else culling) for every in (render_every[:1] if size == 0
                                                                              else render_every)]
    return {"format_version": FORMAT_VERSION, "rows": rows, "steps": steps, "seed": seed, "machine": _machine()}


def _measure_one(task: str, size: int, steps: int, seed: int, culling: bool, render_every: int = 1) -> dict[str, Any]:
    from demos.experts.scripted import make_expert
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig
    from sim.envs.tasks import get_task

    spec = get_task(task)
    config = SimConfig(task=task, cameras=() if size == 0 else ("agentview", "wrist"), image_size=size or 128,
                       frustum_culling=culling)
    t0 = time.perf_counter()
    sim = make_sim(config)
    build_s = time.perf_counter() - t0
    step_s: list[float] = []
    reset_s: list[float] = []
    try:
        episode = 0
        while len(step_s) < steps:
            t0 = time.perf_counter()
            obs = sim.reset(seed + episode)
            reset_s.append(time.perf_counter() - t0)
            expert = make_expert(sim)
            for t in range(sim.horizon):
                action = np.asarray(expert.infer({**obs, STATE_STEP: t})["actions"], dtype=np.float32)[0]
                t0 = time.perf_counter()
                render = render_every == 1 or (t + 1) % render_every == 0
                obs = sim.step(sim.action_space.clip(action), render_images=render)
                step_s.append(time.perf_counter() - t0)
                if len(step_s) >= steps or sim.evaluate()[1]:
                    break
            episode += 1
    finally:
        sim.close()
    ms = 1e3 * np.asarray(step_s)
    row = {"task": spec.name, "backend": spec.backend, "image_size": size, "cameras": list(config.cameras),
           "culling": bool(culling and size), "render_every": render_every if size else None,
           "steps_per_s": float(1e3 / ms.mean()), "step_ms_mean": float(ms.mean()),
           "step_ms_p50": float(np.median(ms)), "step_ms_p95": float(np.percentile(ms, 95)),
           "build_s": build_s, "reset_s_mean": float(np.mean(reset_s)), "episodes": len(reset_s)}
    log.info("%s at %s%s, rendering every %s step(s): %.1f steps/s (build %.1f s, reset %.2f s)", spec.name,
             size or "no cameras", ", culling" if row["culling"] else "", render_every, row["steps_per_s"], build_s,
             row["reset_s_mean"])
    return row


def _machine() -> dict[str, Any]:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "load_avg": list(os.getloadavg())}


def format_table(result: dict[str, Any]) -> str:
    """The measurement as a Markdown table."""
    load = result["machine"]["load_avg"][0]
    lines = [f"Simulator speed, one process, the scripted expert driving; {result['steps']} timed steps per row; "
             f"load {load:.2f} on {result['machine']['cores']} cores", "",
             "| task | backend | image px | culling | renders | steps/s | step ms p50 / p95 | build s | reset s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        px = r["image_size"] or "none"
        cull = "—" if not r["image_size"] else ("on" if r.get("culling") else "off")
        every = r.get("render_every")
        renders = "—" if not every else ("every step" if every == 1 else f"every {every}th")
        lines.append(f"| {r['task']} | {r['backend']} | {px} | {cull} | {renders} | {r['steps_per_s']:.1f} | "
                     f"{r['step_ms_p50']:.1f} / "
                     f"{r['step_ms_p95']:.1f} | {r['build_s']:.1f} | {r['reset_s_mean']:.2f} |")
    return "\n".join(lines) + "\n"
