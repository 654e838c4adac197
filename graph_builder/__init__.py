"""Offline: demonstrations → spatiotemporal motion-primitive graph with a FAISS index.

Main entry points (imported lazily so ``import graph_builder`` stays cheap):

* :func:`build_graph` / :func:`build_graph_from_paths` — build a :class:`MotionGraph` in memory;
* :func:`save_graph` / :func:`load_graph` — the versioned on-disk format (:mod:`graph_builder.storage`);
* :class:`MotionGraph` — ``make_key``, ``search`` (seed retrieval) and ``to_pyg`` for the run-time retriever;
* :class:`GraphConfig` / :func:`load_config` — typed build config (``configs/graph/default.yaml``).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

# faiss logs at INFO which CPU variant it loads (and that AVX2 is missing) on every import: noise for users
logging.getLogger("faiss.loader").setLevel(logging.WARNING)

_EXPORTS = {
    "build_graph": "graph_builder.build",
    "build_graph_from_paths": "graph_builder.build",
    "build_graph_from_episodes": "graph_builder.build",
    "save_graph": "graph_builder.storage",
    "load_graph": "graph_builder.storage",
    "read_manifest": "graph_builder.storage",
    "MotionGraph": "graph_builder.motion_graph",
    "GraphConfig": "graph_builder.config",
    "load_config": "graph_builder.config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'graph_builder' has no attribute {name!r}")
