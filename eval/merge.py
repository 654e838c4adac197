"""Join benchmark runs made separately into one results directory and its report.

The base policy is frozen, so its episodes are run once (``r2a bench run --policy builtin --out runs/x/builtin``)
and every wrapper is run later into its own directory. ``r2a bench merge OUT A B ...`` writes OUT as if all the
policies had run together — ``results.jsonl``, ``run.json``, then ``summary.json``, ``report.md`` and the figures
— and refuses runs that are not the same episodes: a different episode plan (tasks, factors, levels, episodes,
seeds, image size, chunk execution), a policy in two runs, or a shared job whose seeds, initial-state fingerprint
or sampled shift parameters differ. Settings that only change the statistics (resamples, competence threshold,
base policy) are taken from the first run or from ``--base-policy``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.report import job_key, load_records
from eval.runner import is_merged, report_from_dir, same_shift_levels, shift_levels_sha
from eval.schema import RESULTS, RESULTS_GZ, RUN_FILE, results_file
from r2a_core.errors import R2AInputError
from r2a_core.files import link_or_copy, write_json_atomic, write_text_atomic
from r2a_core.provenance import command_line, provenance_differences

log = logging.getLogger(__name__)

#: config fields that decide which episodes run; the others only change the statistics
EPISODE_PLAN = ("tasks", "factors", "episodes", "seed", "image_size", "n_action_steps")
TRAJECTORIES = "trajectories"
#: record fields that must agree between two runs of the same job
PAIRED_FIELDS = ("env_seed", "policy_seed", "fingerprint", "shift_params")


def merge_runs(out_dir: str | Path, sources: Sequence[str | Path], base_policy: str | None = None) -> dict[str, Any]:
    """Write the merged results of ``sources`` into ``out_dir`` and return its summary."""
    out_dir, sources = Path(out_dir), [Path(s) for s in sources]
    if len(sources) < 2:
        raise R2AInputError("give at least two results directories to merge")
    if out_dir.resolve() in {s.resolve() for s in sources}:
        raise R2AInputError(f"{out_dir}: the merged directory must not be one of the runs it merges")
    _refuse_overwriting_a_run(out_dir)
    pinned = [_read_run(src) for src in sources]
    config = _common_config(sources, pinned, base_policy)
    policies = _disjoint_policies(sources, pinned)
    records = [rec for src, run in zip(sources, pinned) for rec in _run_records(src, run, out_dir)]
    _check_pairing(records, {p: src for src, run in zip(sources, pinned) for p in run["policies"]})
    for src, run in zip(sources[1:], pinned[1:]):
        for line in provenance_differences(pinned[0].get("provenance"), run.get("provenance")):
            log.warning("%s vs %s: %s", sources[0], src, line)
    out_dir.mkdir(parents=True, exist_ok=True)
    _link_trajectories(sources, out_dir)
    write_text_atomic(out_dir / RESULTS, "".join(json.dumps(rec) + "\n" for rec in records))
    (out_dir / RESULTS_GZ).unlink(missing_ok=True)  # an earlier merge's, published: these records replace it
    provenance = {"command": command_line(),
                  "merged_from": [{"dir": str(src), "policies": run["policies"], "provenance": run.get("provenance")}
                                  for src, run in zip(sources, pinned)]}
    write_json_atomic(out_dir / RUN_FILE, {"config": config, "policies": sorted(policies), "provenance": provenance})
    log.info("merged %d records of %s from %d runs into %s", len(records), ", ".join(policies), len(sources), out_dir)
    return report_from_dir(out_dir)


def _refuse_overwriting_a_run(out_dir: Path) -> None:
    """OUT may be new or an earlier merge; never a run's own directory (a mistyped argument order would replace
    hours of episodes)."""
    run_file = out_dir / RUN_FILE
    if run_file.is_file():
        try:
            merged = is_merged(json.loads(run_file.read_text()))
        except json.JSONDecodeError:
            merged = False
        if not merged:
            raise R2AInputError(f"{run_file}: {out_dir} holds a benchmark run, not an earlier merge; give the merged "
                                "directory first and a new (or previously merged) path for it")
    elif any((out_dir / name).exists() for name in (RESULTS, RESULTS_GZ)):
        raise R2AInputError(f"{out_dir}: already holds results ({RESULTS} or {RESULTS_GZ}) but no {RUN_FILE}; give a "
                            "new directory")


def _run_records(src: Path, run: Mapping[str, Any], out_dir: Path) -> list[dict[str, Any]]:
    """The run's records, each of a policy its run.json lists, frame paths made relative to the merged dir."""
    results = results_file(src)
    records = load_records(results)
    stray = sorted({str(rec.get("policy")) for rec in records} - set(run["policies"]))
    if stray:
        raise R2AInputError(f"{results}: records of policy {', '.join(map(repr, stray))} not in "
                            f"{src / RUN_FILE}'s policies {run['policies']}")
    for rec in records:
        if isinstance(rec.get("frames"), str) and not Path(rec["frames"]).is_absolute():
            rec["frames"] = os.path.relpath(src / rec["frames"], out_dir)
    return records


def _link_trajectories(sources: Sequence[Path], out_dir: Path) -> None:
    """Trajectory files (named by job, policy included) into OUT/trajectories/, hard-linked where possible."""
    for src in sources:
        for path in sorted((src / TRAJECTORIES).glob("*.npz")):
            target = out_dir / TRAJECTORIES / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            link_or_copy(path, target)


def _read_run(src: Path) -> dict[str, Any]:
    run_file = src / RUN_FILE
    if not run_file.is_file():
        raise R2AInputError(f"{src}: expected {RUN_FILE} and {RESULTS} from 'r2a bench run'")
    results_file(src)  # records there, plain or published (else a one-line error)
    try:
        run = json.loads(run_file.read_text())
    except json.JSONDecodeError as exc:
        raise R2AInputError(f"{run_file}: not valid JSON ({exc})") from exc
    if (not isinstance(run, Mapping) or not isinstance(run.get("config"), Mapping)
            or not isinstance(run.get("policies"), list) or not run["policies"]
            or not all(isinstance(p, str) for p in run["policies"])):
        raise R2AInputError(f"{run_file}: expected 'config' and a list of 'policies' as 'r2a bench run' writes them")
    return dict(run)


def _common_config(sources: Sequence[Path], pinned: Sequence[Mapping[str, Any]],
                   base_policy: str | None) -> dict[str, Any]:
    """The first run's config, after checking that every run planned the same episodes."""
    first = pinned[0]["config"]
    for src, run in zip(sources[1:], pinned[1:]):
        differ = [f"{name} {first.get(name)!r} vs {run['config'].get(name)!r}" for name in EPISODE_PLAN
                  if _plan_value(first, name) != _plan_value(run["config"], name)]
        if not same_shift_levels(pinned[0].get("provenance"), run.get("provenance")):
            differ.append(f"shift levels file sha256 {shift_levels_sha(pinned[0].get('provenance'))[:12]} vs "
                          f"{shift_levels_sha(run.get('provenance'))[:12]}")
        if differ:
            raise R2AInputError(f"{src} ran other episodes than {sources[0]}: " + "; ".join(differ))
    config = dict(first)
    if base_policy is not None:
        config["base_policy"] = base_policy
    return config


def _plan_value(config: Mapping[str, Any], name: str) -> Any:
    """A plan field as it decides the episodes: the task list's order does not."""
    value = config.get(name)
    return sorted(value) if name == "tasks" and isinstance(value, list) else value


def _disjoint_policies(sources: Sequence[Path], pinned: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, Path] = {}
    for src, run in zip(sources, pinned):
        for policy in run["policies"]:
            if policy in seen:
                raise R2AInputError(f"policy '{policy}' is in both {seen[policy]} and {src}; merge each policy's "
                                    "episodes from one run")
            seen[policy] = src
    return list(seen)


def _check_pairing(records: Sequence[Mapping[str, Any]], source_of: Mapping[str, Path]) -> None:
    """Every job run by several policies must be the same episode: same seeds, start state and shift."""
    first: dict[tuple, Mapping[str, Any]] = {}
    mismatched: list[str] = []
    unchecked: set[tuple[str, str]] = set()
    for rec in records:
        if rec.get("error"):
            continue
        job = job_key(rec)[1:]
        ref = first.setdefault(job, rec)  # the first valid record of the job is the reference
        if ref is rec:
            continue
        unchecked |= {(f, rec["policy"] if f not in rec else ref["policy"]) for f in PAIRED_FIELDS
                      if (f in rec) != (f in ref)}
        fields = [f for f in PAIRED_FIELDS if f in rec and f in ref and rec[f] != ref[f]]
        if fields:
            mismatched.append(f"{'/'.join(map(str, job))}: {', '.join(fields)} of {rec['policy']} "
                              f"({source_of.get(rec['policy'])}) differ from {ref['policy']}'s")
    for name, policy in sorted(unchecked):
        log.warning("records of %s (%s) have no '%s': that part of the pairing is not checked",
                    policy, source_of.get(policy), name)
    if mismatched:
        raise R2AInputError(f"{len(mismatched)} shared episode(s) are not the same episode in every run (different "
                            f"code, simulator or levels file?); first: {mismatched[0]}")
