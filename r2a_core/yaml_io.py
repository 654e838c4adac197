"""Reading a YAML file's top-level mapping with one-line errors that name the file (used by :mod:`r2a_core.config`
and the adapter key maps)."""

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
