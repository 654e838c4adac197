"""The diagnostic policies: what the benchmark measures with and a deployment never runs.

:func:`register_diagnostics` registers them into r2a's policy registry as *diagnostics*
(:attr:`r2a.policies.registry.PolicyEntry.diagnostic`); every command and worker process that builds policies for a
measurement calls it first (``r2a bench run`` and its episode workers, ``bench calibrate``, ``bench perf policy``,
``r2a serve``, ``r2a policy dagger`` and ``harmonize-check``, ``r2a policy list --all``). r2a never imports this
module, so a deployment loads none of them. Four kinds:

* the scripted experts (``expert``, ``expert_noisy``): privileged simulator state; the benchmark's known answer;
* the oracles (``oracle-ref``, ``oracle-gate``, ``oracle-both``: :mod:`eval.oracles`; ``oracle-canonicalize``):
  R2A or the base with one part made right from privileged simulator state — how much that part could buy;
* ablations: R2A or an observation wrapper with one part removed or replaced (``r2a-knn``, …, ``harmonize-always``);
* the R2A variants of the project's history, under the names its published runs recorded (docs/results/*/run.json),
  each meaning exactly what it meant when it ran. What the project recommends for each shipped base is r2a's preset
  named for that base (``r2a-builtin``, ``r2a-builtin-libero``, ``r2a-builtin-libero-strong``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from r2a.policies.registry import (
    CANON_GATE,
    CLOSED_LOOP_GATE,
    HARMONIZE_HOLD,
    LIBERO_CONFIG,
    LIBERO_STRONG_CONFIG,
    NO_BLEND,
    PolicyContext,
    harmonized,
    make_policy,
    r2a_config_for,
    register_policy,
    register_r2a_variant,
    require_argument,
    require_sim,
    task_match_by_meaning,
)
from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy
from r2a_core.types import ActionSpace

#: the variant the oracles change one part of (eval/oracles.py)
ORACLE_VARIANT = "r2a-harmonize-hold"

#: R2A with one part removed or replaced: name → (overrides, help); on configs/r2a/builtin.yaml
R2A_ABLATIONS: dict[str, tuple[list[str], str]] = {
    "r2a-knn": (["retrieval.mode=knn"], "ablation: R2A with plain FAISS nearest neighbours instead of the GNN"),
    "r2a-nogate": (["gate.kind=replay"], "ablation: R2A replaying the reference instead of gating it"),
    "r2a-norecovery": (["recovery.enabled=false"], "ablation: R2A without start-pose recovery"),
    "r2a-fixed": (["gate.kind=fixed"], "ablation: R2A with the best constant S of the learned gate's training split"),
    "r2a-constant": (["gate.kind=constant"], "ablation: R2A with the R2A page's constant S, 0.25 translation and "
                                             "0.05 rotation"),
    "r2a-gate-nodisagreement": (["gate.checkpoint=r2a/assets/r2a_gate_nodisagreement"],
                                "ablation: R2A whose learned gate does not read the base's disagreement signal"),
    "r2a-gate-noimage": (["gate.checkpoint=r2a/assets/r2a_gate_noimage"],
                         "ablation: R2A whose learned gate does not read the image-OOD signal"),
}

_CLGATE = f"gate.checkpoint={CLOSED_LOOP_GATE}"
_LIBERO_MATCH = task_match_by_meaning(0.70, 0.02)
#: the R2A variants the project's published runs name: name → (overrides, default config (None:
#: configs/r2a/builtin.yaml), help). Never change what a name here means: its runs would no longer reproduce.
R2A_HISTORY: dict[str, tuple[list[str], str | None, str]] = {
    "r2a-harmonize": (
        ["harmonize.enabled=true"], None,
        "earlier variant: R2A around a base whose images are harmonized when the photometric detector fires"),
    "r2a-harmonize-hold": (
        [*HARMONIZE_HOLD], None,
        "earlier variant: r2a-harmonize with the base alone while it commands the gripper closed (carrying, placing)"),
    "r2a-harmonize-hold-canon": (
        [*HARMONIZE_HOLD, "canonicalize.enabled=true"], None,
        "earlier variant: r2a-harmonize-hold around a base whose agentview image is warped back to the training view "
        "(view canonicalization, estimated from the first frame)"),
    "r2a-harmonize-hold-clgate": (
        [*HARMONIZE_HOLD, _CLGATE], None,
        "earlier variant: r2a-harmonize-hold whose gate was trained on its own closed-loop rows with oracle-S targets"),
    "r2a-harmonize-hold-clgate-canon": (
        [*HARMONIZE_HOLD, _CLGATE, "canonicalize.enabled=true"], None,
        "earlier variant: r2a-harmonize-hold with the closed-loop gate and view canonicalization"),
    "r2a-noharm": (
        [*HARMONIZE_HOLD, _CLGATE, "canonicalize.enabled=true", *CANON_GATE, *task_match_by_meaning(0.65, 0.03)], None,
        "earlier variant: r2a-harmonize-hold-clgate-canon with the view warped only when the camera moved and task "
        "matching by meaning; the settings r2a-builtin ships, under the name its runs recorded"),
    "r2a-libero": (
        [*HARMONIZE_HOLD], LIBERO_CONFIG,
        f"earlier variant: r2a-harmonize-hold around builtin-libero with its LIBERO parts ({LIBERO_CONFIG})"),
    "r2a-libero-noharm": (
        [*HARMONIZE_HOLD, *_LIBERO_MATCH], LIBERO_CONFIG,
        "earlier variant: r2a-libero with task matching by meaning; the settings r2a-builtin-libero ships, under the "
        "name its runs recorded"),
    "r2a-libero-strong": (
        [*HARMONIZE_HOLD, *_LIBERO_MATCH], LIBERO_STRONG_CONFIG,
        "earlier variant: r2a-libero-noharm's settings around builtin-libero-strong with the parts r2a fit made for it "
        f"({LIBERO_STRONG_CONFIG}), the reference blend included"),
    "r2a-libero-strong-noharm": (
        [*HARMONIZE_HOLD, *_LIBERO_MATCH, *NO_BLEND], LIBERO_STRONG_CONFIG,
        "earlier variant: r2a-libero-strong without the reference blend (S = 0); the settings "
        "r2a-builtin-libero-strong ships, under the name its runs recorded"),
}

#: the R2A oracles: name → (the expert's chunk as the reference, the oracle S as the gate), help
ORACLES: dict[str, tuple[tuple[bool, bool], str]] = {
    "oracle-ref": ((True, False), "headroom (privileged simulator state): r2a-harmonize-hold blending toward the "
                                  "scripted expert's own next actions; 'oracle-ref:CONFIG.yaml?…' on another config"),
    "oracle-gate": ((False, True), "headroom (privileged simulator state): r2a-harmonize-hold with the per-query S "
                                   "that brings the blend closest to the scripted expert's next actions"),
    "oracle-both": ((True, True), "headroom (privileged simulator state): the expert's next actions as the reference "
                                  "and the oracle S (the ceiling of the bounded blend)"),
}


def register_diagnostics() -> None:
    """Register every diagnostic policy (again: the same entries, so calling it twice changes nothing)."""
    register_policy("expert", "the task's scripted expert (privileged simulator state)", diagnostic=True)(_expert)
    register_policy("expert_noisy", "the scripted expert with Gaussian action noise, 'expert_noisy:SIGMA' (default "
                                    "0.5): a policy the statistics must find worse", diagnostic=True)(_expert_noisy)
    for name, (parts, help_) in ORACLES.items():
        register_policy(name, help_, diagnostic=True)(_oracle_factory(name, *parts))
    register_policy("oracle-canonicalize", "headroom (privileged simulator state): BASE seeing the agentview image "
                                           "warped (table-plane homography) from the TRUE shifted camera pose to the "
                                           "clean one, 'oracle-canonicalize:BASE_SPEC'",
                    diagnostic=True)(_oracle_canonicalize)
    register_policy("harmonize-always", "ablation: BASE's camera images always normalized to the demos', "
                                        "'harmonize-always:BASE_SPEC'", diagnostic=True)(_harmonize_always)
    for name, (overrides, help_) in R2A_ABLATIONS.items():
        register_r2a_variant(name, overrides, help_)
    for name, (overrides, default_config, help_) in R2A_HISTORY.items():
        register_r2a_variant(name, overrides, help_, default_config)


# ------------------------------------------------------------------------------------------- the scripted experts

def _expert(ctx: PolicyContext) -> Policy:
    require_sim(ctx, "expert")
    from demos.experts.scripted import make_expert

    return make_expert(ctx.sim)


def _expert_noisy(ctx: PolicyContext) -> Policy:
    require_sim(ctx, "expert_noisy")
    from demos.experts.scripted import make_expert

    try:
        sigma = float(ctx.arg) if ctx.arg else 0.5
    except ValueError:
        raise R2AInputError(f"expert_noisy:{ctx.arg}: expected a number (noise standard deviation)") from None
    return ActionNoisePolicy(make_expert(ctx.sim), sigma, ctx.sim.action_space, ctx.seed)


class ActionNoisePolicy:
    """Adds seeded Gaussian noise to the non-gripper dimensions of another policy's chunk, then clips.

    A deliberately degraded policy with a known direction of effect, used to check that the benchmark's
    statistics move the right way.
    """

    def __init__(self, inner: Policy, sigma: float, action_space: ActionSpace, seed: int) -> None:
        self.inner, self.sigma, self.action_space, self.seed = inner, float(sigma), action_space, seed
        self._rng = np.random.default_rng(seed)

    def reset(self) -> None:
        self.inner.reset()
        self._rng = np.random.default_rng(self.seed)

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        out = dict(self.inner.infer(obs))
        actions = np.array(out["actions"], dtype=np.float32)
        noise = self._rng.normal(0.0, self.sigma, actions.shape).astype(np.float32)
        noise[:, list(self.action_space.gripper_dims)] = 0.0
        out["actions"] = self.action_space.clip(actions + noise)
        return out


# ---------------------------------------------------------------------------------------------------- the oracles

def _oracle_factory(name: str, expert_reference: bool, oracle_s: bool) -> Any:
    def factory(ctx: PolicyContext) -> Policy:
        require_sim(ctx, name)
        from eval.oracles import build_oracle

        config = r2a_config_for(f"{ORACLE_VARIANT}:{ctx.arg}" if ctx.arg else ORACLE_VARIANT)
        base = make_policy(config.base, ctx.sim, ctx.seed)
        return build_oracle(name, config, base, ctx.sim, expert_reference, oracle_s)

    return factory


def _oracle_canonicalize(ctx: PolicyContext) -> Policy:
    require_sim(ctx, "oracle-canonicalize")
    from r2a.observation.canonicalize import OracleCanonicalizedPolicy

    spec = require_argument(ctx, "oracle-canonicalize", "the base policy's spec, e.g. oracle-canonicalize:builtin")
    return OracleCanonicalizedPolicy(make_policy(spec, ctx.sim, ctx.seed), ctx.sim)


# ------------------------------------------------------------------------------------------------------ ablations

def _harmonize_always(ctx: PolicyContext) -> Policy:
    return harmonized(ctx, "harmonize-always", mode="always")


__all__ = ["ORACLES", "ORACLE_VARIANT", "R2A_ABLATIONS", "R2A_HISTORY", "ActionNoisePolicy", "register_diagnostics"]
