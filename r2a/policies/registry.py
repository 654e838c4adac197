"""Policy registry: a name (optionally ``name:argument``) → a factory that builds a Policy for one simulator.

Factories receive a :class:`PolicyContext` (the simulator, for privileged experts and the action space; the
policy seed; the text after the colon, e.g. a checkpoint path). Unknown names list the valid ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

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
        raise R2AInputError(f"unknown policy '{name}'; valid policies: {valid}")
    return name, arg or None


def make_policy(spec: str, sim: Any, seed: int) -> Policy:
    name, arg = parse_policy_spec(spec)
    return POLICIES[name][0](PolicyContext(sim=sim, seed=seed, arg=arg))


@register_policy("expert", "the task's scripted expert (privileged simulator state)")
def _expert(ctx: PolicyContext) -> Policy:
    from demos.experts.scripted import make_expert

    return make_expert(ctx.sim)


@register_policy("expert_noisy", "scripted expert with Gaussian action noise, 'expert_noisy:SIGMA' (default 0.5)")
def _expert_noisy(ctx: PolicyContext) -> Policy:
    from demos.experts.scripted import make_expert
    from r2a.policies.wrappers import ActionNoisePolicy

    try:
        sigma = float(ctx.arg) if ctx.arg else 0.5
    except ValueError:
        raise R2AInputError(f"expert_noisy:{ctx.arg}: expected a number (noise standard deviation)") from None
    return ActionNoisePolicy(make_expert(ctx.sim), sigma, ctx.sim.action_space, ctx.seed)
