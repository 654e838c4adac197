"""``R2APolicy``: a frozen base policy whose chunks are blended toward retrieved demonstration motion.

Per query (every executed chunk): observe the EE pose into the history; before the first base query, recover an
out-of-distribution start pose (closed loop, one step per query); otherwise ask the base for its chunk, retrieve
(:class:`~r2a.retrieval.retriever.Retriever`), fuse and convert the reference, gate it, and return the blended
``executed_steps`` actions:

    A_exec = A_base + S ⊙ (A_ref − A_base),   gripper from the base.

It is a policy like every other (``infer``/``reset``) and wraps any base: built-in, openpi websocket, LeRobot,
callable. Its output is always finite and inside the action bounds. It falls back to the base chunk — and says
why in ``result["r2a"]["fallback"]`` — when the base returned non-finite values (or its guard already fell
back), when the observation lacks the EE pose, when the nearest graph node is too far, when retrieval is too
unsure, when a learned gate's input is NaN/inf (``gate_input``), or when anything inside raises. No privileged
simulator state enters: only the observation dict — except through a diagnostic source (:mod:`r2a.wrapper.sources`:
another reference or another S, the scripted expert's in the oracles; not deployable).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from r2a.retrieval.history import ExecutionHistory
from r2a.retrieval.motion import ResponseModel
from r2a.retrieval.retriever import Retriever
from r2a.retrieval.synthesis import reference_chunk
from r2a.wrapper.gate import Gate, GateInputs, bound_gate, holding_rule
from r2a.wrapper.learned_gate import GateInputError
from r2a.wrapper.recovery import StartPoseRecovery
from r2a.wrapper.sources import GateSource, ReferenceSource
from r2a.wrapper.task_match import TaskMatcher
from r2a.wrapper.task_match import summary as match_summary
from r2a_core.policy import Policy
from r2a_core.timing import stage_timer
from r2a_core.types import PROMPT, STATE_EE_POS, STATE_EE_QUAT, STATE_GRIPPER, STATE_STEP, ActionSpace

log = logging.getLogger(__name__)

#: fallback reasons (the values of ``result["r2a"]["fallback"]``)
BASE_NONFINITE, BASE_FALLBACK, NO_PROPRIO, FAR_FROM_GRAPH, LOW_CONFIDENCE, GATE_INPUT, ERROR = (
    "base_nonfinite", "base_fallback", "no_proprio", "far_from_graph", "low_confidence", "gate_input", "error")
#: the prompt means no graph task the matcher knows, and the config leaves the base alone then (task_match.unknown)
UNKNOWN_TASK = "unknown_task"
#: errors inside the wrapper are logged at most this often (the first, then every n-th)
WARN_EVERY = 100


@dataclass(frozen=True)
class WrapperParts:
    """What :class:`R2APolicy` runs, built from a config by :func:`r2a.wrapper.build.build_r2a`."""

    retriever: Retriever
    response: ResponseModel
    gate: Gate
    action_space: ActionSpace
    executed_steps: int
    conversion: str
    max_seed_distance: float
    max_entropy: float
    recovery: StartPoseRecovery | None
    max_gate: float
    holding_scale: float = 1.0
    #: the reference instead of the retrieved motion (None: retrieval's); diagnostic oracles only
    reference_source: ReferenceSource | None = None
    #: the S instead of the gate's (None: the gate's); diagnostic oracles only
    gate_source: GateSource | None = None
    #: which graph task a prompt means (None: exact instructions only, an unknown one pools every task)
    task_matcher: TaskMatcher | None = None


class R2APolicy:
    """Wraps ``base`` (a policy) with retrieval, reference synthesis, a gate and start-pose recovery."""

    def __init__(self, base: Policy, parts: WrapperParts, metadata: dict[str, Any] | None = None) -> None:
        self.base, self.parts = base, parts
        self.action_space = parts.action_space
        _warn_on_other_replanning(base, parts.executed_steps)
        self.history = ExecutionHistory(parts.action_space.dim)
        self.errors = 0
        self._extra_metadata = dict(metadata or {})
        #: stage → seconds of the last query (synthesis, gate), filled only while profiling, like the retriever's
        self.stage_times: dict[str, float] | None = None
        self.reset()

    @property
    def n_action_steps(self) -> int:
        return self.parts.executed_steps

    @property
    def metadata(self) -> dict[str, Any]:
        base = getattr(self.base, "metadata", None) or {}
        artifacts = {**(base.get("artifacts") or {}), **self._extra_metadata.get("artifacts", {})}
        return {**{k: v for k, v in self._extra_metadata.items() if k != "artifacts"}, "policy": "r2a",
                "n_action_steps": self.n_action_steps, "base": base, "artifacts": artifacts}

    def reset(self) -> None:
        self.base.reset()
        self.parts.gate.reset()
        self.history.reset()
        self._recovering: int | None = None  # target start while servoing
        self._recovery_steps = 0
        self._clock_offset = 0  # the base's elapsed time starts when recovery ends
        self._started = False
        self._step = 0
        self._previous_chunk: tuple[int, np.ndarray] | None = None

    def close(self) -> None:
        close = getattr(self.base, "close", None)
        if callable(close):
            close()

    # ------------------------------------------------------------------------------------------------ infer
    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        step = int(obs.get(STATE_STEP, self._step))
        pose = _pose(obs)
        if pose is not None:
            self.history.observe(step, *pose)
            if not self._started:
                self._start_recovery(pose)
            if self._recovering is not None:
                recovery = self._recovery_step(pose, step)
                if recovery is not None:
                    return recovery
        self._started = True
        base_obs = {**obs, STATE_STEP: step - self._clock_offset}
        reply = self.base.infer(base_obs)
        chunk = np.asarray(reply.get("actions"), np.float64) if isinstance(reply, dict) else np.zeros((0, 0))
        actions, diag = self._blend(chunk, reply, obs, pose, step)
        if chunk.ndim == 2 and np.isfinite(chunk).all():
            self._previous_chunk = (step, chunk)
        self.history.plan(actions)
        self._step = step + len(actions)
        out = dict(reply) if isinstance(reply, dict) else {}
        out.update(actions=actions.astype(np.float32), r2a=diag)
        return out

    def _start_recovery(self, pose: tuple[np.ndarray, np.ndarray, float]) -> None:
        self._started = True
        if self.parts.recovery is None:
            return
        needed, target, _ = self.parts.recovery.needed(*pose)
        if needed:
            self._recovering, self._recovery_steps = target, 0

    def _recovery_step(self, pose: tuple[np.ndarray, np.ndarray, float], step: int) -> dict[str, Any] | None:
        """One servo action toward the target start, or None once recovery is over (the base takes over)."""
        recovery, target = self.parts.recovery, self._recovering
        assert recovery is not None and target is not None
        if recovery.done(pose[0], pose[1], target, self._recovery_steps):
            self._recovering = None
            self._clock_offset = step
            return None
        self._recovery_steps += 1
        action = recovery.action(pose[0], pose[1], target)[None]
        self.history.plan(action)
        self._step = step + 1
        return {"actions": action.astype(np.float32),
                "r2a": {"recovery": True, "fallback": None, "recovery_step": self._recovery_steps}}

    # ------------------------------------------------------------------------------------------------ blend
    def _blend(self, chunk: np.ndarray, reply: Any, obs: dict[str, Any],
               pose: tuple[np.ndarray, np.ndarray, float] | None, step: int) -> tuple[np.ndarray, dict[str, Any]]:
        n = max(1, min(self.parts.executed_steps, len(chunk))) if chunk.ndim == 2 else self.parts.executed_steps
        if chunk.ndim != 2 or chunk.shape[1] != self.action_space.dim or not np.isfinite(chunk).all():
            return self._hold_still(n), _fallback(BASE_NONFINITE, step)
        base = self.action_space.clip(chunk[:n]).astype(np.float64)
        if isinstance(reply, dict) and reply.get("fallback") is True:
            return base, _fallback(BASE_FALLBACK, step)
        if pose is None:
            return base, _fallback(NO_PROPRIO, step)
        try:
            return self._gated(chunk, base, obs, step)
        except GateInputError as err:  # the learned gate saw NaN/inf: the base chunk, and say so
            return base, {**_fallback(GATE_INPUT, step), "error": str(err)}
        except Exception as err:  # noqa: BLE001 - the robot must keep receiving safe actions
            self.errors += 1
            if self.errors == 1 or self.errors % WARN_EVERY == 0:
                log.warning("R2A fell back to the base chunk (%s: %s; error #%d)", type(err).__name__, err,
                            self.errors)
            return base, {**_fallback(ERROR, step), "error": f"{type(err).__name__}: {err}"[:300]}

    def _gated(self, chunk: np.ndarray, base: np.ndarray, obs: dict[str, Any],
               step: int) -> tuple[np.ndarray, dict[str, Any]]:
        p = self.parts
        n = len(base)
        window = self.history.window(p.retriever.layout.history)
        prompt = obs.get(PROMPT)
        prompt = prompt if isinstance(prompt, str) else None
        matched: dict[str, Any] = {}
        if p.task_matcher is not None and prompt is not None:
            match = p.task_matcher.match(prompt)
            matched = match_summary(match)
            if match.instruction is None and p.task_matcher.settings.unknown == "base":
                return base, {**_fallback(UNKNOWN_TASK, step), **matched}
            prompt = match.instruction or prompt  # unknown: the prompt as given, retrieval pools every task
        elapsed = step - self._clock_offset
        phase = p.retriever.phase_for(elapsed, prompt)
        found = p.retriever.retrieve(chunk, window, prompt, phase, elapsed)
        diag: dict[str, Any] = {**found.summary(), "step": step, "phase": round(phase, 4), "recovery": False,
                                **matched}
        if found.seed_distance > p.max_seed_distance:
            return base, {**diag, "fallback": FAR_FROM_GRAPH}
        if found.entropy > p.max_entropy:
            return base, {**diag, "fallback": LOW_CONFIDENCE}
        with self._stage("synthesis"):
            reference = reference_chunk(p.retriever.arrays, found.nodes, found.weights, window, n, p.conversion,
                                        p.response, self.action_space)
        if p.reference_source is not None:
            reference = np.asarray(p.reference_source(obs, reference), np.float64).reshape(reference.shape)
        inputs = GateInputs(
            base=base, reference=reference, base_chunk=chunk, previous_plan=self._planned_for(step, n),
            retrieval={"entropy": found.entropy, "top_weight": found.top_weight,
                       "seed_distance": found.seed_distance, "progress": found.progress},
            proprio={"ee_pos": window.now_pos, "ee_quat": window.now_quat, "gripper": np.array(window.now_gripper)},
            step=elapsed, observation=obs)
        with self._stage("gate"):
            gate = bound_gate(p.gate(inputs), self.action_space, p.max_gate)
        grip = list(self.action_space.gripper_dims)
        scale = holding_rule(base, self.action_space, p.holding_scale)
        traced: dict[str, Any] = {}
        if p.gate_source is not None:
            gate, traced = p.gate_source(inputs, gate, scale)
            gate = bound_gate(np.broadcast_to(gate, base.shape), self.action_space, p.max_gate)
        gate = gate * scale[:, None]
        blended = base + gate * (reference - base)
        blended[:, grip] = base[:, grip]
        out = self.action_space.clip(blended).astype(np.float64)
        if not np.isfinite(out).all():  # belt and braces: clip already maps non-finite values to 0
            return base, {**diag, "fallback": ERROR, "error": "non-finite blend"}
        motion = [d for d in range(base.shape[1]) if d not in grip]
        plan = inputs.previous_plan
        return out, {**diag, "fallback": None, "gate": np.round(gate.mean(axis=0), 4).tolist(),
                     "pull": round(float(np.abs(out - base)[:, motion].mean()), 4),
                     "disagreement": None if plan is None else
                     round(float(np.abs(base - self.action_space.clip(plan))[:, motion].mean()), 4), **traced}

    def _stage(self, name: str) -> Any:
        """Times the block into ``stage_times`` while profiling (``r2a bench perf retrieval``), else a no-op."""
        return stage_timer(self.stage_times, name)

    def _planned_for(self, step: int, n: int) -> np.ndarray | None:
        """What the previous base chunk planned for steps ``step .. step+n-1`` (None when it does not reach)."""
        if self._previous_chunk is None:
            return None
        at, chunk = self._previous_chunk
        lo = step - at
        if lo < 0 or lo + n > len(chunk):
            return None
        return chunk[lo:lo + n]

    def _hold_still(self, n: int) -> np.ndarray:
        """Zero motion and an open-or-last gripper when the base gave nothing usable."""
        out = np.zeros((n, self.action_space.dim))
        grip = list(self.action_space.gripper_dims)
        last = self.history.actions[-1] if self.history.actions else None
        out[:, grip] = last[grip] if last is not None else -1.0
        return self.action_space.clip(out).astype(np.float64)


def _pose(obs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, float] | None:
    """EE position, wxyz quaternion and opening from the observation, or None when any is missing or bad."""
    try:
        pos = np.asarray(obs[STATE_EE_POS], np.float64).reshape(3)
        quat = np.asarray(obs[STATE_EE_QUAT], np.float64).reshape(4)
        grip = float(np.asarray(obs.get(STATE_GRIPPER, 1.0), np.float64).reshape(()))
    except (KeyError, ValueError, TypeError):
        return None
    if not (np.isfinite(pos).all() and np.isfinite(quat).all() and np.isfinite(grip)) or np.linalg.norm(quat) < 1e-6:
        return None
    return pos, quat, grip


#: (the base's own n_action_steps, R2A's executed_steps) pairs already warned about in this process
_REPLANNING_WARNED: set[tuple[int, int]] = set()


def _warn_on_other_replanning(base: Policy, executed_steps: int) -> None:
    """R2A executes ``executed_steps`` of each chunk whatever the base does alone (a lerobot checkpoint left at its
    default executes 100), so a benchmark pair may differ in how often it re-plans, not only in R2A: said once per
    process (a benchmark builds a wrapper per episode)."""
    own = getattr(base, "n_action_steps", None)
    if not isinstance(own, int) or own == executed_steps or (own, executed_steps) in _REPLANNING_WARNED:
        return
    _REPLANNING_WARNED.add((own, executed_steps))
    log.warning("the base executes %d actions of each chunk on its own; R2A executes %d (executed_steps), so R2A "
                "re-plans %s often than the base alone (unless a run's n_action_steps sets both)", own,
                executed_steps, "more" if executed_steps < own else "less")


def _fallback(reason: str, step: int) -> dict[str, Any]:
    return {"fallback": reason, "step": step, "recovery": False}


def summarize_diagnostics(diagnostics: list[dict[str, Any]]) -> dict[str, Any]:
    """One episode's R2A summary from the ``result["r2a"]`` dicts of its queries (for the benchmark records):
    how often it fell back and why, the mean gate per dimension, the mean seed distance, the recovery steps; where a
    gate source traced them (the diagnostic oracles), the mean learned and oracle S and the chunks' errors against
    the expert's (``mean_learned_gate``, ``mean_oracle_gate``, ``mean_expert_error``)."""
    recovery = [d for d in diagnostics if d.get("recovery")]
    queries = [d for d in diagnostics if not d.get("recovery")]
    reasons: dict[str, int] = {}
    for d in queries:
        if d.get("fallback"):
            reasons[d["fallback"]] = reasons.get(d["fallback"], 0) + 1
    gates = [d["gate"] for d in queries if d.get("gate") is not None]
    seeds = [d["seed_distance"] for d in queries if d.get("seed_distance") is not None]
    out = {"queries": len(queries), "fallbacks": reasons,
           "fallback_share": sum(reasons.values()) / len(queries) if queries else None,
           "mean_gate": np.round(np.mean(gates, axis=0), 4).tolist() if gates else None,
           "mean_seed_distance": round(float(np.mean(seeds)), 4) if seeds else None,
           "recovery_steps": len(recovery)}
    for key in ("learned_gate", "oracle_gate"):  # traced by a gate source (the diagnostic oracles)
        values = [d[key] for d in queries if d.get(key) is not None]
        if values:
            out[f"mean_{key}"] = np.round(np.mean(values, axis=0), 4).tolist()
    errors = [d["expert_error"] for d in queries if d.get("expert_error")]
    if errors:
        out["mean_expert_error"] = {name: np.round(np.mean([e[name] for e in errors], axis=0), 3).tolist()
                                    for name in errors[0]}
    return out


def trace_diagnostics(steps: list[int], diagnostics: list[dict[str, Any]]) -> dict[str, Any]:
    """One episode's per-query R2A trace, column-wise (what the viewer plots, as the R2A page does): for each base
    query its control step, the gate S per dimension (3 decimals; None where it fell back), the fallback reason
    (None where it blended), the seed distance, the pull (mean |R2A's action − the base's| over the executed steps'
    motion dimensions: what R2A changed) and the base's disagreement with its own previous plan for those steps
    (None without one); start-pose recovery as the span of control steps it servoed."""
    recovering = [s for s, d in zip(steps, diagnostics) if d.get("recovery")]
    rows = [(s, d) for s, d in zip(steps, diagnostics) if not d.get("recovery")]

    def rounded(value: Any, digits: int) -> Any:
        return None if value is None else np.round(np.asarray(value, np.float64), digits).tolist()

    return {"step": [int(s) for s, _ in rows],
            "gate": [rounded(d.get("gate"), 3) for _, d in rows],
            "fallback": [d.get("fallback") for _, d in rows],
            "seed_distance": [rounded(d.get("seed_distance"), 3) for _, d in rows],
            "pull": [rounded(d.get("pull"), 4) for _, d in rows],
            "disagreement": [rounded(d.get("disagreement"), 4) for _, d in rows],
            "recovery": [min(recovering), max(recovering)] if recovering else None}


__all__ = ["BASE_FALLBACK", "BASE_NONFINITE", "ERROR", "FAR_FROM_GRAPH", "GATE_INPUT", "LOW_CONFIDENCE", "NO_PROPRIO",
           "UNKNOWN_TASK",
           "R2APolicy", "WrapperParts", "summarize_diagnostics", "trace_diagnostics"]
