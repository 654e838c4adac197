"""Read and validate the shift levels of ``configs/bench/factors.yaml``.

The file maps each factor to its levels ``L1``–``L3``; each level holds exactly the parameters the factor's
``level_schema`` names. Unknown factors, levels or keys are rejected with the file, the place and the valid
names, so a typo never silently falls back to a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from r2a_core.config import shipped_path, unknown_name_error
from r2a_core.errors import R2AInputError
from sim.shifts.base import LEVELS, check_value
from sim.shifts.registry import FACTOR_CLASSES

#: format of configs/bench/factors.yaml this reader understands
FORMAT_VERSION = 1
DEFAULT_FACTORS_YAML = shipped_path("configs/bench/factors.yaml")
LEVEL_KEYS = {f"L{level}": level for level in LEVELS}


def load_factor_levels(path: str | Path | None = None) -> dict[str, Any]:
    """Parse the factors YAML into ``{"factors": {name: {level: params}}, "calibration": {...}}``, validated."""
    path = Path(path) if path is not None else DEFAULT_FACTORS_YAML
    if not path.is_file():
        raise R2AInputError(f"shift-level config {path} not found; the default lives in configs/bench/factors.yaml")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise R2AInputError(f"{path}: not valid YAML ({err})") from err
    if not isinstance(doc, dict):
        raise R2AInputError(f"{path}: expected a mapping with 'format_version' and 'factors'")
    unknown_top = sorted(set(doc) - {"format_version", "calibration", "factors"})
    if unknown_top:
        raise unknown_name_error("top-level key", unknown_top[0], ["format_version", "calibration", "factors"],
                                 str(path))
    if doc.get("format_version") != FORMAT_VERSION:
        raise R2AInputError(f"{path}: format_version {doc.get('format_version')!r} is not supported "
                            f"(this r2a reads version {FORMAT_VERSION})")
    factors = doc.get("factors")
    if not isinstance(factors, dict):
        raise R2AInputError(f"{path}: 'factors' must map factor names to their levels")
    parsed: dict[str, dict[int, dict[str, Any]]] = {}
    for name, levels in factors.items():
        if name not in FACTOR_CLASSES:
            raise unknown_name_error("factor", str(name), list(FACTOR_CLASSES), str(path))
        parsed[name] = _parse_levels(FACTOR_CLASSES[name].level_schema, levels, f"{path}: factors.{name}")
    missing = [n for n in FACTOR_CLASSES if n not in parsed]
    if missing:
        raise R2AInputError(f"{path}: no levels for factor(s) {', '.join(missing)}")
    return {"factors": parsed, "calibration": doc.get("calibration") or {}}


def _parse_levels(schema: dict[str, str], levels: Any, where: str) -> dict[int, dict[str, Any]]:
    if not isinstance(levels, dict):
        raise R2AInputError(f"{where}: expected a mapping with levels {', '.join(LEVEL_KEYS)}")
    out: dict[int, dict[str, Any]] = {}
    for key, params in levels.items():
        if key not in LEVEL_KEYS:
            raise R2AInputError(f"{where}: unknown level '{key}'; valid levels: {', '.join(LEVEL_KEYS)} "
                                "(L0 is the clean condition and has no parameters)")
        if not isinstance(params, dict):
            raise R2AInputError(f"{where}.{key}: expected a mapping of parameters ({', '.join(schema)})")
        for param in params:
            if param not in schema:
                raise unknown_name_error("key", str(param), list(schema), f"{where}.{key}")
        absent = [p for p in schema if p not in params]
        if absent:
            raise R2AInputError(f"{where}.{key}: missing key(s) {', '.join(absent)}")
        out[LEVEL_KEYS[key]] = {p: check_value(kind, params[p], f"{where}.{key}.{p}") for p, kind in schema.items()}
    absent_levels = [k for k, v in LEVEL_KEYS.items() if v not in out]
    if absent_levels:
        raise R2AInputError(f"{where}: missing level(s) {', '.join(absent_levels)}")
    return out
