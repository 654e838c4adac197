"""The ``r2a`` command. Subcommand groups live in their packages and are imported only when used.

A group module exposes ``build_parser(prog: str) -> argparse.ArgumentParser`` and ``run(args) -> int``.
"""

from __future__ import annotations

import importlib
import logging
import sys

from r2a_core.errors import R2AInputError
from r2a_core.interrupts import interrupt_on_sigterm

#: group name → (module, one-line help). Import is lazy so ``r2a --help`` stays fast.
GROUPS: dict[str, tuple[str, str]] = {
    "demos": ("demos.cli", "collect scripted demonstrations and inspect demonstration files"),
    "graph": ("graph_builder.cli", "build and inspect motion-primitive graphs"),
    "policy": ("r2a.policies.cli", "train the built-in VLA, inspect checkpoints, list and serve policies"),
    "serve": ("r2a.serve.cli", "serve a policy over openpi's protocol, or R2A as a proxy in front of a VLA server"),
    "retriever": ("r2a.retrieval.cli", "train the GNN retriever, inspect it, measure whether its reference helps"),
    "gate": ("gating.cli", "build gate training data, train the learned gate, inspect gate checkpoints"),
    "bench": ("eval.cli", "shift benchmark and performance benchmarks"),
}

log = logging.getLogger("r2a")


def _top_level_help() -> str:
    lines = ["usage: r2a [-v] GROUP ...", "", "groups:"]
    lines += [f"  {name:<9} {help_}" for name, (_, help_) in GROUPS.items()]
    lines += ["", "Run 'r2a GROUP --help' for the commands of a group."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in argv or "--verbose" in argv
    argv = [a for a in argv if a not in ("-v", "--verbose")]
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if not argv or argv[0] in ("-h", "--help"):
        print(_top_level_help())
        return 0 if argv else 2
    group = argv[0]
    if group not in GROUPS:
        print(f"r2a: unknown command '{group}'; valid commands: {', '.join(GROUPS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(GROUPS[group][0])
    args = module.build_parser(f"r2a {group}").parse_args(argv[1:])
    interrupt_on_sigterm()
    try:
        return int(module.run(args) or 0)
    except R2AInputError as err:
        print(f"r2a {group}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"r2a {group}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
