"""Is there a run-time signal of R2A's own harm? (issue 49, lever 3) — read from a paired run on TRAINING seeds.

A guard would switch blending off for the rest of an episode once R2A keeps pulling the executed motion away from
a base that keeps re-planning (the per-query ``pull`` and ``disagreement`` of the episode records' R2A trace,
records written since 2026-12-04). This script pairs each R2A episode with the base's on the same job and groups
the pairs by outcome — SF (the base succeeded, R2A failed: harm), FS (R2A fixed it), SS, FF — then reports, per
group, the episode's mean and peak pull and disagreement, and for candidate rules "K consecutive blended queries
with disagreement above T" (T from the pooled quantiles) the share of each group where the rule fires, and how
early. A rule worth building fires on most SF pairs early and on few FS pairs; if none does, the data argue
against a guard. Refuses test seeds (≥ 100000): a guard is chosen on training seeds only.

    r2a bench run --config headroom --set episodes=3 --policy builtin --out runs/guard/base --workers 2
    r2a bench run --config headroom --set episodes=3 --out runs/guard/r2a --workers 2 --policy \
        'r2a-harmonize-hold-clgate-canon:?canonicalize.min_gain=0.2&canonicalize.photometric_veto=r2a/assets/r2a_harmonize_stats.json'
    .venv/bin/python experiments/guard_signal.py runs/guard/base runs/guard/r2a [--policy NAME]
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from eval.report.records import job_key, load_records
from eval.schema import results_file

TEST_SEED_START = 100_000


def _pairs(base_dir: Path, r2a_dir: Path, policy: str | None) -> list[tuple[dict, dict]]:
    base = {job_key(r)[1:]: r for r in load_records(results_file(base_dir)) if r.get("error") is None}
    pairs = []
    for rec in load_records(results_file(r2a_dir)):
        if rec.get("error") is not None or (policy and rec["policy"] != policy) or "r2a" not in rec:
            continue
        if int(rec["env_seed"]) >= TEST_SEED_START:
            raise SystemExit(f"{r2a_dir}: holds test-seed episodes (env_seed {rec['env_seed']}); a guard is chosen "
                             "on training seeds only")
        twin = base.get(job_key(rec)[1:])
        if twin is not None and (rec["r2a"] or {}).get("trace"):
            pairs.append((twin, rec))
    return pairs


def _series(trace: dict, name: str) -> np.ndarray:
    """One column of the trace over the queries that blended (NaN where it fell back or the value is absent)."""
    values = trace.get(name) or [None] * len(trace.get("step", []))
    return np.array([np.nan if v is None or f is not None else float(v)
                     for v, f in zip(values, trace.get("fallback", []))], np.float64)


def _fires(disagreement: np.ndarray, threshold: float, run: int) -> int | None:
    """The query index where ``run`` consecutive blended queries first exceed ``threshold`` (None: never)."""
    count = 0
    for i, d in enumerate(disagreement):
        count = count + 1 if np.isfinite(d) and d > threshold else 0
        if count >= run:
            return i
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base_run", type=Path)
    parser.add_argument("r2a_run", type=Path)
    parser.add_argument("--policy", default=None, help="the R2A policy's name in r2a_run (default: every one)")
    args = parser.parse_args()
    pairs = _pairs(args.base_run, args.r2a_run, args.policy)
    if not pairs:
        raise SystemExit("no paired R2A episodes with a per-query trace (records written since 2026-12-04)")
    groups: dict[str, list[dict]] = defaultdict(list)
    for base, r2a in pairs:
        code = ("S" if base["success"] else "F") + ("S" if r2a["success"] else "F")
        trace = r2a["r2a"]["trace"]
        groups[code].append({"pull": _series(trace, "pull"), "disagreement": _series(trace, "disagreement"),
                             "factor": r2a["factor"]})
    pooled = np.concatenate([g["disagreement"] for rows in groups.values() for g in rows])
    pooled = pooled[np.isfinite(pooled)]
    if pooled.size == 0:
        raise SystemExit("the traces hold no disagreement values (records written before 2026-12-04?)")
    table: dict[str, dict] = {}
    for code in ("SF", "FS", "SS", "FF"):
        rows = groups.get(code, [])
        table[code] = {"pairs": len(rows), "by_factor": dict(sorted(
            (f, sum(r["factor"] == f for r in rows)) for f in {r["factor"] for r in rows}))}
        for name in ("pull", "disagreement"):
            means = [np.nanmean(r[name]) for r in rows if np.isfinite(r[name]).any()]
            peaks = [np.nanmax(r[name]) for r in rows if np.isfinite(r[name]).any()]
            table[code][name] = {"mean_p50": round(float(np.median(means)), 4) if means else None,
                                 "peak_p50": round(float(np.median(peaks)), 4) if peaks else None}
    rules = []
    for q in (90, 95, 99):
        threshold = float(np.percentile(pooled, q))
        for run in (1, 2, 3):
            fired = {code: [_fires(r["disagreement"], threshold, run) for r in groups.get(code, [])]
                     for code in ("SF", "FS", "SS", "FF")}
            rules.append({"threshold_quantile": q, "threshold": round(threshold, 4), "consecutive": run,
                          **{f"fires_{code}": round(float(np.mean([f is not None for f in v])), 3) if v else None
                             for code, v in fired.items()},
                          "first_query_SF_p50": (float(np.median([f for f in fired["SF"] if f is not None]))
                                                 if any(f is not None for f in fired["SF"]) else None)})
    print(json.dumps({"pairs": len(pairs), "groups": table, "rules": rules}, indent=1))


if __name__ == "__main__":
    main()
