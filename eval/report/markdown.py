"""``report.md``: a summary (:mod:`eval.report.summary`) as Markdown — integrity, headline, clean runs, per
condition and per factor, uplift, paired and wrapper diagnostics, stages, trajectories, figures, failure frames,
errors and provenance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import numpy as np

from eval.report.summary import is_shown_pair
from eval.schema import CLEAN
from r2a_core.provenance import provenance_differences

#: errored jobs listed in report.md (all of them are in summary.json)
MAX_ERRORS_LISTED = 20


def render_markdown(summary: Mapping[str, Any], figures: Sequence[str] = (),
                    omitted: Mapping[str, str] | None = None) -> str:
    """The Markdown report: integrity, per-condition, aggregate, uplift and stage-diagnostics tables, the
    figures (and why any was left out), failure frames, errors and provenance."""
    s = summary["settings"]
    parts = [
        "# Shift benchmark report", "",
        f"Schema `{summary['schema']}` v{summary['schema_version']}; {s['n_resamples']} bootstrap resamples, "
        f"seed {s['seed']}, 95 % intervals (Wilson for SR, paired percentile bootstrap for ΔSR and uplift); "
        f"clean-competence threshold {s['competence_threshold']}"
        + (f" on `{s['base_policy']}`'s clean SR." if s.get("base_policy") else " on each policy's clean SR."), "",
        *_integrity_md(summary["integrity"]),
        *headline_md(summary.get("headline") or []),
        "## Clean runs", "", _table(["policy", "task", "n", "SR [95% CI]", "score", "competent"],
                                    [[r["policy"], r["task"], r["n"], _sr_ci(r["sr"], r["sr_ci"]),
                                      _num(r["normalized_score"]), "yes" if r["competent"] else "no"]
                                     for r in summary["clean"]]), "",
        *_clean_pooled_md(summary.get("clean_pooled") or []),
        "## Per condition", "", "ΔSR = SR_clean − SR_shift on paired episodes; transitions clean→shifted.", "",
        _table(["policy", "task", "factor", "L", "n", "SR [95% CI]", "clean SR", "ΔSR [95% CI]",
                "S→S", "S→F", "F→S", "F→F", "McNemar p", "score"],
               [[r["policy"], r["task"], r["factor"], r["level"], r["n"], _sr_ci(r["sr"], r["sr_ci"]),
                 _num(r["clean_sr"]), _sr_ci(r["delta_sr"], r["delta_sr_ci"]), *r["transitions"].values(),
                 _num(r["mcnemar_p"]), _num(r["normalized_score"])] for r in summary["conditions"]]), "",
        "## Per factor and level (macro over competent tasks)", "",
        _table(["policy", "factor", "L", "tasks", "screened out", "pairs", "clean SR", "SR", "ΔSR [95% CI]",
                "S→F", "F→S", "McNemar p"],
               [[r["policy"], r["factor"], r["level"], len(r["tasks"]), ", ".join(r["screened_out"]) or "–",
                 r["n_pairs"], _num(r["clean_sr"]), _num(r["sr"]), _sr_ci(r["delta_sr"], r["delta_sr_ci"]),
                 r["transitions"]["S->F"], r["transitions"]["F->S"], _num(r["mcnemar_p"])]
                for r in summary["aggregates"]]), "",
        *uplift_md(summary["uplift"], summary["settings"].get("base_policy")),
        *_paired_md(summary["uplift"], summary.get("headline") or []),
        *_wrapper_md(summary.get("wrapper") or []),
        *_harmonize_md(summary.get("harmonize") or []),
        *_stages_md(summary["conditions"]),
        *_trajectory_md(summary["conditions"]),
        *_figures_md(figures, omitted or {}),
        *_frames_md(summary.get("failure_frames") or []),
        *_errors_md(summary.get("errors") or []),
        *_provenance_md(summary.get("provenance")),
    ]
    return "\n".join(parts)


def _clean_pooled_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each policy's clean SR per suite and over every task (Wilson 95 % CI, episodes pooled)."""
    if not rows:
        return []
    return ["Pooled per suite (the task name's part before `/`) and over every task (`all`):", "",
            _table(["policy", "suite", "tasks", "successes / n", "SR [95% CI]"],
                   [[r["policy"], r["group"], r["tasks"], f"{r['successes']} / {r['n']}", _sr_ci(r["sr"], r["sr_ci"])]
                    for r in rows]), ""]


def _figures_md(figures: Sequence[str], omitted: Mapping[str, str]) -> list[str]:
    if not figures and not omitted:
        return []
    lines = ["## Figures", ""] + [f"![{name}]({name})" for name in figures] + [""]
    lines += [f"- `{name}` is left out: {why}." for name, why in omitted.items()]
    return lines + ([""] if omitted else [])


def _frames_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each failed episode's frame strip beside its clean twin's (``--save-frames failures``)."""
    if not rows:
        return []
    def link(path: str | None, alt: str) -> str:
        if not path:
            return "–"
        return f"`{path}`" if _outside_report(path) else f"![{alt}]({quote(path)})"

    body = [[r["policy"], r["task"], r["factor"], r["level"], r["episode"],
             link(r["frames"], "failed") + (f" (error: {_cell(r['error'])})" if r.get("error") else ""),
             link(r.get("clean_frames"), "clean twin") if r["factor"] != CLEAN else "(the clean run)",
             "–" if r.get("clean_success") is None else ("success" if r["clean_success"] else "failure")]
            for r in rows]
    steps = next((r["frame_steps"] for r in rows if r.get("frame_steps")), None)
    elsewhere = any(_outside_report(r.get(key) or "") for r in rows for key in ("frames", "clean_frames"))
    return ["## Failure frames", "",
            "What the policy saw (agentview, shift applied) at evenly spaced steps of each failed episode, left "
            "to right" + (f" (e.g. steps {', '.join(map(str, steps))})" if steps else "")
            + ", beside the same episode without the shift." + (_ELSEWHERE if elsewhere else ""), "",
            _table(["policy", "task", "factor", "L", "ep", "failed episode", "clean twin", "clean outcome"], body),
            ""]


_ELSEWHERE = (" Strips named by their path stay in the run directories that saved them: a merged report embeds none "
              "from outside its own directory, so a published copy shows no broken images; `r2a bench view` copies "
              "the strips of the pairs whose outcome changed into its viewer.")


def _outside_report(path: str) -> bool:
    """A strip outside the report's directory (a merged report's runs): present where the runs are, nowhere else."""
    return path.startswith(("../", "..\\"))


def _errors_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    if not rows:
        return []
    shown = rows[:MAX_ERRORS_LISTED]
    more = ["", f"… and {len(rows) - len(shown)} more (summary.json, `errors`)."] if len(rows) > len(shown) else []
    return ["## Errors", "", f"{len(rows)} job(s) ended with an error (left out of every statistic; their tracebacks "
            "are in the `traceback` field of their records in results.jsonl; a rerun retries them).", "",
            _table(["policy", "task", "factor", "L", "ep", "error"],
                   [[r["policy"], r["task"], r["factor"], r["level"], r["episode"], _cell(r["error"])]
                    for r in shown]), *more, ""]


def _provenance_md(provenance: Mapping[str, Any] | None) -> list[str]:
    if not provenance:
        return []
    if provenance.get("merged_from"):
        lines = ["## Provenance", "", f"Merged by `{provenance.get('command')}` from runs made separately:", "",
                 *_replay_warning(provenance["merged_from"])]
        for source in provenance["merged_from"]:
            body = _provenance_md(source.get("provenance"))[2:] or ["- no provenance recorded", ""]
            lines += [f"### `{source['dir']}` ({', '.join(source['policies'])})", "", *body]
        return lines
    git, versions = provenance.get("git") or {}, provenance.get("versions") or {}
    machine = provenance.get("machine") or {}
    dirty = " (uncommitted changes)" if git.get("dirty") else ""
    lines = ["## Provenance", "",
             f"- commit: {git.get('commit') or 'unknown (not a git checkout)'}{dirty}",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v is not None),
             f"- machine: {machine.get('cpu')}, {machine.get('cores')} cores, GPU {machine.get('gpu') or 'none'}",
             f"- command: `{provenance.get('command')}`"]
    if provenance.get("shift_levels"):
        lines.append(f"- shift levels `{provenance['shift_levels'].get('path')}` (sha256 "
                     f"{str(provenance['shift_levels'].get('sha256'))[:16]}…)")
    for spec, roles in (provenance.get("artifacts") or {}).items():
        lines += [f"- `{spec}` loaded {role} `{e.get('path')}` (sha256 {str(e.get('sha256'))[:16]}…)"
                  for role, e in roles.items()]
    resumes = provenance.get("resumes") or []
    if resumes:
        lines.append(f"- resumed {len(resumes)} time(s); run.json records each resume's commit, versions and machine")
        moved = sorted({d for r in resumes for d in _machine_differences(provenance, r)})
        lines += [f"- **resumed on another machine** ({d}): episodes from before and after need not replay on one "
                  "machine" for d in moved]
    return lines + [""]


def _machine_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The lines of ``provenance_differences`` that name the machine (a commit change is the report's own concern)."""
    return [d for d in provenance_differences(a, b) if d.startswith("machine")]


def _replay_warning(sources: Sequence[Mapping[str, Any]]) -> list[str]:
    """What keeps the merged runs' paired episodes from being replays of each other: episodes replay bit for bit only
    with one commit, simulator and machine (docs/architecture.md, "Reproducibility"); each run and each of its resumes
    is compared with the first run's start."""
    starts = [(s["dir"], s.get("provenance") or {}) for s in sources]
    made = starts + [(f"{d} (resumed)", r) for d, p in starts for r in p.get("resumes") or []]
    first_dir, first = starts[0]
    lines = [f"- `{d}` vs `{first_dir}`: {diff}" for d, p in made[1:] for diff in _machine_differences(first, p)]
    if not lines:
        return []
    return ["**Made on different machines**: a pair's two episodes start from the same state but need not replay "
            "each other (floating-point kernels differ by CPU), so pairs carry that noise too:", "", *lines, ""]


def _cell(text: Any) -> str:
    """One line of text, safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")[:200]


def _integrity_md(t: Mapping[str, Any]) -> list[str]:
    lines = ["## Integrity", "",
             _table(["expected", "records", "superseded", "jobs", "valid", "errors", "missing", "hash mismatch",
                     "hash unchecked", "seed mismatch", "unpaired"],
                    [[_num(t["expected_jobs"]), t["records"], t["superseded"], t["jobs"], t["valid"], t["errors"],
                      _num(t["missing"]), t["hash_mismatch"], t["hash_unchecked"], t["seed_mismatch"],
                      t["unpaired"]]]), "",
             _table(["policy", "factor", "modifies state", "jobs", "valid", "errors", "hash mismatch",
                     "seed mismatch", "unpaired"],
                    [[r["policy"], r["factor"], _num(r["modifies_state"]), r["jobs"], r["valid"], r["errors"],
                      r["hash_mismatch"], r["seed_mismatch"], r["unpaired"]] for r in t["by_factor"]]), ""]
    lines += [f"- **{p}**" for p in t["problems"]] or ["No integrity problems."]
    return lines + [""]


def uplift_md(rows: Sequence[Mapping[str, Any]], base_policy: str | None = None) -> list[str]:
    """Each policy pair once: the base policy as baseline when configured, else the first in sorted order
    (summary.json keeps both orders)."""
    rows = [r for r in rows if is_shown_pair(r, base_policy, {p for row in rows for p in (row["baseline"],
                                                                                      row["candidate"])})]
    if not rows:
        return []
    return ["## Uplift (SR(candidate) − SR(baseline) on the same jobs)", "",
            "Per factor and level (strata: tasks); L `all` on a factor: pooled over its levels (strata: task × "
            "level); factor `all`: every shifted job (strata: task × factor × level); `clean`: the clean jobs. "
            "SR: the macro average over the strata with the Wilson 95% CI of the pooled pairs; uplift: the paired "
            "stratified bootstrap CI (†: some stratum holds a single pair — LIBERO-Plus's sampled tasks — so the "
            "strata are resampled too, a two-stage bootstrap); McNemar: exact, on the S→F / F→S pairs.", "",
            _table(["baseline", "candidate", "factor", "L", "pairs", "baseline SR [95% CI]", "candidate SR [95% CI]",
                    "uplift [95% CI]", "S→F", "F→S", "McNemar p"],
                   [[r["baseline"], r["candidate"], r["factor"], _num(r["level"]) if r["level"] is not None else "all",
                     r["n_pairs"], _sr_ci(r["baseline_sr"], r["baseline_sr_ci"]),
                     _sr_ci(r["candidate_sr"], r["candidate_sr_ci"]),
                     _sr_ci(r["uplift"], r["uplift_ci"]) + (" †" if r.get("strata_resampled") else ""),
                     r["transitions"]["S->F"], r["transitions"]["F->S"],
                     _num(r["mcnemar_p"])] for r in rows]), ""]


def headline_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Does the candidate help? One line per pair, with the goal's three checks."""
    if not rows:
        return []
    def mark(ok: bool | None) -> str:
        return "n/a" if ok is None else "yes" if ok else "no"

    body = [[r["baseline"], r["candidate"], r["n_conditions"], _num(r["mean_uplift"]),
             _sr_ci(r["pooled_uplift"], r["pooled_ci"]), r["n_pairs"],
             ", ".join(r["factors_ci_above_zero"]) or "–", ", ".join(r["factors_ci_below_zero"]) or "–",
             f"{_num(r['clean']['baseline_sr'])} → {_num(r['clean']['candidate_sr'])}",
             _sr_ci(r["clean"]["uplift"], r["clean"]["ci"]),
             " / ".join(mark(r["goal"][k]) for k in ("mean_uplift", "factors_ci_above_zero", "clean_not_lower"))]
            for r in rows]
    return ["## Headline", "", "Uplift = SR(candidate) − SR(baseline) on the same episodes. Mean uplift: over the "
            "perturbed conditions (factor × level, each macro-averaged over tasks); pooled: the macro average over "
            "task × factor × level cells with its paired bootstrap CI (the two agree when every condition has the "
            "same tasks); factors whose CI, pooled over their levels, lies above / below zero. Goal (issue 24): "
            "mean uplift ≥ +0.15, CI above zero on ≥ 4 factors, clean SR not lower by more than 0.01 (a cell reads "
            "n/a where no paired episodes judge it).", "",
            _table(["baseline", "candidate", "conditions", "mean uplift", "pooled uplift [95% CI]", "pairs",
                    "CI > 0", "CI < 0", "clean SR", "clean uplift [95% CI]", "goal met (mean / factors / clean)"],
                   body), ""]


def _paired_md(rows: Sequence[Mapping[str, Any]], headlines: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per factor (pooled over levels) for each headline pair: which stage the candidate fixes and breaks,
    whether failures move later, and trajectory quality on the pairs that succeed in both."""
    shown = {(h["baseline"], h["candidate"]) for h in headlines}
    rows = [r for r in rows if (r["baseline"], r["candidate"]) in shown and r["level"] is None
            and r["factor"] != "all"]
    if not rows:
        return []
    def hist(h: Mapping[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in h.items() if v) or "–"

    def traj(r: Mapping[str, Any], metric: str) -> str:
        t = r["trajectory_both_success"]
        return f"{_num(t['baseline'].get(metric))} → {_num(t['candidate'].get(metric))}" if t["n"] else "–"

    body = [[r["baseline"], r["candidate"], r["factor"], r["transitions"]["F->S"], hist(r["fixed_at"]),
             r["transitions"]["S->F"], hist(r["broken_at"]), r["both_failed"]["n"],
             f"{_num(r['both_failed']['baseline_progress'])} → {_num(r['both_failed']['candidate_progress'])}",
             f"{r['both_failed']['later']} / {r['both_failed']['earlier']}", r["trajectory_both_success"]["n"],
             traj(r, "integrated_squared_jerk"), traj(r, "sparc"), traj(r, "time_to_success")] for r in rows]
    return ["## Paired diagnostics per factor (baseline → candidate, pooled over levels)", "",
            "F→S: the baseline's first incomplete stage on the pairs the candidate fixes; S→F: the candidate's on "
            "the pairs it breaks; both failed: mean progress and how often the candidate got further / less far; "
            "trajectory metrics on the pairs that succeed in both (jerk: integrated squared jerk, lower is "
            "smoother; SPARC: closer to 0 is smoother; time to success in s).", "",
            _table(["baseline", "candidate", "factor", "F→S", "fixed at", "S→F", "broken at", "both failed",
                    "progress", "further / less far", "both succeed", "jerk", "SPARC", "time to success"], body), ""]


def _wrapper_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the R2A wrapper did per condition (only for runs that include a wrapped policy)."""
    if not rows:
        return []
    def gate(r: Mapping[str, Any]) -> str:
        g = r.get("mean_gate")
        return "–" if not g else f"{np.mean(g[0:3]):.3f} / {np.mean(g[3:6]):.3f}"

    return ["## R2A wrapper", "", "Share of chunks that fell back to the base policy (and why), the mean gate on "
            "translation / rotation over the chunks that blended, the mean key distance of the nearest graph node, "
            "and the episodes that began with a start-pose recovery.", "",
            _table(["policy", "factor", "L", "episodes", "chunks", "fallback share", "fallback reasons",
                    "mean S (trans / rot)", "seed distance", "recovered"],
                   [[r["policy"], r["factor"], r["level"], r["episodes"], r["queries"], _num(r["fallback_share"]),
                     ", ".join(f"{k} {v}" for k, v in sorted(r["fallbacks"].items())) or "–", gate(r),
                     _num(r["mean_seed_distance"]), r["recovered_episodes"]] for r in rows]), ""]


def _harmonize_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """How often harmonization acted per condition (only for runs that include a harmonized policy)."""
    if not rows:
        return []
    return ["## Observation harmonization", "", "Share of the base policy's queries whose camera images were "
            "harmonized (any camera, then per camera).", "",
            _table(["policy", "factor", "L", "episodes", "queries", "harmonized", "per camera"],
                   [[r["policy"], r["factor"], r["level"], r["episodes"], r["queries"], _num(r["active_share"]),
                     ", ".join(f"{c} {_num(v)}" for c, v in r["camera_share"].items()) or "–"] for r in rows]), ""]


def _stages_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    def hist(h: Mapping[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in h.items() if v) or "–"

    body = [[r["policy"], r["task"], r["factor"], r["level"], st["n"], _num(st["mean_progress"]),
             _num(st["share_before_first_stage"]), hist(st["first_incomplete"]), hist(st["deepest_reached"])]
            for r in rows if (st := r["s_to_f_stages"])["n"]]
    return ["## Stage diagnostics of the S→F cohorts", "",
            _table(["policy", "task", "factor", "L", "S→F", "mean progress", "share before 1st stage",
                    "first incomplete stage", "deepest stage reached"], body) if body else "No S→F episodes.", ""]


def _trajectory_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    names = ("path_length", "mean_speed", "sparc", "gripper_toggles", "time_to_success")
    body = [[r["policy"], r["task"], r["factor"], r["level"], tr["n"],
             *(f"{_num(tr['clean'].get(m))} → {_num(tr['shifted'].get(m))}" for m in names)]
            for r in rows if (tr := r["trajectory_both_success"])["n"]]
    if not body:
        return []
    return ["## Trajectory quality on pairs that succeed in both runs (clean → shifted)", "",
            _table(["policy", "task", "factor", "L", "pairs", *names], body), ""]


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _sr_ci(value: Any, ci: Sequence[Any]) -> str:
    return f"{_num(value)} [{_num(ci[0])}, {_num(ci[1])}]"


__all__ = ["MAX_ERRORS_LISTED", "headline_md", "render_markdown", "uplift_md"]
