"""``r2a fit``: R2A's parts fitted to a base policy (graph, retriever, gate with DAgger rounds, statistics, config)."""

from __future__ import annotations

import argparse
import json

from fit.config import STEPS, FitConfig
from r2a_cli.outputs import add_output


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Fit R2A's parts to a frozen base policy into OUT, step by step (a stopped fit resumes with the "
                    "same command); then --policy r2a:OUT wraps the base with them. Training seeds only.",
        epilog="config fields (--set FIELD=VALUE):\n" + FitConfig.help_text() + "\n\nexample:\n"
               "  r2a fit --config configs/fit/builtin_libero.yaml --out runs/fit/builtin_libero\n"
               "  r2a fit --set base=openpi:ws://127.0.0.1:8000 --set 'tasks=[libero_spatial/0]' --out runs/fit/mine")
    parser.add_argument("--config", default=None, metavar="YAML",
                        help="fit config (e.g. configs/fit/builtin_libero.yaml)")
    add_output(parser, "--out", kind="dir", required=True, metavar="DIR",
               help="where the parts go (new, or a fit to resume)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a config field (value parsed as YAML); repeatable")
    parser.add_argument("--until", default=None, choices=STEPS, metavar="STEP",
                        help=f"stop after this step ({', '.join(STEPS)}); run again without it to go on. Up to "
                             "statistics the base is neither queried nor built: its server need not be up yet")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return parser


def run(args: argparse.Namespace) -> int:
    from fit.pipeline import R2A_CONFIG, fit

    config = FitConfig.from_yaml(args.config, args.overrides)
    manifest = fit(config, args.out, progress=not args.no_progress, until=args.until)
    print(json.dumps({"out": args.out, "config": f"{args.out}/{R2A_CONFIG}", "policy": f"r2a:{args.out}",
                      "steps": manifest["steps"]}, indent=1))
    return 0
