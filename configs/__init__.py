"""The shipped configs as package data: a wheel installs this folder as the ``r2a_configs`` package (setup.py), and
``r2a_core.config.shipped_path("configs/...")`` finds a file in it from any working directory."""
