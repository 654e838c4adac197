"""Paired comparison of two benchmark runs made separately — e.g. two checkpoints of a policy evaluated on
different days, or R2A run after its baseline — joined episode by episode.

``r2a bench run --policy A --policy B`` already pairs policies run together; this joins two results
directories on (task, factor, level, episode), keeps only pairs whose environment seed and initial-state
fingerprint agree (the same episode, not just the same number), and reports per cell the success rates,
the discordant pairs and the exact McNemar p-value. Episodes replay identically only on the same code,
simulator and machine (docs/architecture.md, "Platform notes"), so it warns when the two runs' provenance
(run.json) differs in commit, robosuite/mujoco version or machine.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from eval.report import job_key, load_records
from eval.schema import RUN_FILE, results_file
from eval.stats import mcnemar_exact, transitions, wilson_interval
from r2a_core.errors import R2AInputError
from r2a_core.provenance import provenance_differences

log = logging.getLogger(__name__)
Cell = tuple[str, str, int]  # task, factor, level


def compare_runs(a_dir: str | Path, b_dir: str | Path, policy_a: str | None = None,
                 policy_b: str | None = None) -> dict[str, Any]:
    """Per (task, factor, level) and pooled: n, both success rates, S→F / F→S from A to B, McNemar p."""
    a = _policy_records(Path(a_dir), policy_a)
    b = _policy_records(Path(b_dir), policy_b)
    cells: dict[Cell, list[tuple[bool, bool]]] = defaultdict(list)
    mismatched = identical = 0
    for key, rec_a in a.items():
        rec_b = b.get(key)
        if rec_b is None or rec_a.get("error") or rec_b.get("error"):
            continue
        if not _same_episode(rec_a, rec_b):
            mismatched += 1
            continue
        cells[key[:3]].append((bool(rec_a["success"]), bool(rec_b["success"])))
        identical += _replays(rec_a, rec_b)
    rows = [_row(task, factor, level, outcomes) for (task, factor, level), outcomes in sorted(cells.items())]
    if len(rows) > 1:
        rows.append(_row("all", "all", -1, [o for outcomes in cells.values() for o in outcomes]))
    paired = sum(len(v) for v in cells.values())
    if mismatched:
        log.warning("%d episode(s) share a number but not the seed or initial state; left out", mismatched)
    warnings = _provenance_warnings(Path(a_dir), Path(b_dir))
    for warning in warnings:
        log.warning("%s", warning)
    return {"a": str(a_dir), "b": str(b_dir), "paired": paired, "identical": identical, "mismatched": mismatched,
            "only_in_a": len(set(a) - set(b)), "only_in_b": len(set(b) - set(a)), "warnings": warnings,
            "rows": rows}


def _provenance_warnings(a_dir: Path, b_dir: Path) -> list[str]:
    """One line per difference in commit, simulator version or machine between the two runs."""
    found = {d: _provenance(d) for d in (a_dir, b_dir)}
    missing = [str(d) for d, p in found.items() if p is None]
    if missing:
        return [f"cannot check that both runs used the same commit, simulator and machine: no provenance in "
                f"{' and '.join(d + '/run.json' for d in missing)}"]
    return [f"the runs differ: {d} — their episodes may differ for that reason alone"
            for d in provenance_differences(found[a_dir], found[b_dir])]


def _provenance(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / RUN_FILE).read_text()).get("provenance") or None
    except (OSError, ValueError, AttributeError):
        return None


def _policy_records(run_dir: Path, policy: str | None) -> dict[tuple[str, str, int, int], dict[str, Any]]:
    results = results_file(run_dir)
    records = load_records(results)
    policies = sorted({str(r["policy"]) for r in records})
    if policy is None and len(policies) == 1:
        policy = policies[0]
    if policy not in policies:
        raise R2AInputError(f"{results}: choose the policy to compare "
                            f"({'unknown ' + repr(policy) + '; ' if policy else ''}it holds {policies})")
    return {job_key(r)[1:]: r for r in records if r["policy"] == policy}


def _same_episode(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.get("env_seed") != b.get("env_seed"):
        return False
    fa, fb = a.get("fingerprint"), b.get("fingerprint")
    return fa is None or fb is None or fa == fb


def _replays(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """The same episode played the same way: outcome, step count and end-effector path summary (start, end,
    lowest point) all equal — what a proxy in front of a server must give beside the same wrapper in-process."""
    return (a["success"] == b["success"] and a.get("steps") == b.get("steps")
            and a.get("ee_summary") is not None and a.get("ee_summary") == b.get("ee_summary"))


def _row(task: str, factor: str, level: int, outcomes: Sequence[tuple[bool, bool]]) -> dict[str, Any]:
    a = [x for x, _ in outcomes]
    b = [y for _, y in outcomes]
    moved = transitions(a, b)
    n = len(outcomes)
    return {"task": task, "factor": factor, "level": level, "n": n,
            "sr_a": sum(a) / n, "ci_a": list(wilson_interval(sum(a), n)),
            "sr_b": sum(b) / n, "ci_b": list(wilson_interval(sum(b), n)),
            "S->F": moved["S->F"], "F->S": moved["F->S"], "mcnemar_p": mcnemar_exact(moved["S->F"], moved["F->S"])}


def comparison_markdown(result: Mapping[str, Any]) -> str:
    """The comparison as a Markdown table (A = first directory, B = second)."""
    lines = [f"A = {result['a']}, B = {result['b']}: {result['paired']} paired episodes "
             f"({result['mismatched']} mismatched, {result['only_in_a']} only in A, {result['only_in_b']} only in B); "
             f"{result['identical']} of them played identically (outcome, steps, end-effector start, end and lowest "
             "point)",
             *(f"**Warning:** {w}" for w in result.get("warnings", ())),
             "", "| task | factor | level | n | SR A [95 % CI] | SR B [95 % CI] | A→B S→F / F→S | McNemar p |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        level = "" if r["level"] < 0 else r["level"]
        lines.append(f"| {r['task']} | {r['factor']} | {level} | {r['n']} | {_sr(r['sr_a'], r['ci_a'])} | "
                     f"{_sr(r['sr_b'], r['ci_b'])} | {r['S->F']} / {r['F->S']} | {r['mcnemar_p']:.3f} |")
    return "\n".join(lines) + "\n"


def _sr(sr: float, ci: Sequence[float]) -> str:
    return f"{sr:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"
