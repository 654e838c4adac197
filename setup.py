"""The package list, the one thing pyproject.toml cannot say: ``configs/`` installs as the ``r2a_configs`` package
(pyproject's ``packages.find`` cannot rename a folder). Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

#: the import packages (``r2a*`` also matches ``r2a_core`` and ``r2a_cli``)
CODE = find_namespace_packages(include=["r2a*", "r2a_core*", "sim*", "demos*", "graph_builder*", "training*", "gating*",
                                        "fit*", "eval*"])
CONFIGS = ["r2a_configs"] + [f"r2a_configs.{kind}" for kind in find_namespace_packages(where="configs")]

setup(packages=CODE + CONFIGS, package_dir={"r2a_configs": "configs"})
