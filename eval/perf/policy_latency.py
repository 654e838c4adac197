"""Inference latency of a policy, measured side by side with the simulator step it has to keep up with.

A policy's absolute latency says little on a shared machine; what matters at deployment is whether it keeps
pace with control. So one process builds the simulator and the policy, steps the simulator with the policy's
own actions (the observations are real renders at the benchmark's image size, and ``state/step`` is added as
the rollout loop does), and times ``policy.infer`` and ``sim.step`` in the same run: load that slows one slows
the other, and their ratio is the robust number. A policy queried once per ``n_action_steps`` control steps
costs ``query mean / n_action_steps`` per step; ``ratio`` = that / the simulator step (< 1: the policy is
cheaper than simulating the step it controls). Resets (episode success or horizon) are not timed.
"""

from __future__ import annotations

import logging
import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy
from r2a_core.provenance import cpu_model
from r2a_core.types import STATE_STEP

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


@dataclass
class _Timings:
    """Seconds per measured ``infer`` call and per measured ``sim.step``; counts of the untimed rest."""

    infer_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    chunk_length: int = 0
    episodes: int = 1


def measure_policy_latency(spec: str, task: str = "Lift", image_size: int = 64, queries: int = 200,
                           warmup: int = 10, seed: int = 0, threads: int | None = 1) -> dict[str, Any]:
    """Time ``queries`` policy queries (after ``warmup`` untimed ones) and the simulator steps they drive."""
    from eval.diagnostics import register_diagnostics
    from r2a.policies import make_policy
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    register_diagnostics()
    if queries < 1 or warmup < 0:
        raise R2AInputError(f"queries={queries}, warmup={warmup}: expected queries >= 1 and warmup >= 0")
    torch_threads = _set_torch_threads(threads)
    sim = make_sim(SimConfig(task=task, image_size=image_size))
    try:
        policy = make_policy(spec, sim, seed)
        torch_threads = _set_torch_threads(threads)  # a policy may set its own thread count when built
        horizon = getattr(policy, "n_action_steps", None)
        t0 = time.perf_counter()
        timings = _drive(sim, policy, horizon, queries, warmup, seed)
        wall_s = time.perf_counter() - t0
    finally:
        sim.close()
    row = summarize(timings, horizon)
    row.update(spec=spec, task=sim.task.name, image_size=image_size, queries=queries, warmup=warmup, seed=seed,
               torch_threads=torch_threads, wall_s=wall_s, format_version=FORMAT_VERSION,
               machine=_machine())
    log.info("%s on %s: %.2f ms/query, %.3f ms/step vs sim %.2f ms/step (ratio %.3f)", spec, task,
             row["query_ms_mean"], row["policy_ms_per_step"], row["sim_step_ms_mean"], row["ratio"])
    return row


def _drive(sim, policy: Policy, horizon: int | None, queries: int, warmup: int, seed: int) -> _Timings:
    """Query, execute the chunk's first ``horizon`` actions, repeat; restart the episode when it ends.

    Only calls after the ``warmup`` ones are timed, so first-call costs (lazy imports, allocator growth,
    JIT) stay out of the numbers; the simulator steps driven by those calls are timed alongside.
    """
    timings = _Timings()
    obs, steps = _restart(sim, policy, seed), 0
    for call in range(warmup + queries):
        timed = call >= warmup
        t0 = time.perf_counter()
        reply = policy.infer({**obs, STATE_STEP: steps})
        if timed:
            timings.infer_s.append(time.perf_counter() - t0)
        chunk = _as_chunk(reply, sim.action_space.dim)
        timings.chunk_length = len(chunk)
        for action in chunk[: horizon or len(chunk)]:
            t0 = time.perf_counter()
            obs = sim.step(sim.action_space.clip(action))
            if timed:
                timings.step_s.append(time.perf_counter() - t0)
            steps += 1
            if sim.evaluate()[1] or steps >= sim.horizon:
                timings.episodes += 1
                obs, steps = _restart(sim, policy, seed + timings.episodes - 1), 0
                break
    return timings


def _restart(sim, policy: Policy, seed: int) -> dict[str, Any]:
    """A fresh episode for both sides (as the rollout loop does); not timed."""
    obs = sim.reset(seed)
    policy.reset()
    return obs


def _as_chunk(reply: Any, action_dim: int) -> np.ndarray:
    """The reply's ``(H, A)`` action chunk; a wrong shape is the policy's configuration error."""
    actions = np.asarray(reply["actions"], dtype=np.float32)
    actions = actions[None] if actions.ndim == 1 else actions
    if actions.ndim != 2 or actions.shape[1] != action_dim or len(actions) == 0:
        raise R2AInputError(f"policy returned actions of shape {actions.shape}, expected (H, {action_dim})")
    return actions


def summarize(timings: _Timings, horizon: int | None) -> dict[str, Any]:
    """Latency statistics (ms) and the per-control-step comparison with the simulator."""
    infer_ms, step_ms = 1e3 * np.asarray(timings.infer_s), 1e3 * np.asarray(timings.step_s)
    n_action_steps = int(horizon or timings.chunk_length)
    per_step = float(infer_ms.mean()) / n_action_steps
    sim_mean = float(step_ms.mean()) if step_ms.size else float("nan")
    return {
        "query_ms_p50": float(np.median(infer_ms)), "query_ms_p95": float(np.percentile(infer_ms, 95)),
        "query_ms_mean": float(infer_ms.mean()), "chunk_length": timings.chunk_length,
        "n_action_steps": n_action_steps, "n_action_steps_from": "policy" if horizon else "chunk length",
        "policy_ms_per_step": per_step, "sim_step_ms_mean": sim_mean,
        "sim_step_ms_p50": float(np.median(step_ms)) if step_ms.size else float("nan"),
        "sim_steps": int(step_ms.size), "episodes": timings.episodes, "ratio": per_step / sim_mean,
    }


def _set_torch_threads(threads: int | None) -> int | None:
    """Pin torch's intra-op threads (if torch is installed) so latencies are comparable across machines."""
    try:
        import torch
    except ImportError:
        return None
    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def _machine() -> dict[str, Any]:
    """Where the numbers were measured (they mean little without it)."""
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    try:
        import torch

        versions["torch"] = torch.__version__
    except ImportError:
        pass
    return {"processor": cpu_model() or platform.machine(),
            "machine": platform.machine(), "cpus": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "load_avg": list(os.getloadavg()), **versions}


def format_table(row: dict[str, Any]) -> str:
    """A two-column Markdown table of one measurement, headed by what was measured where."""
    machine = row["machine"]
    cells = [("policy query p50", f"{row['query_ms_p50']:.3f} ms"),
             ("policy query p95", f"{row['query_ms_p95']:.3f} ms"),
             ("policy query mean", f"{row['query_ms_mean']:.3f} ms"),
             ("chunk length", f"{row['chunk_length']}"),
             ("n_action_steps", f"{row['n_action_steps']} (from {row['n_action_steps_from']})"),
             ("policy per control step", f"{row['policy_ms_per_step']:.3f} ms"),
             ("sim step mean", f"{row['sim_step_ms_mean']:.3f} ms"),
             ("sim step p50", f"{row['sim_step_ms_p50']:.3f} ms"),
             ("ratio policy / sim step", f"{row['ratio']:.3f}"),
             ("timed queries (sim steps)", f"{row['queries']} ({row['sim_steps']})"),
             ("torch threads", "—" if row["torch_threads"] is None else f"{row['torch_threads']}")]
    lines = [f"policy {row['spec']} on {row['task']} ({row['image_size']} px) — {machine['processor']}, "
             f"{machine['cpus']} CPUs, load {machine['load_avg'][0]:.2f}", "", "| metric | value |", "|---|---:|"]
    lines += [f"| {label} | {value} |" for label, value in cells]
    return "\n".join(lines)
