"""Success against severity, one panel per factor knob, with the fitted curve and the chosen levels marked."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from r2a_core.files import atomic_path


def plot_calibration(calibration: Mapping[str, Any], out: str | Path) -> Path | None:
    """Write the figure of a calibration result to ``out`` (PNG); None when nothing is calibrated yet."""
    from matplotlib.figure import Figure

    panels = [(factor, knob, entry) for factor, knobs in calibration["factors"].items()
              for knob, entry in knobs.items()]
    if not panels:
        return None
    clean = calibration["clean"]
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.2 * rows), layout="constrained")
    for i, (factor, knob, entry) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        _panel(ax, factor, knob, entry, clean, calibration["config"]["targets"])
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    return out


def _panel(ax: Any, factor: str, knob: str, entry: Mapping[str, Any], clean: Mapping[str, Any],
           targets: list[float]) -> None:
    """Observed success relative to clean (tasks pooled, Wilson 95 % bars), the fit, the targets, L1–L3."""
    fit = entry["fit"]
    ceiling = np.mean([clean[t]["rate"] for t in fit["tasks"]]) if fit["tasks"] else 1.0
    xs = [p["severity"] for p in entry["points"]]
    rate = np.array([p["successes"] / max(p["episodes"], 1) for p in entry["points"]])
    lo = np.array([p["wilson95"][0] for p in entry["points"]])
    hi = np.array([p["wilson95"][1] for p in entry["points"]])
    rel, rel_lo, rel_hi = rate / ceiling, lo / ceiling, hi / ceiling
    ax.errorbar(xs, rel, yerr=[np.maximum(rel - rel_lo, 0), np.maximum(rel_hi - rel, 0)], fmt="o", capsize=3,
                label="measured / clean")
    grid = np.linspace(0.0, 1.0, 101)
    ax.plot(grid, 1.0 / (1.0 + np.exp(-(fit["a"] - fit["b"] * grid))), label="logistic fit")
    for target in targets:
        ax.axhline(target, color="grey", linestyle="--", linewidth=0.6)
    for level, (s, r) in enumerate(zip(entry["severities"], entry["fitted_relative"]), start=1):
        ax.axvline(s, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"L{level}", (s, min(1.15, r + 0.08)), ha="center", fontsize="small")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(0.0, 1.25)
    ax.set_xlabel("severity (1 = outer bound)")
    ax.set_ylabel("success / clean")
    title = factor if knob == factor else f"{factor}: {knob}"
    ax.set_title(f"{title} ({entry['status']})", fontsize="medium")
    ax.legend(fontsize="x-small", loc="lower left")


__all__ = ["plot_calibration"]
