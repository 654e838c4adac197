"""``r2a graph build`` and ``r2a graph info``.

build: demonstrations (HDF5 files and LeRobot v3 directories, mixed) → graph directory; prints the graph's
JSON summary. info: a graph directory → JSON summary (``--verify`` also hashes and cross-checks every file).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from graph_builder.config import config_help
from r2a_cli.outputs import add_output
from r2a_core.errors import R2AInputError

log = logging.getLogger(__name__)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Build and inspect motion-primitive graphs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{build,info}")

    build = sub.add_parser("build", help="demonstrations → motion-primitive graph with a FAISS index",
                           description="Segment successful demonstrations into motion primitives, connect them "
                                       "with temporal and spatial edges, index their kinematic keys, and write a "
                                       "versioned graph directory (atomically).",
                           epilog="config fields (--set SECTION.FIELD=VALUE):\n" + config_help(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    build.add_argument("inputs", nargs="+", metavar="INPUT",
                       help="HDF5 demonstration files and/or LeRobot v3 dataset directories")
    add_output(build, "--out", kind="dir", required=True, metavar="DIR", help="graph directory to write")
    build.add_argument("--config", metavar="YAML", help="graph config (default: built-in defaults, identical "
                                                        "to configs/graph/default.yaml)")
    build.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                       help="override one config value, e.g. --set segmentation.stride=10 (repeatable)")
    build.add_argument("--force", action="store_true", help="replace an existing graph at --out")
    build.add_argument("--no-progress", action="store_true", help="hide progress bars")

    info = sub.add_parser("info", help="print a graph's JSON summary",
                          description="Print counts, tasks, sources, key and index settings of a graph.")
    info.add_argument("graph", metavar="DIR", help="graph directory")
    info.add_argument("--verify", action="store_true", help="also hash every file and cross-check the arrays")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.command == "build":
        return _build(args)
    if args.command == "info":
        return _info(args)
    raise AssertionError(args.command)


def _build(args: argparse.Namespace) -> int:
    from graph_builder.build import build_graph_from_paths
    from graph_builder.config import load_config
    from graph_builder.storage import save_graph

    cfg = load_config(args.config, args.set)
    out = Path(args.out)
    if out.exists() and not args.force and (not out.is_dir() or any(out.iterdir())):  # fail before building
        raise R2AInputError(f"{out}: already exists; choose another --out or pass --force to replace it")
    graph = build_graph_from_paths(args.inputs, cfg, progress=not args.no_progress)
    save_graph(graph, out, overwrite=args.force)
    _print_json({"path": str(out), **graph.summary(), "timings_s": {k: round(v, 3) for k, v in
                                                                   graph.timings.items()}})
    return 0


def _info(args: argparse.Namespace) -> int:
    from graph_builder.motion_graph import summarize_manifest
    from graph_builder.storage import load_graph, read_manifest

    if args.verify:
        manifest = load_graph(args.graph, verify=True, mmap=True).manifest
    else:
        manifest = read_manifest(args.graph)
    _print_json({"path": args.graph, **summarize_manifest(manifest), "verified": bool(args.verify)})
    return 0


def _print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")
