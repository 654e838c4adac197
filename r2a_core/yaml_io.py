"""Reading YAML config files with one-line errors that name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from r2a_core.errors import R2AInputError


def read_yaml_mapping(path: str | Path, what: str = "config") -> dict[str, Any]:
    """The top-level mapping of a YAML file; a missing file, bad YAML or a non-mapping is an R2AInputError."""
    path = Path(path)
    if not path.is_file():
        raise R2AInputError(f"{what} {path}: file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise R2AInputError(f"{what} {path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise R2AInputError(f"{what} {path}: expected a mapping of fields at the top level")
    return data


def apply_overrides(raw: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``FIELD=VALUE`` command-line overrides (values parsed as YAML) to a config mapping, in place."""
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise R2AInputError(f"override '{item}': expected FIELD=VALUE")
        raw[key.strip()] = yaml.safe_load(value)
    return raw


def check_fields(raw: dict[str, Any], known: set[str], where: str) -> None:
    """Reject unknown config fields, listing the valid ones (a typo must never be silently ignored)."""
    unknown = sorted(set(raw) - known)
    if unknown:
        raise R2AInputError(f"{where}: unknown field(s) {unknown}; valid fields: {sorted(known)}")
