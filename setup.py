"""The package list, the one thing pyproject.toml cannot say: ``configs/`` installs as the ``r2a_configs`` package
(pyproject's ``packages.find`` cannot rename a folder). Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

CODE = find_namespace_packages(include=["r2a*", "r2a_core*", "sim*", "graph_builder*", "gating*", "eval*", "demos*"])
CONFIGS = ["r2a_configs"] + [f"r2a_configs.{kind}" for kind in find_namespace_packages(where="configs")]

setup(packages=CODE + CONFIGS, package_dir={"r2a_configs": "configs"})
