"""The report's PNG figures, each drawn only when it has something to show (else the reason it is left out):
ΔSR per factor and level, the task × condition SR heatmap, the failure depth, the uplift per pair and per factor.
Needs matplotlib (drawn with the Agg canvas, no display)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eval.headline import REFERENCE_LABEL, REFERENCE_UPLIFT
from eval.report.summary import is_shown_pair
from eval.schema import CLEAN
from eval.stats import ALL_STAGES_REACHED
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_path

log = logging.getLogger(__name__)

FIGURES = ("delta_sr.png", "sr_heatmap.png", "failure_depth.png", "uplift.png", "uplift_by_factor.png")


def write_figures(out_dir: Path, summary: Mapping[str, Any]) -> tuple[list[Path], dict[str, str]]:
    """Draw every figure that has something to show; return the written paths and, for each figure left
    out, why. A stale figure of an earlier report of the same directory is removed with it."""
    try:
        from matplotlib.figure import Figure  # noqa: F401  (imported here: heavy, needed only for figures)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise R2AInputError("the benchmark report's figures need matplotlib: pip install matplotlib") from exc
    plots = dict(zip(FIGURES, (_plot_delta_sr, _plot_heatmap, _plot_failure_depth, _plot_uplift,
                                 _plot_uplift_by_factor)))
    paths, omitted = [], {}
    for name, plot in plots.items():
        fig = plot(summary)
        if isinstance(fig, str):
            log.info("figure %s left out: %s", name, fig)
            omitted[name] = fig
            (out_dir / name).unlink(missing_ok=True)
            continue
        with atomic_path(out_dir / name) as tmp:
            fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
        paths.append(out_dir / name)
    return paths, omitted


def _new_figure(n_panels: int, width: float = 6.0, height: float = 3.5) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * n_panels), layout="constrained")
    return fig, [fig.add_subplot(n_panels, 1, i + 1) for i in range(n_panels)]


def _nothing_to_show(rows: Sequence[Mapping[str, Any]], value: str, ci: str) -> str | None:
    """Why bars of ``value`` would show nothing — no row has a value, or every value and interval bound is
    exactly 0 (invisible bars on an axis of ±0.04) — or None when they show something."""
    values = [v for r in rows for v in (r[value], *r[ci]) if v is not None]
    if not values:
        return "no value to draw"
    if all(v == 0 for v in values):
        return "every value is 0 with a zero-width interval"
    return None


def _grouped_bars(ax: Any, rows: Sequence[Mapping[str, Any]], value: str, ci: str, ylabel: str) -> None:
    """Bars per factor, one per level, with CI error bars (missing values are left out); the axis spans at
    least ±0.1, so that a small effect is not drawn as a large one."""
    factors = sorted({r["factor"] for r in rows})
    levels = sorted({r["level"] for r in rows})
    width = 0.8 / max(1, len(levels))
    for j, level in enumerate(levels):
        xs, ys, err = [], [], [[], []]
        for i, factor in enumerate(factors):
            row = next((r for r in rows if r["factor"] == factor and r["level"] == level), None)
            if row is None or row[value] is None or None in row[ci]:
                continue
            xs.append(i + (j - (len(levels) - 1) / 2) * width)
            ys.append(row[value])
            err[0].append(max(0.0, row[value] - row[ci][0]))
            err[1].append(max(0.0, row[ci][1] - row[value]))
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=f"L{level}")
    ax.axhline(0.0, color="black", linewidth=0.8)
    bounds = [abs(v) for r in rows for v in (r[value], *r[ci]) if v is not None]
    half = min(1.05, max([0.1, *bounds]) * 1.1)
    ax.set_ylim(-half, half)
    ax.set_xticks(range(len(factors)), factors)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")


def _plot_delta_sr(summary: Mapping[str, Any]) -> Any:
    rows = summary["aggregates"]
    if not rows:
        return "no shifted condition was run"
    why = _nothing_to_show(rows, "delta_sr", "delta_sr_ci")
    if why == "no value to draw":
        return "no task passed clean-competence screening, so no condition has a ΔSR (see the clean runs)"
    if why:
        return "ΔSR is 0 with a zero-width interval in every condition: no paired episode changed outcome"
    policies = sorted({r["policy"] for r in rows})
    fig, axes = _new_figure(len(policies))
    for ax, policy in zip(axes, policies):
        _grouped_bars(ax, [r for r in rows if r["policy"] == policy], "delta_sr", "delta_sr_ci", "ΔSR")
        ax.set_title(f"{policy}: ΔSR = SR_clean − SR_shift (95 % paired bootstrap CI)", fontsize="medium")
    return fig


def _plot_heatmap(summary: Mapping[str, Any]) -> Any:
    policies, tasks = summary["policies"], summary["tasks"]
    conditions = [(CLEAN, 0)] + sorted({(r["factor"], r["level"]) for r in summary["conditions"]})
    if not tasks or not policies:
        return "no valid episode"
    fig, axes = _new_figure(len(policies), width=max(5.0, 1.0 + 0.8 * len(conditions)),
                            height=max(2.0, 0.9 + 0.45 * len(tasks)))
    for ax, policy in zip(axes, policies):
        grid = np.full((len(tasks), len(conditions)), np.nan)
        for r in summary["clean"] + summary["conditions"]:
            if r["policy"] == policy and r["sr"] is not None:
                cond = (r.get("factor", CLEAN), r.get("level", 0))
                grid[tasks.index(r["task"]), conditions.index(cond)] = r["sr"]
        image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize="small",
                        color="white" if v < 0.5 else "black")
        ax.set_xticks(range(len(conditions)), [CLEAN if f == CLEAN else f"{f} L{lvl}" for f, lvl in conditions],
                      rotation=45, ha="right")
        ax.set_yticks(range(len(tasks)), tasks)
        ax.set_title(f"{policy}: success rate", fontsize="medium")
        fig.colorbar(image, ax=ax, fraction=0.03)
    return fig


#: the legend's words for a failure that latched every stage but did not hold success at the end
ALL_REACHED_LABEL = "every stage reached once, not held at the end"


def _plot_failure_depth(summary: Mapping[str, Any]) -> Any:
    """Stacked share of failures by first incomplete stage, per factor (levels and tasks pooled); only the
    policies and stages that have failures are drawn."""
    rows = [{**r, "factor": CLEAN} for r in summary["clean"]] + list(summary["conditions"])
    histograms = [{k: v for k, v in r["failure_stages"]["first_incomplete"].items() if v} for r in rows]
    stages = _stage_order(histograms)
    if not stages:
        return "no episode failed"
    failed = {r["policy"] for r, h in zip(rows, histograms) if h}
    policies = [p for p in summary["policies"] if p in failed]
    fig, axes = _new_figure(len(policies))
    for ax, policy in zip(axes, policies):
        factors = [CLEAN] + sorted({r["factor"] for r in rows if r["policy"] == policy and r["factor"] != CLEAN})
        counts = np.zeros((len(factors), len(stages)))
        for r in rows:
            if r["policy"] == policy:
                for stage, k in r["failure_stages"]["first_incomplete"].items():
                    if k:
                        counts[factors.index(r["factor"]), stages.index(stage)] += k
        totals = counts.sum(axis=1, keepdims=True)
        shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
        bottom = np.zeros(len(factors))
        for k, stage in enumerate(stages):
            ax.bar(range(len(factors)), shares[:, k], bottom=bottom,
                   label=ALL_REACHED_LABEL if stage == ALL_STAGES_REACHED else f"stopped before '{stage}'")
            bottom += shares[:, k]
        ax.set_xticks(range(len(factors)), [f"{f}\n(n={int(t)})" for f, t in zip(factors, totals[:, 0])])
        ax.set_ylabel("share of failures")
        ax.set_title(f"{policy}: first incomplete stage of failed episodes", fontsize="medium")
        ax.legend(fontsize="small", bbox_to_anchor=(1.01, 1.0), loc="upper left")
    return fig


def _stage_order(histograms: Iterable[Mapping[str, int]]) -> list[str]:
    """Union of stage names in first-seen order, with "all_reached" last when it occurs."""
    order: list[str] = []
    for hist in histograms:
        order += [k for k in hist if k not in order]
    return [k for k in order if k != ALL_STAGES_REACHED] + [k for k in order if k == ALL_STAGES_REACHED]


def _plot_uplift(summary: Mapping[str, Any]) -> Any:
    """Uplift per factor/level for each unordered policy pair (the base policy as baseline when configured)."""
    if len(summary["policies"]) < 2:
        return "one policy only: there is no pair to compare"
    base = summary["settings"].get("base_policy")
    rows = [r for r in summary["uplift"] if r["level"] is not None and r["factor"] != CLEAN
            and is_shown_pair(r, base, set(summary["policies"]))]
    pairs = sorted({(r["baseline"], r["candidate"]) for r in rows})
    if not pairs:
        return "the policies share no valid shifted episode"
    if _nothing_to_show(rows, "uplift", "uplift_ci"):
        return "the uplift is 0 with a zero-width interval everywhere: the policies agree on every shifted episode"
    fig, axes = _new_figure(len(pairs))
    for ax, (baseline, candidate) in zip(axes, pairs):
        _grouped_bars(ax, [r for r in rows if (r["baseline"], r["candidate"]) == (baseline, candidate)],
                      "uplift", "uplift_ci", "uplift")
        ax.set_title(f"SR({candidate}) − SR({baseline}) (95 % paired bootstrap CI)", fontsize="medium")
    return fig


def _plot_uplift_by_factor(summary: Mapping[str, Any]) -> Any:
    """Each headline pair's uplift per factor (pooled over levels, 95 % CI) beside the R2A page's per-category
    deltas for GR00T N1.7 on LIBERO-Plus — labelled as another policy and benchmark."""
    headlines = [h for h in summary.get("headline") or []
                 if any(f["uplift"] is not None for f in h["factors"].values())]
    if not headlines:
        return "no pair of policies shares a perturbed episode"
    fig, axes = _new_figure(len(headlines), width=7.0)
    for ax, h in zip(axes, headlines):
        factors = list(h["factors"])
        xs = np.arange(len(factors))
        ours = np.array([_or_nan(h["factors"][f]["uplift"]) for f in factors])
        lo = np.array([_or_nan(h["factors"][f]["ci"][0]) for f in factors])
        hi = np.array([_or_nan(h["factors"][f]["ci"][1]) for f in factors])
        err = np.nan_to_num(np.stack([np.maximum(0.0, ours - lo), np.maximum(0.0, hi - ours)]))
        ax.bar((xs - 0.2).tolist(), ours.tolist(), 0.4, yerr=err.tolist(), capsize=3,
               label=f"{h['candidate']} vs {h['baseline']} (this run)")
        ref = np.array([REFERENCE_UPLIFT.get(f, math.nan) / 100 for f in factors])
        ax.bar((xs + 0.2).tolist(), ref.tolist(), 0.4, color="lightgray", edgecolor="gray", hatch="//",
               label=REFERENCE_LABEL)
        ax.axhline(0.0, color="black", linewidth=0.8)
        values = np.abs(np.concatenate([ours, lo, hi, ref]))
        half = min(1.05, max(0.1, float(np.nanmax(values)) if np.isfinite(values).any() else 0.1) * 1.15)
        ax.set_ylim(-half, half)
        ax.set_xticks(xs, factors)
        ax.set_ylabel("uplift in SR (0.1 = 10 points)")
        ax.set_title(f"SR({h['candidate']}) − SR({h['baseline']}) per factor, pooled over levels", fontsize="medium")
        ax.legend(fontsize="x-small")
    return fig


def _or_nan(x: Any) -> float:
    return math.nan if x is None else float(x)


__all__ = ["ALL_REACHED_LABEL", "FIGURES", "write_figures"]
