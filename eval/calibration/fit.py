"""Success against severity: a logistic fit per knob, tasks pooled, and the levels read off it.

Model: the chance that episode *e* of task *t* at severity *s* succeeds is ``c_t · σ(a − b·s)`` — the task's
clean rate ``c_t`` (measured on the same calibration seeds) is its ceiling, and the relative success
``r(s) = σ(a − b·s)`` is shared by the tasks, with ``b ≥ 0`` (a stronger shift never helps). ``a`` and ``b``
maximize the Bernoulli likelihood of every episode; two parameters and a few hundred episodes, so a coarse grid
refined twice finds the optimum without an optimizer dependency. Tasks with a clean rate of 0 carry no
information and are left out.

Levels: L1, L2, L3 sit where ``r`` is 85 %, 65 % and 45 % of clean (``targets``). A factor whose fitted ``r`` stays
above the first target up to severity 1 (its outer bound) is *insensitive*: its levels are 1/3, 2/3 and 1 of the
bound, so L3 is the strongest plausible setting and never beyond it. When only some targets are reached inside
the bound, the unreached levels are spread evenly between the last reached one and 1 (*partial*).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

#: relative success (of clean) at L1, L2, L3
DEFAULT_TARGETS = (0.85, 0.65, 0.45)
#: the mildest severity a level may take (severity 0 is clean)
MIN_SEVERITY = 0.02
_A_RANGE, _B_RANGE = (-8.0, 16.0), (0.0, 40.0)


@dataclass(frozen=True)
class LogisticFit:
    """``r(s) = σ(a − b·s)``, fitted on ``episodes`` episodes (``tasks`` with a clean rate above 0)."""

    a: float
    b: float
    episodes: int
    log_likelihood: float
    tasks: dict[str, float] = field(default_factory=dict)  # task → its clean rate (the ceiling)

    def relative(self, severity: float | np.ndarray) -> np.ndarray | float:
        """Fitted success at ``severity`` as a fraction of clean."""
        return _sigmoid(self.a - self.b * np.asarray(severity, dtype=np.float64))

    def severity_at(self, target: float) -> float:
        """The severity where the fitted relative success is ``target`` (inf if it never falls that far)."""
        if self.b <= 1e-9:
            return float("inf") if self.relative(0.0) > target else 0.0
        return float((self.a - _logit(target)) / self.b)

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Observation:
    """One calibration episode: its task, severity and outcome."""

    task: str
    severity: float
    success: bool


def fit_logistic(observations: Sequence[Observation], clean_rate: Mapping[str, float]) -> LogisticFit:
    """Maximum-likelihood ``a``, ``b`` of ``c_t · σ(a − b·s)`` over ``observations`` (see the module docstring)."""
    used = [o for o in observations if clean_rate.get(o.task, 0.0) > 0.0]
    if not used:
        raise ValueError("no calibration episode of a task with a clean success rate above 0: nothing to fit")
    s = np.array([o.severity for o in used], dtype=np.float64)
    y = np.array([o.success for o in used], dtype=np.float64)
    c = np.clip(np.array([clean_rate[o.task] for o in used], dtype=np.float64), 1e-6, 1.0)
    a_lo, a_hi = _A_RANGE
    b_lo, b_hi = _B_RANGE
    best = (0.0, 0.0, -np.inf)
    for points in (121, 41, 41):  # coarse grid, then two finer grids around the best point
        a_grid, b_grid = np.linspace(a_lo, a_hi, points), np.linspace(b_lo, b_hi, points)
        ll = _log_likelihood(a_grid[:, None], b_grid[None, :], s, y, c)
        i, j = np.unravel_index(int(np.argmax(ll)), ll.shape)
        best = (float(a_grid[i]), float(b_grid[j]), float(ll[i, j]))
        da, db = (a_hi - a_lo) / (points - 1), (b_hi - b_lo) / (points - 1)
        a_lo, a_hi = max(_A_RANGE[0], best[0] - 2 * da), min(_A_RANGE[1], best[0] + 2 * da)
        b_lo, b_hi = max(_B_RANGE[0], best[1] - 2 * db), min(_B_RANGE[1], best[1] + 2 * db)
    tasks = {t: float(clean_rate[t]) for t in sorted({o.task for o in used})}
    return LogisticFit(a=best[0], b=best[1], episodes=len(used), log_likelihood=best[2], tasks=tasks)


def _log_likelihood(a: np.ndarray, b: np.ndarray, s: np.ndarray, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Bernoulli log-likelihood on a grid of (a, b) → array of the grid's shape (observations summed)."""
    total = np.zeros(np.broadcast(a, b).shape)
    for start in range(0, len(s), 256):  # bounded memory on a fine grid
        sl = slice(start, start + 256)
        p = c[sl] * _sigmoid(a[..., None] - b[..., None] * s[sl])
        p = np.clip(p, 1e-9, 1 - 1e-9)
        total += np.sum(y[sl] * np.log(p) + (1 - y[sl]) * np.log1p(-p), axis=-1)
    return total


def choose_levels(fit: LogisticFit, targets: Sequence[float] = DEFAULT_TARGETS,
                  ordinal: Sequence[float] | None = None) -> dict[str, Any]:
    """L1–L3 severities from ``fit`` → ``{"severities": [s1, s2, s3], "status": ..., "fitted_relative": [...]}``.

    ``status``: ``calibrated`` (every target reached inside [MIN_SEVERITY, 1]), ``partial`` (a target lies beyond
    the bound, or below the mildest severity — the factor steps down at once, e.g. objects placed just outside the
    clean range) or ``insensitive``. An ordinal factor keeps its steps (they are what it has); its status still
    says how strong they are.
    """
    reach = [fit.severity_at(t) for t in targets]
    if ordinal is not None:
        severities = [float(x) for x in ordinal]
        status = ("insensitive" if fit.relative(severities[-1]) > targets[0] else
                  "calibrated" if fit.relative(severities[-1]) <= targets[-1] else "partial")
    elif reach[0] > 1.0:
        severities, status = [1 / 3, 2 / 3, 1.0], "insensitive"
    else:
        severities = []
        for i, s in enumerate(reach):
            if s <= 1.0:
                severities.append(float(np.clip(s, MIN_SEVERITY, 1.0)))
            else:  # the unreached levels: evenly between the last reached one and the bound
                last, left = severities[-1], len(targets) - i
                severities += [last + (1.0 - last) * (k + 1) / left for k in range(left)]
                break
        for i in range(1, len(severities)):  # strictly increasing even where targets coincide after clipping
            severities[i] = max(severities[i], min(1.0, severities[i - 1] + MIN_SEVERITY))
        status = "calibrated" if all(MIN_SEVERITY <= s <= 1.0 for s in reach) else "partial"
    return {"severities": [round(s, 4) for s in severities], "status": status,
            "fitted_relative": [round(float(fit.relative(s)), 4) for s in severities]}


def next_severities(fit: LogisticFit, measured: Sequence[float], targets: Sequence[float] = DEFAULT_TARGETS,
                    min_step: float = 0.05) -> list[float]:
    """Coarse to fine: the severities where the current fit puts the targets (rounded to ``min_step``, inside
    (0, 1]) that are not within ``min_step`` of a severity already measured."""
    out: list[float] = []
    for target in targets:
        s = fit.severity_at(target)
        if not np.isfinite(s) or s > 1.0 + min_step:
            continue
        s = float(np.clip(round(s / min_step) * min_step, min_step, 1.0))
        if all(abs(s - m) >= min_step - 1e-9 for m in [*measured, *out]):
            out.append(round(s, 4))
    return sorted(out)


def _sigmoid(x: np.ndarray | float) -> np.ndarray | float:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -60.0, 60.0)))


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return float(np.log(p / (1 - p)))


__all__ = ["DEFAULT_TARGETS", "LogisticFit", "Observation", "choose_levels", "fit_logistic", "next_severities"]
