"""The built-in shift benchmark: simulator backends (``eval.envs``), shift factors, pairing, statistics, reports."""
