"""Diagnostic oracles: R2A with one part replaced by the scripted expert's knowledge. NOT deployable.

They read the simulator's privileged state through the scripted expert, so they run only where a policy is handed
the simulator (``PolicyContext.sim``: the benchmark), and they are registered as diagnostics
(:mod:`eval.diagnostics`). They answer "how much could R2A gain if this part were right?"
(docs/experiments/headroom.md):

* ``oracle-ref`` — the reference is the expert's own next ``executed_steps`` actions from the current state (a
  lookahead in a camera-less shadow simulator, :class:`demos.lookahead.ExpertLookahead`, exactly as
  ``r2a policy dagger --beta 0 --lookahead 8`` labels a state), blended by the config's (learned) gate;
* ``oracle-gate`` — the retrieved reference, blended by the per-query oracle S: per dimension and within the
  gate's bounds, the S that brings the executed blend closest to the expert's chunk (:func:`oracle_gate`);
* ``oracle-both`` — both. With the expert as the reference the oracle S is the upper bound wherever the
  reference differs from the base: the ceiling of a bounded blend.

Everything else is the variant ``r2a-harmonize-hold`` (harmonized base, start-pose recovery, retrieval and its
fallbacks, the gate at 0 while the base holds the gripper closed; ``oracle-ref:CONFIG.yaml?…`` applies those settings
to another config, e.g. a LIBERO base's); the wrapper gets the expert through its sources
(:mod:`r2a.wrapper.sources`), not through a copy of it. Every gated query's trace (``result["r2a"]``) adds the
errors of the base chunk, the reference and the executed blend against the expert's chunk (``expert_error``:
translation mm, rotation degrees per step) and, where S acts on some step (not every one under the holding rule),
the oracle S for the reference it blended (``oracle_gate``) and the config's gate's S (``learned_gate``), both
before the holding rule.

The expert labels every control step, in relabel mode as in DAgger, so that its phase machine follows the robot the
way it does when it labels DAgger data; that is why an oracle is queried every step (``n_action_steps`` 1) and
executes the wrapper's chunks itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from r2a.retrieval.motion import DELTA_EE_SCALE
from r2a.wrapper.gate import GateInputs, bound_gate, closest_gate
from r2a_core.policy import ChunkBroker, Policy
from r2a_core.types import ActionSpace


def oracle_gate(base: np.ndarray, reference: np.ndarray, target: np.ndarray, scale: np.ndarray,
                action_space: ActionSpace, max_gate: float) -> np.ndarray:
    """Per dimension, the S in ``[0, max_gate]`` whose blend ``base + scale·S·(reference − base)`` is closest to
    ``target`` in least squares over the steps ``(A,)`` (:func:`~r2a.wrapper.gate.closest_gate`)."""
    return bound_gate(closest_gate(base, reference, target, scale, max_gate), action_space, max_gate)


def _expert_error(chunk: np.ndarray, target: np.ndarray) -> list[float]:
    """Mean per-step error of the commanded motion against ``target``: [translation mm, rotation degrees] (the
    units of ``r2a retriever evaluate`` and ``r2a gate evaluate``)."""
    d = (np.asarray(chunk, np.float64) - target)[:, :6].reshape(len(target), 2, 3)
    trans, rot = np.linalg.norm(d, axis=2).mean(axis=0) * DELTA_EE_SCALE
    return [round(float(trans) * 1000.0, 2), round(float(np.degrees(rot)), 2)]


class ExpertChunks:
    """The scripted expert beside a driving policy: its label of every state it is shown, and its own next
    ``horizon`` actions from the current state (one shadow rollout per state, the live simulator untouched)."""

    def __init__(self, sim: Any, horizon: int) -> None:
        from demos.experts.scripted import make_expert
        from demos.lookahead import ExpertLookahead

        self.expert = make_expert(sim, relabel=True)
        self.lookahead = ExpertLookahead(sim, self.expert, horizon)
        self.reset()

    def reset(self) -> None:
        self.expert.reset()
        self._label: np.ndarray | None = None
        self._chunk: np.ndarray | None = None

    def observe(self) -> None:
        """Label the current state (once per control step, before it is executed): the phase machine moves on."""
        self._label = np.asarray(self.expert.infer({})["actions"][0], np.float32)
        self._chunk = None

    def chunk(self, n: int) -> np.ndarray:
        """The expert's own next ``n`` actions (``n`` ≤ horizon) from the state last observed."""
        if self._label is None:
            raise RuntimeError("ExpertChunks.chunk: observe() the current state first")
        if self._chunk is None:
            self._chunk = self.lookahead.rollout(self._label).astype(np.float64)
        return self._chunk[:n]


class ExpertReference:
    """A reference source: the expert's chunk instead of the retrieved motion."""

    def __init__(self, expert: ExpertChunks) -> None:
        self.expert = expert

    def __call__(self, obs: dict[str, Any], retrieved: np.ndarray) -> np.ndarray:
        return self.expert.chunk(len(retrieved))


class OracleGate:
    """A gate source: the oracle S against the expert's chunk (``apply``), or the gate's own S with the oracle's
    traced beside it; either way the trace gets the chunks' errors against the expert's."""

    def __init__(self, expert: ExpertChunks, action_space: ActionSpace, max_gate: float, apply: bool) -> None:
        self.expert, self.action_space, self.max_gate, self.apply = expert, action_space, max_gate, apply

    def __call__(self, inputs: GateInputs, gate: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        base, reference = inputs.base, inputs.reference
        target = self.expert.chunk(len(base))
        best = oracle_gate(base, reference, target, scale, self.action_space, self.max_gate)
        chosen = np.broadcast_to(best, base.shape).copy() if self.apply else gate
        grip = list(self.action_space.gripper_dims)
        blend = base + chosen * scale[:, None] * (reference - base)
        blend[:, grip] = base[:, grip]
        chunks = {"base": base, "reference": reference, "blend": self.action_space.clip(blend)}
        trace: dict[str, Any] = {"expert_error": {name: _expert_error(c, target) for name, c in chunks.items()}}
        if scale.any():  # S acts on some step (not all of them under the holding rule): the two S are comparable
            trace.update(oracle_gate=np.round(best, 4).tolist(), learned_gate=np.round(gate.mean(axis=0), 4).tolist())
        return chosen, trace


class OraclePolicy:
    """An R2A wrapper with expert sources: shows the expert every control step and executes the wrapper's chunks
    itself (``n_action_steps`` 1), so the expert's phase machine follows the robot step by step."""

    n_action_steps = 1

    def __init__(self, wrapper: Any, expert: ExpertChunks, name: str) -> None:
        self.wrapper, self.expert, self.name = wrapper, expert, name
        self.action_space = wrapper.action_space
        self._broker = ChunkBroker(wrapper, wrapper.action_space.dim, wrapper.n_action_steps)

    @property
    def metadata(self) -> dict[str, Any]:
        return {**self.wrapper.metadata, "oracle": self.name, "deployable": False, "n_action_steps": 1}

    def reset(self) -> None:
        self.expert.reset()
        self._broker.reset()  # resets the wrapper

    def close(self) -> None:
        self.wrapper.close()

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.expert.observe()
        action = self._broker.act(obs)
        reply = self._broker.last_reply if self._broker.queried else None
        extra = {k: v for k, v in reply.items() if k != "actions"} if isinstance(reply, dict) else {}
        return {**extra, "actions": action[None]}


def build_oracle(name: str, config: Any, base: Policy, sim: Any, expert_reference: bool,
                 oracle_s: bool) -> OraclePolicy:
    """The wrapper ``config`` builds around ``base``, with the expert's chunk as its reference
    (``expert_reference``) and the oracle S as its gate (``oracle_s``); the oracle S is traced either way."""
    from r2a.wrapper.build import build_r2a

    wrapper = build_r2a(config, base, sim.action_space)
    expert = ExpertChunks(sim, config.executed_steps)
    wrapper.parts = replace(
        wrapper.parts, reference_source=ExpertReference(expert) if expert_reference else None,
        gate_source=OracleGate(expert, sim.action_space, wrapper.parts.max_gate, apply=oracle_s))
    return OraclePolicy(wrapper, expert, name)


__all__ = ["ExpertChunks", "ExpertReference", "OracleGate", "OraclePolicy", "build_oracle", "oracle_gate"]
