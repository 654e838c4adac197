"""The ``r2a`` command. Each subcommand group is a module of this package, imported only when it runs.

A group module exposes ``build_parser(prog: str) -> argparse.ArgumentParser`` and ``run(args) -> int``; the paths a
command writes are declared with :func:`r2a_cli.outputs.add_output` and checked here before ``run``. The
imports are plain ``from r2a_cli import <group>`` statements inside :func:`group_module`, so ``r2a --help`` stays
fast and every arrow of the import map is in the source (tests/test_architecture.py reads it).
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType

from r2a_core.errors import R2AInputError
from r2a_core.interrupts import interrupt_on_sigterm

#: group name → one-line help
GROUPS: dict[str, str] = {
    "demos": "collect scripted demonstrations and inspect demonstration files",
    "graph": "build and inspect motion-primitive graphs",
    "policy": "train the built-in VLA, inspect checkpoints, list and serve policies",
    "serve": "serve a policy over openpi's protocol, or R2A as a proxy in front of a VLA server",
    "retriever": "train the GNN retriever, inspect it, measure whether its reference helps",
    "gate": "build gate training data, train the learned gate, inspect gate checkpoints",
    "fit": "fit R2A's parts (graph, retriever, gate, statistics, config) to a base policy, resumably",
    "bench": "shift benchmark and performance benchmarks",
}

log = logging.getLogger("r2a")


def group_module(group: str) -> ModuleType:
    """The module of a subcommand group (imported here, on first use)."""
    if group == "demos":
        from r2a_cli import demos as module
    elif group == "graph":
        from r2a_cli import graph as module
    elif group == "policy":
        from r2a_cli import policy as module
    elif group == "serve":
        from r2a_cli import serve as module
    elif group == "retriever":
        from r2a_cli import retriever as module
    elif group == "gate":
        from r2a_cli import gate as module
    elif group == "fit":
        from r2a_cli import fit as module
    elif group == "bench":
        from r2a_cli import bench as module
    else:
        raise KeyError(group)
    return module


def _top_level_help() -> str:
    lines = ["usage: r2a [-v] GROUP ...", "", "groups:"]
    lines += [f"  {name:<9} {help_}" for name, help_ in GROUPS.items()]
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
    module = group_module(group)
    args = module.build_parser(f"r2a {group}").parse_args(argv[1:])
    from r2a_cli.outputs import check_outputs  # here: 'r2a --help' imports no group and no numpy
    interrupt_on_sigterm()
    try:
        check_outputs(args)  # a bad output path: one line, before anything is written
        return int(module.run(args) or 0)
    except R2AInputError as err:
        print(f"r2a {group}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"r2a {group}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
