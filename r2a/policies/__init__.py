"""Policies chosen by name: ``make_policy("expert", sim, seed)``, ``make_policy("expert_noisy:0.3", ...)``."""

from r2a.policies.registry import POLICIES, PolicyContext, make_policy, parse_policy_spec, register_policy

__all__ = ["POLICIES", "PolicyContext", "make_policy", "parse_policy_spec", "register_policy"]
