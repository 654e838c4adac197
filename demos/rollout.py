"""The rollout loop, read top to bottom: reset, observe, act, step, record, stop.

Shared by demonstration collection and the benchmark so both execute policies identically. A policy's chunk
is executed ``n_action_steps`` steps at a time (all of it by default) before the policy is queried again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from r2a_core.policy import ChunkBroker, Policy
from r2a_core.types import CAMERAS, STATE_STEP, Episode, gripper_opening, image_key

log = logging.getLogger(__name__)


@dataclass
class EpisodeRecorder:
    """Accumulates per-step arrays; ``to_episode`` stacks them."""

    cameras: tuple[str, ...]
    rows: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(self, **arrays: np.ndarray) -> None:
        for key, value in arrays.items():
            self.rows.setdefault(key, []).append(np.asarray(value))

    def to_episode(self, task: str, instruction: str, success: bool, meta: dict[str, Any]) -> Episode:
        stacked = {k: np.stack(v) for k, v in self.rows.items()}
        return Episode(
            task=task, instruction=instruction, actions=stacked["actions"].astype(np.float32),
            ee_pos=stacked["ee_pos"], ee_quat=stacked["ee_quat"],
            gripper=gripper_opening(stacked["gripper_qpos"]).astype(np.float32),
            joint_pos=stacked["joint_pos"], gripper_qpos=stacked["gripper_qpos"],
            images={cam: stacked[f"image_{cam}"] for cam in self.cameras},
            sim_states=stacked["states"], robot_states=stacked["robot_states"], success=success, meta=meta)


class EpisodeHooks(Protocol):
    """Optional hooks of :func:`run_episode` (the benchmark injects its shift and watches events here)."""

    def after_reset(self, sim: Any) -> dict[str, Any] | None:
        """Called after ``reset`` and the fingerprint; may change the scene and return a fresh observation."""

    def transform(self, obs: dict[str, Any]) -> dict[str, Any]:
        """Applied to every observation the policy sees (hooks whose ``stepwise_transform`` attribute is True —
        nothing carried between steps — let ``render_unseen=False`` skip it on the steps the policy does not see)."""

    def after_step(self, sim: Any, action: np.ndarray) -> None:
        """Called after every simulator step."""

    def close(self) -> None:
        """Called once the episode is over, also on errors (restore the scene)."""


@dataclass
class Step:
    """One control step as a :func:`run_episode` observer sees it, before the simulator executes it.

    ``sim`` is still in the state the action was chosen from; ``reply`` is the policy's whole result dict when
    this step started a new chunk (its diagnostics, e.g. a wrapper's fallback reason), else None.
    """

    index: int
    obs: dict[str, Any]
    action: np.ndarray
    executed: np.ndarray
    reply: dict[str, Any] | None
    sim: Any


#: ``observer(step)``: called once per control step (record, label, collect diagnostics); its return is ignored
StepObserver = Callable[[Step], None]

#: ``perturb(action, step, obs) -> executed action``; the policy's own action stays the recorded label (DART's
#: disturbance, or DAgger's learner in control while the expert labels)
Perturbation = Callable[[np.ndarray, int, dict[str, Any]], np.ndarray]


def run_episode(sim, policy: Policy, seed: int, record: bool = True, n_action_steps: int | None = None,
                max_steps: int | None = None, hooks: EpisodeHooks | None = None,
                perturb: Perturbation | None = None, observer: StepObserver | None = None,
                render_unseen: bool = True) -> tuple[Episode | None, dict[str, Any]]:
    """Roll ``policy`` out in ``sim`` from ``reset(seed)`` until success or the horizon.

    Returns the recorded episode (None when ``record`` is False) and a summary: success, steps, latched
    stages, the fingerprint of the initial state (taken before any hook changes the scene), the EE trace.
    With ``perturb`` the simulator executes another action (it sees the same observation as the policy) while
    the policy's action is recorded. ``observer`` sees every step (:class:`Step`) before it is executed.
    ``render_unseen=False`` (not with ``record``) renders the cameras only for the observations the policy is
    queried on — the same episode, several times faster for a chunked policy; the steps in between carry the
    last rendered images (and skip ``hooks.transform`` when it is ``stepwise_transform``), so an ``observer``
    must not look at their images.
    """
    if record and not render_unseen:
        raise ValueError("render_unseen=False would record stale images: it needs record=False")
    obs = sim.reset(seed)
    policy.reset()
    fingerprint = sim.fingerprint()
    try:
        if hooks is not None:
            obs = hooks.after_reset(sim) or obs
        return _rollout(sim, policy, obs, seed, fingerprint, record, n_action_steps, max_steps, hooks, perturb,
                        observer, render_unseen)
    finally:
        if hooks is not None:
            hooks.close()


def _rollout(sim, policy: Policy, obs: dict[str, Any], seed: int, fingerprint: str, record: bool,
             n_action_steps: int | None, max_steps: int | None, hooks: EpisodeHooks | None,
             perturb: Perturbation | None = None, observer: StepObserver | None = None,
             render_unseen: bool = True) -> tuple[Episode | None, dict[str, Any]]:
    recorder = EpisodeRecorder(tuple(c for c in CAMERAS if image_key(c) in obs))
    stages = dict.fromkeys(sim.task.stages, False)
    trace_pos, trace_grip = [sim.ee_pos()], [float(gripper_opening(sim.gripper_qpos()))]
    broker = ChunkBroker(policy, sim.action_space.dim, n_action_steps)
    success, steps, limit = False, 0, max_steps or sim.horizon
    while steps < limit and not success:
        seen = {**obs, STATE_STEP: steps}
        unseen = not render_unseen and not broker.will_query and getattr(hooks, "stepwise_transform", False)
        if hooks is not None and not unseen:
            seen = hooks.transform(seen)
        action = sim.action_space.clip(broker.act(seen))
        if record:
            _record_step(recorder, sim, seen, action)
        executed = sim.action_space.clip(perturb(action, steps, seen)) if perturb is not None else action
        if observer is not None:
            observer(Step(steps, seen, action, executed, broker.last_reply if broker.queried else None, sim))
        obs = sim.step(executed) if render_unseen else sim.step(executed, render_images=broker.will_query)
        steps += 1
        if hooks is not None:
            hooks.after_step(sim, executed)
        flags, success = sim.evaluate()
        stages = {k: v or now for (k, v), now in zip(stages.items(), flags.values())}
        trace_pos.append(sim.ee_pos())
        trace_grip.append(float(gripper_opening(sim.gripper_qpos())))
    summary = {"success": success, "steps": steps, "stages": stages, "seed": seed, "fingerprint": fingerprint,
               "trace": {"ee_pos": np.array(trace_pos), "gripper": np.array(trace_grip)}}
    if not record:
        return None, summary
    meta = {"seed": seed, "fingerprint": fingerprint, "stages": stages, "steps": steps}
    return recorder.to_episode(sim.task.name, sim.instruction, success, meta), summary


def _record_step(recorder: EpisodeRecorder, sim, obs: dict[str, Any], action: np.ndarray) -> None:
    images = {f"image_{cam}": obs[image_key(cam)] for cam in recorder.cameras}
    recorder.add(actions=action, ee_pos=sim.ee_pos(), ee_quat=sim.ee_quat(), gripper_qpos=sim.gripper_qpos(),
                 joint_pos=sim.joint_pos(), states=sim.get_state(), robot_states=sim.robot_state(), **images)
