"""DAgger data: a learner drives the robot, the scripted expert labels every state the learner reaches.

A policy cloned from expert demonstrations fails in states the demonstrations never show: the built-in VLA
hovers a few centimetres off the tower it should stack on, and the expert never hovered there, so there is no
label saying "correct and lower now" (Ross et al., 2011, "DAgger"). Here a learner (any registered policy,
usually the current checkpoint) executes its own chunks while the expert, bound to the same simulator and in
relabel mode, computes its action for each state the learner reaches; that action is the recorded label.
With probability ``beta`` per learner chunk the expert executes instead (DAgger's mixture), so the later
stages of a task are reached and labelled too. Episodes carry ``meta["dagger"]``; training keeps them
whatever their outcome, because their labels are the expert's.

With ``gate_rows`` the learner must be an R2A wrapper with a learned gate: every gated query's gate inputs
(:class:`~r2a.wrapper.learned_gate.GateRaw`, exactly what the gate read at run time: the harmonized base's chunk,
the retrieved reference, the previous plan, the image score) and the holding rule's per-step scale are recorded
with the control step under ``meta["dagger"]["gate_rows"]``; with ``--lookahead`` the expert's own next actions
from the same state are the episode's ``label_chunks``. ``r2a gate data`` turns them into closed-loop gate rows.

The collection itself is :func:`demos.collect.collect`; this module only injects the learner, so ``demos``
never depends on ``r2a``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.policy import ChunkBroker, Policy

#: the episode metadata key that marks an on-policy, expert-labelled episode
DAGGER_META_KEY = "dagger"

_LEARNERS: "weakref.WeakKeyDictionary[Any, dict[str, Policy]]" = weakref.WeakKeyDictionary()
_RECORDERS: "weakref.WeakKeyDictionary[Any, GateRowRecorder]" = weakref.WeakKeyDictionary()


def _check_beta(beta: float) -> None:
    if not 0.0 <= beta <= 1.0:
        raise R2AInputError(f"DAgger beta={beta}: expected the expert's share of chunks, 0 <= beta <= 1")


class LearnerControl:
    """One episode's executor: the learner's action is executed, the expert's action stays the label."""

    META_KEY = DAGGER_META_KEY

    def __init__(self, learner: Policy, action_dim: int, beta: float = 0.0, seed: int = 0,
                 n_action_steps: int | None = None, name: str = "learner",
                 recorder: "GateRowRecorder | None" = None) -> None:
        _check_beta(beta)
        self.beta, self.name, self.recorder = float(beta), name, recorder
        self._broker = ChunkBroker(learner, action_dim, n_action_steps)
        self._broker.reset()
        self._rng = np.random.default_rng([seed, 0xDA66E2])
        self._expert_chunk = False
        self.learner_steps = self.expert_steps = 0

    def __call__(self, action: np.ndarray, step: int, obs: dict[str, Any]) -> np.ndarray:
        """The action to execute: the learner's, or for a whole chunk (probability ``beta``) the expert's."""
        queries = self._broker.queries
        if self.recorder is not None:
            self.recorder.step = step
        learner_action = self._broker.act(obs)  # queried every step, so its chunk timing never drifts
        if self._broker.queries != queries:
            self._expert_chunk = bool(self._rng.random() < self.beta)
        if self._expert_chunk:
            self.expert_steps += 1
            return np.asarray(action, dtype=np.float32)
        self.learner_steps += 1
        return learner_action

    def summary(self) -> dict[str, Any]:
        """What collection stores under ``meta["dagger"]``."""
        out = {"learner": self.name, "beta": self.beta, "learner_steps": self.learner_steps,
               "expert_steps": self.expert_steps}
        if self.recorder is not None:
            out["gate_rows"] = self.recorder.rows()
        return out


#: what one recorded gate row holds (``meta["dagger"]["gate_rows"]``: one list per field, one entry per query)
GATE_ROW_FIELDS = ("step", "base", "reference", "retrieval", "ee_pos", "gripper", "elapsed", "disagreement",
                   "image_score", "scale")


class GateRowRecorder:
    """A gate source that changes nothing and records what the gate read at each gated query.

    Plugged into an R2A wrapper (:mod:`r2a.wrapper.sources`), it sees the gate's exact run-time inputs; the control
    step is set by :class:`LearnerControl` before each query, so each row pairs with the expert's label chunk of the
    same state."""

    def __init__(self, layout: Any, image_scorer: Any = None) -> None:
        self.layout, self.image_scorer = layout, image_scorer
        self.step = 0
        self._rows: list[dict[str, Any]] = []

    def __call__(self, inputs: Any, gate: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        from r2a.wrapper.learned_gate import gate_raw

        raw = gate_raw(inputs, self.layout, self.image_scorer)
        r5 = lambda a: np.round(np.asarray(a, np.float64), 5).tolist()  # noqa: E731
        self._rows.append({"step": int(self.step), "base": r5(raw.base), "reference": r5(raw.reference),
                           "retrieval": r5(raw.retrieval), "ee_pos": r5(raw.ee_pos), "gripper": float(raw.gripper),
                           "elapsed": int(raw.step),
                           "disagreement": None if raw.disagreement is None else r5(raw.disagreement),
                           "image_score": raw.image_score, "scale": r5(scale)})
        return gate, {}

    def reset(self) -> None:
        self._rows = []

    def rows(self) -> dict[str, list[Any]]:
        return {name: [row[name] for row in self._rows] for name in GATE_ROW_FIELDS}


def attach_gate_recorder(learner: Any) -> GateRowRecorder:
    """Install a :class:`GateRowRecorder` as the gate source of an R2A wrapper with a learned gate."""
    from dataclasses import replace

    from r2a.wrapper.learned_gate import LearnedGate

    wrapper = getattr(learner, "wrapper", learner)
    parts = getattr(wrapper, "parts", None)
    if parts is None or not isinstance(parts.gate, LearnedGate):
        raise R2AInputError("--gate-rows records an R2A wrapper's learned-gate inputs: give an R2A policy with a "
                            "learned gate as --policy (e.g. r2a-builtin)")
    if parts.gate_source is not None:
        raise R2AInputError("--gate-rows: the policy already replaces its gate's S (an oracle); give a deployable "
                            "R2A variant")
    recorder = GateRowRecorder(parts.gate.layout, parts.gate.image_scorer)
    wrapper.parts = replace(parts, gate_source=recorder)
    return recorder


@dataclass(frozen=True)
class LearnerExecutor:
    """The picklable ``executor(sim, seed)`` handed to collection: one learner per simulator, reset per episode."""

    spec: str
    beta: float = 0.0
    gate_rows: bool = False
    #: a picklable function run before the learner is built, here and in every worker process (the ``r2a`` command
    #: passes :func:`eval.diagnostics.register_diagnostics`, so that a diagnostic name builds in the workers too)
    prepare: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        from r2a.policies.registry import parse_policy_spec

        if self.prepare is not None:
            self.prepare()
        parse_policy_spec(self.spec)  # an unknown name fails here, before any worker process starts
        _check_beta(self.beta)

    def __call__(self, sim: Any, seed: int) -> LearnerControl:
        if self.prepare is not None:
            self.prepare()
        learner = _learner(self.spec, sim)
        recorder = None
        if self.gate_rows:
            recorder = _RECORDERS.get(learner)
            if recorder is None:  # the learner is built once per simulator; so is its recorder
                recorder = _RECORDERS[learner] = attach_gate_recorder(learner)
            recorder.reset()
        return LearnerControl(learner, sim.action_space.dim, self.beta, seed,
                              n_action_steps=getattr(learner, "n_action_steps", None), name=self.spec,
                              recorder=recorder)


def _learner(spec: str, sim: Any) -> Policy:
    """The learner for ``sim``, built once (loading a checkpoint per episode would dominate short episodes)."""
    from r2a.policies.registry import make_policy

    built = _LEARNERS.setdefault(sim, {})
    if spec not in built:
        built[spec] = make_policy(spec, sim, seed=0)
    return built[spec]
