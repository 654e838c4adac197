"""r2a run time: the retrieval-augmented wrapper around a frozen policy, adapters, and the ``r2a`` command."""

__version__ = "0.1.0"
