"""Write calibrated levels into ``configs/bench/factors.yaml`` with the record of how they were chosen.

Only factors whose every knob has been calibrated get new levels; the others keep theirs and stay listed as
provisional. The file is rewritten whole (atomically) from its parsed content, so comments other than the
generated header and one line per factor do not survive — the ``calibration`` block is the record.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

import yaml

from r2a_core.files import atomic_write

log = logging.getLogger(__name__)

HEADER = """\
# Severity levels of the benchmark's shift factors (sim/shifts/; docs/architecture.md, "The shift benchmark").
# L0 is the clean condition and has no entry. Ranges are [low, high]; a value is drawn uniformly per episode from
# [seed, level, factor index], so the same episode gets the same shift in every process. Every key is required;
# unknown keys are rejected.
#
# Written by `r2a bench calibrate` (eval/calibration/): each factor's one severity knob (noise: one per
# corruption) maps [0, 1] onto its parameters, 1 being the outer bound (LIBERO-Plus's ranges where it has them);
# L1-L3 sit where the fitted success of the calibrated policy is the `targets` fraction of its clean success, on
# calibration seeds below the benchmark's test seeds. `calibration` records how; factors not in
# `calibration.factors` keep their provisional levels.
"""


def write_calibrated_levels(path: str | Path, calibration: Mapping[str, Any]) -> dict[str, Any]:
    """Update the levels file at ``path`` from a calibration result (``calibration.json``); returns the document."""
    from sim.shifts import get_factor
    from sim.shifts.config import FORMAT_VERSION, load_factor_levels
    from sim.shifts.registry import FACTOR_NAMES

    path = Path(path)
    current = load_factor_levels(path)  # validates what is there before anything is replaced
    levels = {name: {f"L{lv}": params for lv, params in by_level.items()}
              for name, by_level in current["factors"].items()}
    before = dict(current["calibration"] or {})
    policy = {"spec": calibration["policy"], "sha256": dict(calibration["artifacts"])}
    config = calibration["config"]
    seeds = [config["seed"], config["seed"] + config["episodes"] - 1]
    done = dict(before.get("factors") or {})
    if done and (before.get("base_policy") != policy or before.get("seeds") != seeds):
        log.warning("%s: the factors calibrated before (%s) were calibrated on another policy or other seeds; "
                    "their levels stay but are listed as provisional", path, ", ".join(done))
        done = {}
    for factor, knobs in calibration["factors"].items():
        fa = get_factor(factor)
        if set(knobs) != set(fa.knobs):
            missing = sorted(set(fa.knobs) - set(knobs))
            log.warning("%s: knob(s) %s not calibrated yet; its levels stay as they are", factor, ", ".join(missing))
            continue
        for i in range(3):
            severity = {knob: entry["severities"][i] for knob, entry in knobs.items()}
            levels[factor][f"L{i + 1}"] = fa.params_at(severity)
        statuses = {entry["status"] for entry in knobs.values()}
        done[factor] = {
            "status": "insensitive" if statuses == {"insensitive"} else
                      "calibrated" if statuses == {"calibrated"} else "partial",
            "knobs": {knob: {"severities": entry["severities"], "fitted_relative": entry["fitted_relative"],
                             "status": entry["status"], "fit": {"a": entry["fit"]["a"], "b": entry["fit"]["b"]},
                             "episodes": sum(p["episodes"] for p in entry["points"]),
                             "points": [[p["severity"], p["successes"], p["episodes"]] for p in entry["points"]]}
                      for knob, entry in knobs.items()}}
    block = {
        "status": "calibrated" if all(n in done for n in FACTOR_NAMES) else "partial",
        "base_policy": policy,
        "seeds": seeds,
        "episodes_per_point": {"per_task": config["episodes"], "tasks": len(config["tasks"])},
        "tasks": list(config["tasks"]), "targets": list(config["targets"]),
        "clean": {task: entry["rate"] for task, entry in calibration["clean"].items()},
        "date": calibration["date"],
        "provisional": [n for n in FACTOR_NAMES if n not in done],
        "notes": "a factor's severity→parameter map is params_at in sim/shifts/<factor>.py; points are "
                 "[severity, successes, episodes], tasks pooled",
        "factors": done}
    doc = {"format_version": FORMAT_VERSION, "calibration": block, "factors": levels}
    with atomic_write(path, "w") as fh:
        fh.write(_render(doc))
    load_factor_levels(path)  # what was written reads back
    return doc


def _render(doc: Mapping[str, Any]) -> str:
    """YAML with the header, the calibration block, and each factor's levels one flow mapping per line."""
    from sim.shifts import get_factor

    lines = [HEADER, f"format_version: {doc['format_version']}",
             yaml.safe_dump({"calibration": doc["calibration"]}, sort_keys=False, default_flow_style=None,
                            width=110, allow_unicode=True).rstrip(), "", "factors:"]
    for name, levels in doc["factors"].items():
        lines.append(f"  {name}:  # {get_factor(name).summary}")
        for level, params in levels.items():
            flow = yaml.safe_dump(dict(params), default_flow_style=True, sort_keys=False, width=10_000).strip()
            lines.append(f"    {level}: {flow}")
        lines.append("")
    return "\n".join(lines)


__all__ = ["write_calibrated_levels"]
