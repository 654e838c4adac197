"""Policies chosen by name: ``make_policy("builtin")``, ``make_policy("r2a-builtin", sim, seed)``; the diagnostics
(experts, oracles, ablations, earlier variants) once :func:`eval.diagnostics.register_diagnostics` has run."""

from r2a.policies.registry import (
    POLICIES,
    PolicyContext,
    PolicyEntry,
    make_policy,
    parse_policy_spec,
    policy_names,
    register_policy,
    register_r2a_variant,
)

__all__ = ["POLICIES", "PolicyContext", "PolicyEntry", "make_policy", "parse_policy_spec", "policy_names",
           "register_policy", "register_r2a_variant"]
