"""Policy registry: a name (optionally ``name:argument``) → a factory that builds a Policy for one simulator.

Factories receive a :class:`PolicyContext` (the simulator, for privileged experts and the action space; the
policy seed; the text after the colon, e.g. a checkpoint path). Unknown names list the valid ones.

This module registers what a deployment runs: the shipped bases, the adapters, the observation wrappers, R2A
(``r2a``, ``r2a:CONFIG.yaml``, ``r2a:FIT_DIR``) and one R2A preset per shipped base, named for it
(``r2a-builtin``, …: the settings the project recommends for that base). What only measures — the scripted
experts, the oracles, the ablations and the R2A variants under the names the published runs recorded — is
registered as a *diagnostic* (:attr:`PolicyEntry.diagnostic`) by :func:`eval.diagnostics.register_diagnostics`,
which every command and worker process of the benchmark calls; r2a never imports eval, so a deployment never sees
them. :func:`register_policy` and :func:`register_r2a_variant` are how either side adds a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from r2a_core.config import did_you_mean, shipped_path
from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy


@dataclass(frozen=True)
class PolicyContext:
    sim: Any
    seed: int
    arg: str | None = None


PolicyFactory = Callable[[PolicyContext], Policy]


@dataclass(frozen=True)
class PolicyEntry:
    """A registered name: what builds it, its one-line help, and whether it only measures."""

    factory: PolicyFactory
    help: str
    diagnostic: bool = False
    """not deployable, measurement only (privileged simulator state, an ablation, a variant of the project's
    history): registered by :mod:`eval.diagnostics`, listed apart by ``r2a policy list --all``"""


POLICIES: dict[str, PolicyEntry] = {}
#: how an unknown-name error and ``r2a policy list --all`` head the diagnostics
DIAGNOSTICS_HEADING = "diagnostics (not deployable / measurement only)"


def register_policy(name: str, help_: str, diagnostic: bool = False) -> Callable[[PolicyFactory], PolicyFactory]:
    """Decorator: make ``factory`` available as ``--policy name`` (``diagnostic``: a measurement-only name)."""

    def decorate(factory: PolicyFactory) -> PolicyFactory:
        old = POLICIES.get(name)
        if old is not None and old.diagnostic != diagnostic:
            raise ValueError(f"policy '{name}' is already registered as "
                             f"{'a diagnostic' if old.diagnostic else 'a deployable policy'}")
        POLICIES[name] = PolicyEntry(factory, help_, diagnostic)
        return factory

    return decorate


def policy_names(diagnostic: bool = False) -> list[str]:
    """The registered names, sorted: the deployable ones, or (``diagnostic``) the measurement-only ones."""
    return sorted(name for name, entry in POLICIES.items() if entry.diagnostic == diagnostic)


def parse_policy_spec(spec: str) -> tuple[str, str | None]:
    """``"name:arg"`` → ``("name", "arg")``; checks the name."""
    name, _, arg = spec.partition(":")
    if name not in POLICIES:
        valid = ", ".join(f"{n} ({POLICIES[n].help})" for n in policy_names())
        diagnostics = policy_names(diagnostic=True)
        more = (f"; {DIAGNOSTICS_HEADING}: {', '.join(diagnostics)}" if diagnostics else
                "; the diagnostics (scripted experts, oracles, ablations, earlier R2A variants) are known to the "
                "benchmark's commands (r2a bench, r2a serve, r2a policy dagger; r2a policy list --all)")
        raise R2AInputError(f"unknown policy '{name}'{did_you_mean(name, POLICIES)}; valid policies: {valid}{more}")
    return name, arg or None


def make_policy(spec: str, sim: Any = None, seed: int = 0) -> Policy:
    """Build the policy named by ``spec``; ``sim`` may be None for policies that do not need a simulator."""
    name, arg = parse_policy_spec(spec)
    return POLICIES[name].factory(PolicyContext(sim=sim, seed=seed, arg=arg))


def require_sim(ctx: PolicyContext, name: str) -> None:
    """For a factory whose policy reads the simulator's privileged state: refuse to build it without one."""
    if ctx.sim is None:
        raise R2AInputError(f"policy '{name}' reads the simulator's privileged state; it needs a simulator "
                            "(it cannot be served or run outside the benchmark)")


def require_argument(ctx: PolicyContext, name: str, expected: str) -> str:
    """The text after ``name:``; its absence is an input error that says what ``expected`` it is."""
    if not ctx.arg:
        raise R2AInputError(f"policy '{name}' needs an argument: {expected}")
    return ctx.arg


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


@register_policy("builtin-libero", "the built-in VLA trained on libero_spatial and libero_object "
                                   "(r2a/assets/builtin_libero), options as builtin's: "
                                   "'builtin-libero:?n_action_steps=4'")
def _builtin_libero(ctx: PolicyContext) -> Policy:
    from r2a.vla.policy import BUILTIN_LIBERO_CHECKPOINT

    return _shipped_base(ctx, "builtin-libero", BUILTIN_LIBERO_CHECKPOINT)


@register_policy("builtin-libero-strong", "the strong LIBERO base: the built-in recipe in full (spread arm starts, "
                                          "DART, DAgger) on libero_spatial and libero_object "
                                          "(r2a/assets/builtin_libero_strong), options as builtin's")
def _builtin_libero_strong(ctx: PolicyContext) -> Policy:
    from r2a.vla.policy import BUILTIN_LIBERO_STRONG_CHECKPOINT

    return _shipped_base(ctx, "builtin-libero-strong", BUILTIN_LIBERO_STRONG_CHECKPOINT)


def _action_space(ctx: PolicyContext) -> Any:
    """The simulator's action space; without a simulator (``r2a policy serve``) the built-in OSC_POSE one."""
    from r2a_core.types import OSC_POSE_DELTA

    return ctx.sim.action_space if ctx.sim is not None else OSC_POSE_DELTA


@register_policy("callable", "any Python function obs -> actions, 'callable:package.module:function'")
def _callable(ctx: PolicyContext) -> Policy:
    from r2a.adapters.callable_policy import CallablePolicy, load_callable
    from r2a.adapters.guard import GuardedPolicy

    spec, space = require_argument(ctx, "callable", "'callable:package.module:function'"), _action_space(ctx)
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

    arg = require_argument(ctx, "openpi", "'openpi:ws://HOST:PORT' or 'openpi:path/to/adapter.yaml' (with url:)")
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

    arg = require_argument(ctx, "lerobot", "'lerobot:path/to/checkpoint_dir' or 'lerobot:path/to/adapter.yaml'")
    space = _action_space(ctx)
    if arg.endswith((".yaml", ".yml")):
        config = load_adapter_config(arg)
        if config.checkpoint is None:
            raise R2AInputError(f"{config.path}: no 'checkpoint:' (expected a local lerobot checkpoint directory)")
        inner = LeRobotPolicy(config.checkpoint, config.keymap, space, device=config.device or "cpu")
    else:
        inner = LeRobotPolicy(arg, None, space)
    return GuardedPolicy(inner, space, name=f"lerobot:{arg}")


# ------------------------------------------------------------------------------------- observation wrappers

def harmonized(ctx: PolicyContext, name: str, **settings: Any) -> Policy:
    """The base named after ``name:`` seeing its camera images harmonized (``settings``: HarmonizeSettings')."""
    from r2a.observation.harmonize import HarmonizedPolicy, HarmonizeSettings
    from r2a.wrapper.config import resolve_path
    from r2a_core.visual_ood import load_image_stats

    spec = require_argument(ctx, name, f"the base policy's spec, e.g. {name}:builtin")
    config = HarmonizeSettings(enabled=True, **settings)
    return HarmonizedPolicy(make_policy(spec, ctx.sim, ctx.seed), load_image_stats(resolve_path(config.image_stats)),
                            config)


@register_policy("harmonize", "BASE's camera images normalized to the demos' when a photometric visual-OOD detector "
                              "fires (hysteresis), 'harmonize:BASE_SPEC', e.g. harmonize:builtin")
def _harmonize(ctx: PolicyContext) -> Policy:
    return harmonized(ctx, "harmonize")


@register_policy("canonicalize", "BASE seeing the agentview image warped back to the training view by the camera "
                                 "displacement estimated from the episode's first frame (gated: clean views pass), "
                                 "'canonicalize:BASE_SPEC', e.g. canonicalize:builtin")
def _canonicalize(ctx: PolicyContext) -> Policy:
    from r2a.observation.canonicalize import CanonicalizedPolicy, CanonicalizeSettings, load_reference
    from r2a.wrapper.config import resolve_path

    spec = require_argument(ctx, "canonicalize", "the base policy's spec, e.g. canonicalize:builtin")
    settings = CanonicalizeSettings(enabled=True)
    reference = load_reference(resolve_path(settings.reference))
    return CanonicalizedPolicy(make_policy(spec, ctx.sim, ctx.seed), reference, settings)


# ------------------------------------------------------------------------------------------------- R2A

@dataclass(frozen=True)
class R2AVariant:
    """An R2A name's settings: ``overrides`` (``section.field=value``) on ``default_config``."""

    overrides: tuple[str, ...]
    default_config: str | None = None
    """the config it starts from (None: configs/r2a/builtin.yaml); a config named after the colon replaces it"""


#: every R2A name (the generic ``r2a``, the presets, and the diagnostics' variants) → its settings
R2A_VARIANTS: dict[str, R2AVariant] = {}


def register_r2a_variant(name: str, overrides: Sequence[str], help_: str, default_config: str | None = None,
                         diagnostic: bool = True) -> None:
    """Register ``name`` as R2A with ``overrides`` applied before a spec's own, on ``default_config`` (None:
    configs/r2a/builtin.yaml). ``diagnostic`` (the default: a variant is a measurement unless it is a preset the
    project ships) lists it apart."""
    register_policy(name, help_, diagnostic)(lambda ctx: _r2a(ctx, name))
    R2A_VARIANTS[name] = R2AVariant(tuple(overrides), default_config)


def r2a_config_for(spec: str) -> Any:
    """The R2A config an R2A spec names: ``NAME``, ``NAME:CONFIG.yaml`` (or a directory ``r2a fit`` wrote),
    ``NAME:CONFIG.yaml?section.field=value&...`` or ``NAME:?overrides`` (the variant's overrides first)."""
    from r2a.wrapper.build import load_r2a_config

    name, arg = parse_policy_spec(spec)
    if name not in R2A_VARIANTS:
        raise R2AInputError(f"'{spec}' is not an R2A policy; R2A policies: {', '.join(R2A_VARIANTS)}")
    variant = R2A_VARIANTS[name]
    path, _, query = (arg or "").partition("?")
    default = variant.default_config
    return load_r2a_config(path or (shipped_path(default) if default else None),
                           [*variant.overrides, *(item for item in query.split("&") if item)])


def _r2a(ctx: PolicyContext, name: str) -> Policy:
    from r2a.wrapper.build import build_r2a

    config = r2a_config_for(f"{name}:{ctx.arg}" if ctx.arg else name)
    base = make_policy(config.base, ctx.sim, ctx.seed)
    space = ctx.sim.action_space if ctx.sim is not None else getattr(base, "action_space", None)
    return build_r2a(config, base, space)


#: the shipped configs of the LIBERO bases' parts
LIBERO_CONFIG = "configs/r2a/builtin_libero.yaml"
LIBERO_STRONG_CONFIG = "configs/r2a/builtin_libero_strong.yaml"
#: harmonized base images, and the base alone while it commands the gripper closed (carrying, placing)
HARMONIZE_HOLD = ("harmonize.enabled=true", "gate.holding_scale=0")
#: the gate trained on its own closed-loop rows with oracle-S targets (r2a/assets/R2A_ASSETS.md)
CLOSED_LOOP_GATE = "r2a/assets/r2a_gate_closed_loop"
#: view canonicalization's gate chosen on training seeds: warp only when the camera moved, i.e. the estimate gains
#: over the unmoved view and the photometric detector stays quiet (docs/experiments/canonicalize.md)
CANON_GATE = ("canonicalize.min_gain=0.2", "canonicalize.photometric_veto=r2a/assets/r2a_harmonize_stats.json")
#: the gate bounded at S = 0 on every dimension: the reference is still retrieved (and traced), never blended
NO_BLEND = ("gate.max_gate=0", "gate.translation=0", "gate.rotation=0")


def task_match_by_meaning(min_similarity: float, min_margin: float) -> list[str]:
    """Task matching by meaning with the thresholds ``r2a retriever task-match`` fitted for a graph on training
    paraphrases; a prompt that selects no task leaves the base alone (docs/experiments/do_no_harm.md)."""
    return ["task_match.mode=meaning", f"task_match.min_similarity={min_similarity}",
            f"task_match.min_margin={min_margin}", "task_match.unknown=base"]


register_r2a_variant(
    "r2a", [], "the base policy wrapped by R2A: 'r2a' (configs/r2a/builtin.yaml around builtin), 'r2a:CONFIG.yaml', "
               "'r2a:FIT_DIR' (the parts r2a fit made for any base), options "
               "'r2a:CONFIG.yaml?gate.translation=0.3&recovery.enabled=false'", diagnostic=False)
# One preset per shipped base, named for it: the settings the project recommends for that base today, each chosen on
# training seeds before its test episodes ran (docs/experiments/do_no_harm.md, docs/experiments/libero_strong.md).
# A later recommendation gets a new name; these keep meaning what their published runs measured.
register_r2a_variant(
    "r2a-builtin", [*HARMONIZE_HOLD, f"gate.checkpoint={CLOSED_LOOP_GATE}", "canonicalize.enabled=true", *CANON_GATE,
                    *task_match_by_meaning(0.65, 0.03)],
    "R2A as recommended around builtin: harmonized images, the base alone while it holds the gripper closed, the "
    "closed-loop gate, the view warped back only when the camera moved, task matching by meaning (an unknown task "
    "leaves the base alone); options as r2a's", diagnostic=False)
register_r2a_variant(
    "r2a-builtin-libero", [*HARMONIZE_HOLD, *task_match_by_meaning(0.70, 0.02)],
    "R2A as recommended around builtin-libero, with its LIBERO graph, retriever, gate and statistics "
    f"({LIBERO_CONFIG}): harmonized images, the base alone while it holds the gripper closed, task matching by "
    "meaning; options as r2a's", LIBERO_CONFIG, diagnostic=False)
register_r2a_variant(
    "r2a-builtin-libero-strong", [*HARMONIZE_HOLD, *task_match_by_meaning(0.70, 0.02), *NO_BLEND],
    "R2A as recommended around builtin-libero-strong, with the parts r2a fit made for it "
    f"({LIBERO_STRONG_CONFIG}): start-pose recovery, harmonized images and task matching by meaning, no reference "
    "blend (S = 0: on this strong base the blend cost clean success); options as r2a's", LIBERO_STRONG_CONFIG,
    diagnostic=False)
