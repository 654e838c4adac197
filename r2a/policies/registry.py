"""Policy registry: a name (optionally ``name:argument``) → a factory that builds a Policy for one simulator.

Factories receive a :class:`PolicyContext` (the simulator, for privileged experts and the action space; the
policy seed; the text after the colon, e.g. a checkpoint path). Unknown names list the valid ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from r2a_core.config import did_you_mean, shipped_path
from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy


@dataclass(frozen=True)
class PolicyContext:
    sim: Any
    seed: int
    arg: str | None = None


PolicyFactory = Callable[[PolicyContext], Policy]
POLICIES: dict[str, tuple[PolicyFactory, str]] = {}


def register_policy(name: str, help_: str) -> Callable[[PolicyFactory], PolicyFactory]:
    """Decorator: make ``factory`` available as ``--policy name``."""

    def decorate(factory: PolicyFactory) -> PolicyFactory:
        POLICIES[name] = (factory, help_)
        return factory

    return decorate


def parse_policy_spec(spec: str) -> tuple[str, str | None]:
    """``"name:arg"`` → ``("name", "arg")``; checks the name."""
    name, _, arg = spec.partition(":")
    if name not in POLICIES:
        valid = ", ".join(f"{n} ({h})" for n, (_, h) in sorted(POLICIES.items()))
        raise R2AInputError(f"unknown policy '{name}'{did_you_mean(name, POLICIES)}; valid policies: {valid}")
    return name, arg or None


def make_policy(spec: str, sim: Any = None, seed: int = 0) -> Policy:
    """Build the policy named by ``spec``; ``sim`` may be None for policies that do not need a simulator."""
    name, arg = parse_policy_spec(spec)
    return POLICIES[name][0](PolicyContext(sim=sim, seed=seed, arg=arg))


def _require_sim(ctx: PolicyContext, name: str) -> None:
    if ctx.sim is None:
        raise R2AInputError(f"policy '{name}' reads the simulator's privileged state; it needs a simulator "
                            "(it cannot be served or run outside the benchmark)")


def _query_options(query: str, types: dict[str, type], where: str) -> dict[str, Any]:
    """``"a=1&b=0.5"`` → typed options; unknown keys or unparsable values are input errors."""
    options: dict[str, Any] = {}
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        if key not in types:
            raise R2AInputError(f"{where}: unknown option '{key}'; valid options: {', '.join(types)}")
        try:
            options[key] = types[key](value)
        except ValueError:
            raise R2AInputError(f"{where}: option {key}={value!r} is not a {types[key].__name__}") from None
    return options


def _builtin_vla(checkpoint: str | None, query: str, spec: str) -> Policy:
    """The built-in VLA network from ``checkpoint`` (None: the shipped built-in one) with ``query``'s options."""
    from r2a.adapters.guard import GuardedPolicy
    from r2a.vla.policy import BuiltinVLAPolicy

    options = _query_options(query, {"n_action_steps": int, "temporal_ensemble": float}, spec)
    inner = BuiltinVLAPolicy(checkpoint or None, **options)
    return GuardedPolicy(inner, inner.action_space, name=f"builtin:{inner.path}")


@register_policy("builtin", "the built-in VLA; 'builtin' (shipped checkpoint), 'builtin:DIR', options "
                            "'builtin:DIR?n_action_steps=4' or '?temporal_ensemble=0.01'")
def _builtin(ctx: PolicyContext) -> Policy:
    path, _, query = (ctx.arg or "").partition("?")
    return _builtin_vla(path, query, f"builtin:{ctx.arg}")


def _shipped_base(ctx: PolicyContext, name: str, checkpoint: Path) -> Policy:
    """A shipped base checkpoint under its registry name: options only, never another checkpoint."""
    path, _, query = (ctx.arg or "").partition("?")
    if path:
        raise R2AInputError(f"{name}:{ctx.arg}: takes options only ('{name}:?n_action_steps=4'); "
                            f"another checkpoint is 'builtin:DIR'")
    return _builtin_vla(str(checkpoint), query, f"{name}:{ctx.arg}")


@register_policy("builtin-libero", "the built-in VLA trained on libero_spatial and libero_object (issue 34; "
                                   "r2a/assets/builtin_libero), options as builtin's: "
                                   "'builtin-libero:?n_action_steps=4'")
def _builtin_libero(ctx: PolicyContext) -> Policy:
    from r2a.vla.policy import BUILTIN_LIBERO_CHECKPOINT

    return _shipped_base(ctx, "builtin-libero", BUILTIN_LIBERO_CHECKPOINT)


@register_policy("builtin-libero-strong", "the strong LIBERO base: the built-in recipe in full (spread arm starts, "
                                          "DART, DAgger) on libero_spatial and libero_object (issue 46; "
                                          "r2a/assets/builtin_libero_strong), options as builtin's")
def _builtin_libero_strong(ctx: PolicyContext) -> Policy:
    from r2a.vla.policy import BUILTIN_LIBERO_STRONG_CHECKPOINT

    return _shipped_base(ctx, "builtin-libero-strong", BUILTIN_LIBERO_STRONG_CHECKPOINT)


@register_policy("expert", "the task's scripted expert (privileged simulator state)")
def _expert(ctx: PolicyContext) -> Policy:
    _require_sim(ctx, "expert")
    from demos.experts.scripted import make_expert

    return make_expert(ctx.sim)


@register_policy("expert_noisy", "scripted expert with Gaussian action noise, 'expert_noisy:SIGMA' (default 0.5)")
def _expert_noisy(ctx: PolicyContext) -> Policy:
    _require_sim(ctx, "expert_noisy")
    from demos.experts.scripted import make_expert
    from r2a.policies.wrappers import ActionNoisePolicy

    try:
        sigma = float(ctx.arg) if ctx.arg else 0.5
    except ValueError:
        raise R2AInputError(f"expert_noisy:{ctx.arg}: expected a number (noise standard deviation)") from None
    return ActionNoisePolicy(make_expert(ctx.sim), sigma, ctx.sim.action_space, ctx.seed)


def _adapter_arg(ctx: PolicyContext, name: str, expected: str) -> str:
    if not ctx.arg:
        raise R2AInputError(f"policy '{name}' needs an argument: {expected}")
    return ctx.arg


def _action_space(ctx: PolicyContext) -> Any:
    """The simulator's action space; without a simulator (``r2a policy serve``) the built-in OSC_POSE one."""
    from r2a_core.types import OSC_POSE_DELTA

    return ctx.sim.action_space if ctx.sim is not None else OSC_POSE_DELTA


@register_policy("callable", "any Python function obs -> actions, 'callable:package.module:function'")
def _callable(ctx: PolicyContext) -> Policy:
    from r2a.adapters.callable_policy import CallablePolicy, load_callable
    from r2a.adapters.guard import GuardedPolicy

    spec, space = _adapter_arg(ctx, "callable", "'callable:package.module:function'"), _action_space(ctx)
    target = load_callable(spec)
    if isinstance(target, type) and hasattr(target, "infer"):
        inner: Policy = target()  # a Policy class with a no-argument constructor
    else:
        inner = CallablePolicy(target, space.dim, name=spec)
    return GuardedPolicy(inner, space, name=f"callable:{spec}")


@register_policy("openpi", "an openpi-protocol policy server, 'openpi:ws://HOST:PORT' or 'openpi:ADAPTER.yaml'")
def _openpi(ctx: PolicyContext) -> Policy:
    import os

    from r2a.adapters.guard import GuardedPolicy
    from r2a.adapters.keymap import ADAPTER_DIR, adapter_yaml, load_adapter_config
    from r2a.adapters.openpi_policy import OpenPIWebsocketPolicy

    arg = _adapter_arg(ctx, "openpi", "'openpi:ws://HOST:PORT' or 'openpi:path/to/adapter.yaml' (with url:)")
    space = _action_space(ctx)
    is_url = arg.startswith(("ws://", "wss://"))
    if not is_url and not adapter_yaml(arg).is_file():
        raise R2AInputError(f"openpi:{arg}: expected ws://HOST:PORT or an adapter YAML (no such file; the "
                            f"shipped ones are in {ADAPTER_DIR})")
    config = load_adapter_config(ADAPTER_DIR / "identity.yaml" if is_url else adapter_yaml(arg))
    url = arg if is_url else config.url
    if not url:
        raise R2AInputError(f"{config.path}: no 'url:' (expected ws://HOST:PORT of the policy server)")
    api_key = os.environ.get(config.api_key_env) if config.api_key_env else None
    if config.api_key_env and not api_key:
        raise R2AInputError(f"{config.path}: api_key_env names ${config.api_key_env}, which is not set")
    inner = OpenPIWebsocketPolicy(url, config.keymap, space, api_key=api_key, timeout=config.timeout or 60.0)
    return GuardedPolicy(inner, space, name=f"openpi:{url}")


@register_policy("lerobot", "a local LeRobot checkpoint, 'lerobot:CHECKPOINT_DIR' or 'lerobot:ADAPTER.yaml'")
def _lerobot(ctx: PolicyContext) -> Policy:
    from r2a.adapters.guard import GuardedPolicy
    from r2a.adapters.keymap import load_adapter_config
    from r2a.adapters.lerobot_policy import LeRobotPolicy

    arg = _adapter_arg(ctx, "lerobot", "'lerobot:path/to/checkpoint_dir' or 'lerobot:path/to/adapter.yaml'")
    space = _action_space(ctx)
    if arg.endswith((".yaml", ".yml")):
        config = load_adapter_config(arg)
        if config.checkpoint is None:
            raise R2AInputError(f"{config.path}: no 'checkpoint:' (expected a local lerobot checkpoint directory)")
        inner = LeRobotPolicy(config.checkpoint, config.keymap, space, device=config.device or "cpu")
    else:
        inner = LeRobotPolicy(arg, None, space)
    return GuardedPolicy(inner, space, name=f"lerobot:{arg}")


# ------------------------------------------------------------------------------------------------- R2A

def r2a_config_for(spec: str) -> Any:
    """The R2A config an ``r2a``-family spec names: ``NAME``, ``NAME:CONFIG.yaml``,
    ``NAME:CONFIG.yaml?section.field=value&...`` or ``NAME:?overrides`` (the ablation's overrides first)."""
    from r2a.wrapper.build import load_r2a_config

    name, arg = parse_policy_spec(spec)
    if name not in R2A_ABLATIONS:
        raise R2AInputError(f"'{spec}' is not an R2A policy; R2A policies: {', '.join(R2A_ABLATIONS)}")
    path, _, query = (arg or "").partition("?")
    default = R2A_DEFAULT_CONFIGS.get(name)
    return load_r2a_config(path or (shipped_path(default) if default else None),
                           R2A_ABLATIONS[name][0] + [item for item in query.split("&") if item])


def _r2a_with(ctx: PolicyContext, name: str, ablation: list[str]) -> Policy:
    from r2a.wrapper.build import build_r2a

    config = r2a_config_for(f"{name}:{ctx.arg}" if ctx.arg else name)
    base = make_policy(config.base, ctx.sim, ctx.seed)
    space = ctx.sim.action_space if ctx.sim is not None else getattr(base, "action_space", None)
    return build_r2a(config, base, space)


#: the gate trained on r2a-harmonize-hold's closed-loop rows, oracle-S target (r2a/assets/R2A_ASSETS.md)
CLOSED_LOOP_GATE = "r2a/assets/r2a_gate_closed_loop"
#: the view warp's gate chosen on training seeds (issue 49 lever 1; docs/experiments/canonicalize.md)
CANON_GATE = ("canonicalize.min_gain=0.2", "canonicalize.photometric_veto=r2a/assets/r2a_harmonize_stats.json")
#: the gate bounded at S = 0 on every dimension: the reference is still retrieved (and traced), never blended
NO_BLEND = ("gate.max_gate=0", "gate.translation=0", "gate.rotation=0")


def task_match_by_meaning(min_similarity: float, min_margin: float) -> list[str]:
    """Task matching by meaning with the thresholds ``r2a retriever task-match`` fitted for a graph on training
    paraphrases; a prompt that selects no task leaves the base alone (issue 49 lever 2)."""
    return ["task_match.mode=meaning", f"task_match.min_similarity={min_similarity}",
            f"task_match.min_margin={min_margin}", "task_match.unknown=base"]


R2A_ABLATIONS: dict[str, tuple[list[str], str]] = {
    "r2a": ([], "the base policy wrapped by R2A; 'r2a' (configs/r2a/builtin.yaml), 'r2a:CONFIG.yaml', options "
                "'r2a:CONFIG.yaml?gate.translation=0.3&recovery.enabled=false'"),
    "r2a-knn": (["retrieval.mode=knn"], "R2A with plain FAISS nearest neighbours instead of the GNN (ablation)"),
    "r2a-nogate": (["gate.kind=replay"], "R2A replaying the reference instead of gating it (ablation)"),
    "r2a-norecovery": (["recovery.enabled=false"], "R2A without start-pose recovery (ablation)"),
    "r2a-fixed": (["gate.kind=fixed"], "R2A with the best constant S of the learned gate's training split (ablation)"),
    "r2a-constant": (["gate.kind=constant"], "R2A with the R2A page's constant S: 0.25 translation, 0.05 rotation"),
    "r2a-gate-nodisagreement": (["gate.checkpoint=r2a/assets/r2a_gate_nodisagreement"],
                                "R2A whose learned gate does not read the base's disagreement signal (ablation)"),
    "r2a-gate-noimage": (["gate.checkpoint=r2a/assets/r2a_gate_noimage"],
                         "R2A whose learned gate does not read the image-OOD signal (ablation)"),
    "r2a-harmonize": (["harmonize.enabled=true"],
                      "R2A around a base whose images are harmonized when the photometric detector fires"),
    "r2a-harmonize-hold": (["harmonize.enabled=true", "gate.holding_scale=0"],
                           "r2a-harmonize with the base alone while it commands the gripper closed "
                           "(carrying, placing)"),
    "r2a-harmonize-hold-canon": (["harmonize.enabled=true", "gate.holding_scale=0", "canonicalize.enabled=true"],
                                 "r2a-harmonize-hold around a base whose agentview image is warped back to the "
                                 "training view (view canonicalization, estimated from the first frame)"),
    "r2a-harmonize-hold-clgate": (["harmonize.enabled=true", "gate.holding_scale=0",
                                   f"gate.checkpoint={CLOSED_LOOP_GATE}"],
                                  "r2a-harmonize-hold whose gate was trained on its own closed-loop rows with "
                                  "oracle-S targets (issue 35, lever 1)"),
    "r2a-harmonize-hold-clgate-canon": (["harmonize.enabled=true", "gate.holding_scale=0",
                                         f"gate.checkpoint={CLOSED_LOOP_GATE}", "canonicalize.enabled=true"],
                                        "r2a-harmonize-hold-clgate with view canonicalization (levers 1 and 2)"),
    "r2a-libero": (["harmonize.enabled=true", "gate.holding_scale=0"],
                   "r2a-harmonize-hold on LIBERO: around the LIBERO base with LIBERO's graph, retriever, gate and "
                   "statistics (configs/r2a/builtin_libero.yaml; issue 34)"),
    "r2a-noharm": (["harmonize.enabled=true", "gate.holding_scale=0", f"gate.checkpoint={CLOSED_LOOP_GATE}",
                    "canonicalize.enabled=true", *CANON_GATE, *task_match_by_meaning(0.65, 0.03)],
                   "r2a-harmonize-hold-clgate-canon with issue 49's levers, chosen on training seeds: the view warp "
                   "only when the camera moved (photometric veto, min_gain 0.2) and task matching by meaning (an "
                   "unknown task leaves the base alone)"),
    "r2a-libero-noharm": (["harmonize.enabled=true", "gate.holding_scale=0", *task_match_by_meaning(0.70, 0.02)],
                          "r2a-libero with task matching by meaning (issue 49: an unknown task leaves the base "
                          "alone; thresholds fitted on the LIBERO graph's training paraphrases)"),
    "r2a-libero-strong": (["harmonize.enabled=true", "gate.holding_scale=0", *task_match_by_meaning(0.70, 0.02)],
                          "r2a-libero-noharm's settings around the strong LIBERO base with its own parts, made by "
                          "r2a fit (configs/fit/builtin_libero_strong.yaml; issue 46)"),
    "r2a-libero-strong-noharm": (["harmonize.enabled=true", "gate.holding_scale=0",
                                  *task_match_by_meaning(0.70, 0.02), *NO_BLEND],
                                 "r2a-libero-strong without the reference blend (S = 0): start-pose recovery, "
                                 "harmonization and task matching only; chosen on training seeds over the seven "
                                 "factors, where the blend cost the strong base clean success (issue 46)"),
}
#: R2A names whose config is not configs/r2a/builtin.yaml (a config named after the colon replaces it)
R2A_DEFAULT_CONFIGS: dict[str, str] = {"r2a-libero": "configs/r2a/builtin_libero.yaml",
                                       "r2a-libero-noharm": "configs/r2a/builtin_libero.yaml",
                                       "r2a-libero-strong": "configs/r2a/builtin_libero_strong.yaml",
                                       "r2a-libero-strong-noharm": "configs/r2a/builtin_libero_strong.yaml"}


def _harmonized(ctx: PolicyContext, name: str, **settings: Any) -> Policy:
    from r2a.observation.harmonize import HarmonizedPolicy, HarmonizeSettings
    from r2a.wrapper.config import resolve_path
    from r2a_core.visual_ood import load_image_stats

    spec = _adapter_arg(ctx, name, "the base policy's spec, e.g. harmonize:builtin")
    config = HarmonizeSettings(enabled=True, **settings)
    return HarmonizedPolicy(make_policy(spec, ctx.sim, ctx.seed), load_image_stats(resolve_path(config.image_stats)),
                            config)


@register_policy("harmonize", "BASE's camera images normalized to the demos' when a photometric visual-OOD detector "
                              "fires (hysteresis), 'harmonize:BASE_SPEC', e.g. harmonize:builtin")
def _harmonize(ctx: PolicyContext) -> Policy:
    return _harmonized(ctx, "harmonize")


@register_policy("harmonize-always", "BASE's camera images always normalized to the demos' (ablation)")
def _harmonize_always(ctx: PolicyContext) -> Policy:
    return _harmonized(ctx, "harmonize-always", mode="always")


def _register_r2a(name: str, ablation: list[str], help_: str) -> None:
    register_policy(name, help_)(lambda ctx: _r2a_with(ctx, name, ablation))


for _name, (_ablation, _help) in R2A_ABLATIONS.items():
    _register_r2a(_name, _ablation, _help)


# ------------------------------------------------------------------------------ diagnostic oracles (not deployable)

#: the published variant the oracles change one part of (r2a/policies/oracles.py)
ORACLE_VARIANT = "r2a-harmonize-hold"
#: name → (the expert's chunk as the reference, the oracle S as the gate), help
ORACLES: dict[str, tuple[tuple[bool, bool], str]] = {
    "oracle-ref": ((True, False), "NOT deployable, a headroom diagnostic (privileged simulator state): "
                                  "r2a-harmonize-hold blending toward the scripted expert's own next actions"),
    "oracle-gate": ((False, True), "NOT deployable, a headroom diagnostic: r2a-harmonize-hold with the per-query "
                                   "S that brings the blend closest to the scripted expert's next actions"),
    "oracle-both": ((True, True), "NOT deployable, a headroom diagnostic: the expert's next actions as the "
                                  "reference and the oracle S (the ceiling of the bounded blend)"),
}


def _oracle(ctx: PolicyContext, name: str, expert_reference: bool, oracle_s: bool) -> Policy:
    _require_sim(ctx, name)
    from r2a.policies.oracles import build_oracle

    config = r2a_config_for(f"{ORACLE_VARIANT}:{ctx.arg}" if ctx.arg else ORACLE_VARIANT)
    base = make_policy(config.base, ctx.sim, ctx.seed)
    return build_oracle(name, config, base, ctx.sim, expert_reference, oracle_s)


def _register_oracle(name: str, parts: tuple[bool, bool], help_: str) -> None:
    register_policy(name, help_)(lambda ctx: _oracle(ctx, name, *parts))


for _name, (_parts, _help) in ORACLES.items():
    _register_oracle(_name, _parts, _help)


# ------------------------------------------------------------------------------------- view canonicalization

@register_policy("oracle-canonicalize", "NOT deployable, a headroom diagnostic (privileged simulator state): BASE "
                                        "seeing the agentview image warped (table-plane homography) from the TRUE "
                                        "shifted camera pose to the clean one, 'oracle-canonicalize:BASE_SPEC'")
def _oracle_canonicalize(ctx: PolicyContext) -> Policy:
    _require_sim(ctx, "oracle-canonicalize")
    from r2a.observation.canonicalize import OracleCanonicalizedPolicy

    spec = _adapter_arg(ctx, "oracle-canonicalize", "the base policy's spec, e.g. oracle-canonicalize:builtin")
    return OracleCanonicalizedPolicy(make_policy(spec, ctx.sim, ctx.seed), ctx.sim)


@register_policy("canonicalize", "BASE seeing the agentview image warped back to the training view by the camera "
                                 "displacement estimated from the episode's first frame (gated: clean views pass), "
                                 "'canonicalize:BASE_SPEC', e.g. canonicalize:builtin")
def _canonicalize(ctx: PolicyContext) -> Policy:
    from r2a.observation.canonicalize import CanonicalizedPolicy, CanonicalizeSettings, load_reference
    from r2a.wrapper.config import resolve_path

    spec = _adapter_arg(ctx, "canonicalize", "the base policy's spec, e.g. canonicalize:builtin")
    settings = CanonicalizeSettings(enabled=True)
    reference = load_reference(resolve_path(settings.reference))
    return CanonicalizedPolicy(make_policy(spec, ctx.sim, ctx.seed), reference, settings)
