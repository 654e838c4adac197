"""Offline: demonstrations → spatiotemporal motion-primitive graph with a FAISS index.

Main entry points, each in its module (import them from there; ``import graph_builder`` stays cheap):

* :func:`graph_builder.build.build_graph` / :func:`~graph_builder.build.build_graph_from_paths` — build a
  :class:`~graph_builder.motion_graph.MotionGraph` in memory;
* :func:`graph_builder.storage.save_graph` / :func:`~graph_builder.storage.load_graph` /
  :func:`~graph_builder.storage.read_manifest` — the versioned on-disk format;
* :class:`graph_builder.motion_graph.MotionGraph` — ``make_key``, ``search`` (seed retrieval) and ``to_pyg`` for the
  run-time retriever;
* :class:`graph_builder.config.GraphConfig` / :func:`~graph_builder.config.load_config` — typed build config
  (``configs/graph/default.yaml``).
"""

import logging

# faiss logs at INFO which CPU variant it loads (and that AVX2 is missing) on every import: noise for users
logging.getLogger("faiss.loader").setLevel(logging.WARNING)
