"""r2a run time: what a deployment imports to wrap a frozen policy — adapters, the built-in VLA's network and loader,
retrieval, the observation wrappers, the R2A wrapper and its gate, the policy registry, the server and proxy.

Learning lives a floor up (``training``, ``gating``), the command on the top floor (``r2a_cli``); nothing here imports
them (docs/architecture.md, "The package rule").
"""

__version__ = "0.1.0"
