"""The R2A wrapper: a policy that makes a frozen base policy's actions follow retrieved demonstration motion.

* :class:`r2a.wrapper.policy.R2APolicy` — ``infer``/``reset`` like every policy, around any base policy;
* :mod:`r2a.wrapper.gate` — the gate protocol and the constant gate;
* :mod:`r2a.wrapper.recovery` — start-pose recovery;
* :mod:`r2a.wrapper.config` / :func:`r2a.wrapper.build.build_r2a` — the YAML config and what it builds.
"""
