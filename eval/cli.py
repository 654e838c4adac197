"""``r2a bench``: performance benchmarks (the shift benchmark's commands join this group).

``r2a bench perf graph [--sizes 10000 100000 1000000]`` — graph-builder scale benchmark
(:mod:`eval.perf.graph_scale`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Benchmarks.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{perf}")
    perf = sub.add_parser("perf", help="performance benchmarks")
    perf_sub = perf.add_subparsers(dest="perf_command", required=True, metavar="{graph}")
    graph = perf_sub.add_parser("graph", help="graph build scale benchmark on synthetic demonstrations",
                                description="Build graphs from synthetic demos of each size (fresh process per "
                                            "size) and print frames/s, peak memory, index size and ratios.")
    graph.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], metavar="FRAMES",
                       help="frame counts to build (default: 10000 100000 1000000)")
    graph.add_argument("--seed", type=int, default=0, help="seed of the synthetic demonstrations")
    graph.add_argument("--config", metavar="YAML", help="graph config (default: built-in defaults)")
    graph.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                       help="override one graph config value (repeatable)")
    graph.add_argument("--json", metavar="PATH", help="also write the rows (with config and versions) as JSON")
    graph.add_argument("--no-isolate", action="store_true", help="run all sizes in this process")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.command == "perf" and args.perf_command == "graph":
        return _perf_graph(args)
    raise AssertionError((args.command, getattr(args, "perf_command", None)))


def _perf_graph(args: argparse.Namespace) -> int:
    from eval.perf.graph_scale import format_stages, format_table, run_graph_scale_benchmark
    from graph_builder.config import load_config

    cfg = load_config(args.config, args.set).to_dict()
    rows = run_graph_scale_benchmark(args.sizes, config=cfg, seed=args.seed, isolate=not args.no_isolate)
    print(format_table(rows))
    print()
    print(format_stages(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0
