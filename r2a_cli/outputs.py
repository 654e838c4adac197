"""The paths a command writes, declared where its parser defines them and checked before the command runs.

A group module adds each output argument with :func:`add_output` (a file or a directory); ``r2a`` calls
:func:`check_outputs` on the parsed arguments before the group's ``run``, so a path no writer could complete — a
directory given for a file, a file for a directory, a path under a file — is a one-line error (exit 2) and nothing
is written or created (:func:`r2a_core.files.check_output_path`). tests/test_output_paths.py checks that every
``--out``, ``--json``, ``--csv``, ``--figure`` and ``--write`` of every command is declared here.
"""

from __future__ import annotations

import argparse
from typing import Any

from r2a_core.files import OUTPUT_KINDS, check_output_path

#: the namespace attribute holding a parser's declared outputs: dest → (kind, the name the error shows)
OUTPUTS = "_r2a_outputs"


def add_output(parser: argparse.ArgumentParser, *names: str, kind: str, **kwargs: Any) -> argparse.Action:
    """``parser.add_argument(*names, **kwargs)`` for a path the command writes: ``kind`` is ``"file"`` (written, or
    replaced) or ``"dir"`` (made, or written into)."""
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"kind must be one of {OUTPUT_KINDS}, got {kind!r}")
    action = parser.add_argument(*names, **kwargs)
    shown = action.option_strings[0] if action.option_strings else (action.metavar or action.dest.upper())
    declared = dict(parser.get_default(OUTPUTS) or {})
    declared[action.dest] = (kind, shown)
    parser.set_defaults(**{OUTPUTS: declared})
    return action


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse the first declared output of the parsed command that no writer could complete (R2AInputError)."""
    for dest, (kind, shown) in (getattr(args, OUTPUTS, None) or {}).items():
        value = getattr(args, dest, None)
        if value is not None:
            check_output_path(value, kind, shown)


__all__ = ["OUTPUTS", "add_output", "check_outputs"]
