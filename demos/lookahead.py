"""Lookahead labels: the expert's own next H actions from every state another policy reached.

DAgger records the expert's action at each state the learner visits. A chunked policy, though, is trained on
chunks, and the recorded future of a DAgger episode is the *learner's* path: at each of the next steps the
expert says "correct towards the tower" again, because the learner did not. Cut into chunk targets, that
sequence asks for the whole correction sixteen times over, and a policy executing eight steps of it open loop
overshoots — the hover it was meant to fix. The chunk label should instead be what the expert itself would do
from that state: roll the expert out for H steps in a camera-less copy of the simulator, set to the current
state, and record its actions (``Episode.label_chunks``).

A shadow copy reproduces the future: it gets the MuJoCo state and what robosuite's controllers carry between
steps (``SimEnv.control_state``, including the stale kinematics cache robosuite steps on right after a reset),
and the expert's phase machine is copied. When the expert itself drives, the lookahead chunk at step t is the
recorded actions t…t+H−1, from the first step on (a test checks this).
"""

from __future__ import annotations

import copy
import weakref
from typing import Any

import numpy as np

from r2a_core.errors import R2AInputError

_SHADOWS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


class ExpertLookahead:
    """A ``perturb`` hook that records, at every step, the expert's own next ``horizon`` actions.

    It returns the action it is given unchanged, so it composes with any executor (see :func:`chain`). The
    expert must have produced this step's label already (the rollout calls ``perturb`` after the policy).
    """

    def __init__(self, sim: Any, expert: Any, horizon: int) -> None:
        if horizon < 1:
            raise R2AInputError(f"lookahead horizon={horizon}: expected at least 1 step")
        self.sim, self.expert, self.horizon = sim, expert, int(horizon)
        self._shadow = _shadow_of(sim)
        self._chunks: list[np.ndarray] = []

    def __call__(self, action: np.ndarray, step: int, obs: dict[str, Any]) -> np.ndarray:
        self._chunks.append(self.rollout(np.asarray(action, dtype=np.float32)))
        return action

    def rollout(self, first: np.ndarray) -> np.ndarray:
        """The expert's actions from the live state: ``first`` (this step's label), then its own continuation
        (``(horizon, A)``); the live simulator and the live expert are left as they were."""
        shadow = self._shadow
        shadow.set_scene_state(self.sim.scene_state())
        shadow.set_state(self.sim.get_state())
        shadow.set_control_state(self.sim.control_state())
        branch = copy.copy(self.expert)  # the phase machine as it is now; the live expert is left untouched
        branch.sim = shadow
        chunk = [first]
        shadow.step(first)
        for _ in range(self.horizon - 1):
            chunk.append(np.asarray(branch.infer({})["actions"][0], dtype=np.float32))
            shadow.step(chunk[-1])
        return np.stack(chunk)

    def chunks(self) -> np.ndarray:
        """(T, horizon, A): one lookahead chunk per recorded step."""
        return np.stack(self._chunks)


def _shadow_of(sim: Any) -> Any:
    """A camera-less simulator of the same task and backend (robosuite's or LIBERO's), built once per live
    simulator (i.e. per worker)."""
    if sim not in _SHADOWS:
        from sim.envs.backends import make_sim
        from sim.envs.robosuite_env import SimConfig

        _SHADOWS[sim] = make_sim(SimConfig(task=sim.task.name, cameras=()))
        _SHADOWS[sim].reset(0)
    return _SHADOWS[sim]


def chain(*hooks: Any):
    """One ``perturb(action, step, obs)`` that runs ``hooks`` in order, each on the previous one's output."""
    active = [hook for hook in hooks if hook is not None]
    if not active:
        return None

    def run(action: np.ndarray, step: int, obs: dict[str, Any]) -> np.ndarray:
        for hook in active:
            action = hook(action, step, obs)
        return action

    return run
