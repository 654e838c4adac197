"""Benchmark summary and report on synthetic records whose statistics are known by construction.

Design: 3 tasks × 2 policies ("base", "r2a") × (clean + camera/robot_init × L1/L2) × 10 episodes.
Every shifted run equals its clean run, except base camera L1 on Lift: episodes 0, 1, 2 flip S→F and
episode 8 flips F→S. r2a is unaffected by every shift. Can is nearly unsolvable clean (1/10) and is screened out.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from eval.report import build_summary, load_records, render_markdown, write_report
from r2a_core.errors import R2AInputError

STAGES = ["reached", "grasped", "lifted"]
CLEAN_SUCCESS = {"Lift": [True] * 8 + [False] * 2, "Stack": [True] * 7 + [False] * 3,
                 "Can": [True] + [False] * 9}
SHIFTS = [("camera", 1), ("camera", 2), ("robot_init", 1), ("robot_init", 2)]
MODIFIES_STATE = {"camera": False, "robot_init": True, "light": False, "noise": False}
#: stages reached by the three S→F episodes of base camera L1 on Lift
S_TO_F_REACHED = {0: [False, False, False], 1: [True, False, False], 2: [True, True, False]}


def record(policy: str, task: str, factor: str, level: int, episode: int, success: bool, **override) -> dict:
    reached = [True, True, True] if success else [True, True, False]
    reached = override.pop("reached", reached)
    stages = dict(zip(STAGES, reached))
    rec = {"schema": "r2a.bench.episode", "schema_version": 1, "policy": policy, "task": task,
           "factor": factor, "level": level, "episode": episode, "env_seed": 1000 + episode,
           "policy_seed": 1000 + episode, "fingerprint": f"{task}-{episode}",
           "expected_fingerprint": None if factor == "clean" else f"{task}-{episode}",
           "success": success, "steps": 50 if success else 150, "horizon": 150, "stage_names": STAGES,
           "stages": stages, "first_incomplete_stage": next((s for s in STAGES if not stages[s]), None),
           "progress": sum(reached) / 3, "events": {"object_dropped": int(not success), "wrong_object_grasped": 0},
           "metrics": {"path_length": 0.5 if factor == "clean" else 0.7, "mean_speed": 0.1,
                       "integrated_squared_jerk": 1.0, "gripper_toggles": 1.0,
                       "time_to_success": 2.5 if success else None, "sparc": -1.5 if success else None},
           "wall_s": 1.0, "error": None}
    if factor != "clean":
        rec["modifies_state"] = MODIFIES_STATE[factor]
    rec.update(override)
    return rec


def make_records() -> list[dict]:
    records = []
    for policy in ("base", "r2a"):
        for task, clean in CLEAN_SUCCESS.items():
            records += [record(policy, task, "clean", 0, ep, ok) for ep, ok in enumerate(clean)]
            for factor, level in SHIFTS:
                for ep, ok in enumerate(clean):
                    kw = {}
                    if (policy, task, factor, level) == ("base", "Lift", "camera", 1) and ep in (0, 1, 2, 8):
                        ok = not ok
                        kw = {"reached": S_TO_F_REACHED[ep]} if ep in S_TO_F_REACHED else {}
                    if (policy, task, factor, level, ep) == ("base", "Lift", "camera", 2, 3):
                        kw["fingerprint"] = "tampered"            # the injected hash mismatch
                    if (policy, task, factor, level, ep) == ("r2a", "Stack", "robot_init", 1, 4):
                        kw["env_seed"] = 99                        # the injected seed mismatch
                    records.append(record(policy, task, factor, level, ep, ok, **kw))
    return records


@pytest.fixture(scope="module")
def records() -> list[dict]:
    recs = make_records()
    # a superseded attempt (kept: the later record) and a job that errored
    stale = record("r2a", "Stack", "camera", 2, 0, False)
    recs.insert(0, stale)
    errored = record("r2a", "Can", "robot_init", 2, 10, False, error="simulator diverged")
    return recs + [errored]


@pytest.fixture(scope="module")
def summary(records) -> dict:
    n_jobs = 2 * 3 * 5 * 10 + 1
    return build_summary(records, n_resamples=2000, seed=0, competence_threshold=0.2,
                         config={"expected_job_count": n_jobs + 1, "base_policy": "base"})


def _condition(summary, policy, task, factor, level):
    return next(r for r in summary["conditions"] if (r["policy"], r["task"], r["factor"], r["level"])
                == (policy, task, factor, level))


def _aggregate(summary, policy, factor, level):
    return next(r for r in summary["aggregates"] if (r["policy"], r["factor"], r["level"]) == (policy, factor, level))


def _uplift(summary, baseline, candidate, factor, level):
    return next(r for r in summary["uplift"] if (r["baseline"], r["candidate"], r["factor"], r["level"])
                == (baseline, candidate, factor, level))


def test_summary_schema_and_json_safety(summary):
    assert summary["schema"] == "r2a.bench.summary" and summary["schema_version"] == 2
    assert summary["policies"] == ["base", "r2a"] and summary["factors"] == ["camera", "robot_init"]
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary
    assert summary["config"]["base_policy"] == "base"


def test_condition_with_known_flips(summary):
    row = _condition(summary, "base", "Lift", "camera", 1)
    assert (row["n"], row["successes"], row["sr"]) == (10, 6, 0.6)
    assert row["clean_sr"] == 0.8 and row["n_pairs"] == 10
    assert row["delta_sr"] == pytest.approx(0.2)
    lo, hi = row["delta_sr_ci"]
    assert lo <= 0.2 <= hi and lo < 0.1 and hi >= 0.4
    assert row["transitions"] == {"S->S": 5, "S->F": 3, "F->S": 1, "F->F": 1}
    assert row["mcnemar_p"] == pytest.approx(0.625)                  # 2·(1 + 4)/16
    assert row["sr_ci"] == pytest.approx([0.31267, 0.83182], abs=5e-5)  # Wilson 6/10
    assert row["modifies_state"] is False
    # failures: ep0 (progress 0), ep1 (1/3), ep2 (2/3), ep9 (2/3) → score (6 + 5/3)/10
    assert row["normalized_score"] == pytest.approx((6 + 5 / 3) / 10)
    assert row["events"] == {"object_dropped": 4, "wrong_object_grasped": 0}
    assert row["clean_events"] == {"object_dropped": 2, "wrong_object_grasped": 0}


def test_unchanged_condition(summary):
    row = _condition(summary, "base", "Stack", "robot_init", 2)
    assert row["delta_sr"] == 0.0 and row["delta_sr_ci"] == [0.0, 0.0]
    assert row["mcnemar_p"] == 1.0
    assert row["transitions"] == {"S->S": 7, "S->F": 0, "F->S": 0, "F->F": 3}


def test_s_to_f_stage_statistics(summary):
    st = _condition(summary, "base", "Lift", "camera", 1)["s_to_f_stages"]
    assert st["n"] == 3
    assert st["mean_progress"] == pytest.approx(1 / 3)
    assert st["share_before_first_stage"] == pytest.approx(1 / 3)
    assert st["first_incomplete"] == {"reached": 1, "grasped": 1, "lifted": 1, "all_reached": 0}
    assert st["deepest_reached"] == {"none": 1, "reached": 1, "grasped": 1, "lifted": 0}


def test_trajectory_metrics_on_pairs_that_succeed_in_both(summary):
    tr = _condition(summary, "base", "Lift", "camera", 1)["trajectory_both_success"]
    assert tr["n"] == 5
    assert tr["clean"]["path_length"] == pytest.approx(0.5)
    assert tr["shifted"]["path_length"] == pytest.approx(0.7)
    assert tr["shifted"]["sparc"] == pytest.approx(-1.5)


def test_aggregate_screens_incompetent_tasks(summary):
    agg = _aggregate(summary, "base", "camera", 1)
    assert agg["tasks"] == ["Lift", "Stack"] and agg["screened_out"] == ["Can"]
    assert agg["delta_sr"] == pytest.approx(0.1)                     # macro of 0.2 (Lift) and 0.0 (Stack)
    assert agg["delta_sr_ci"][0] <= 0.1 <= agg["delta_sr_ci"][1]
    assert agg["n_pairs"] == 20
    assert _aggregate(summary, "r2a", "camera", 1)["delta_sr"] == 0.0
    assert [r["task"] for r in summary["clean"] if not r["competent"]] == ["Can", "Can"]


def test_clean_pooled_over_every_task_and_per_suite(summary):
    from eval.report.summary import clean_pooled_rows

    pooled = {(r["policy"], r["group"]): r for r in summary["clean_pooled"]}
    assert set(pooled) == {("base", "all"), ("r2a", "all")}  # built-in task names have no suite
    per_task = [r for r in summary["clean"] if r["policy"] == "base"]
    assert pooled["base", "all"]["n"] == sum(r["n"] for r in per_task)
    assert pooled["base", "all"]["successes"] == sum(r["successes"] for r in per_task)
    rows = clean_pooled_rows([{"policy": "p", "task": "libero_spatial/0", "n": 20, "successes": 18},
                              {"policy": "p", "task": "libero_spatial/1", "n": 20, "successes": 10},
                              {"policy": "p", "task": "libero_object/0", "n": 20, "successes": 20}])
    assert [(r["group"], r["tasks"], r["successes"], r["n"]) for r in rows] == [
        ("libero_object", 1, 20, 20), ("libero_spatial", 2, 28, 40), ("all", 3, 48, 60)]
    assert rows[1]["sr_ci"][0] < 0.7 < rows[1]["sr_ci"][1]
    assert "Pooled per suite" in render_markdown(summary)


def test_uplift_sign_and_pairing(summary):
    up = _uplift(summary, "base", "r2a", "camera", 1)
    assert up["uplift"] == pytest.approx(0.2 / 3)                     # +0.2 on Lift, 0 on Stack and Can
    assert up["n_pairs"] == 30 and up["n_strata"] == 3
    assert up["transitions"]["F->S"] == 3 and up["transitions"]["S->F"] == 1
    assert up["mcnemar_p"] == pytest.approx(0.625)
    assert up["uplift_ci"][0] <= up["uplift"] <= up["uplift_ci"][1]
    for side in ("baseline", "candidate"):  # Wilson on the pooled pairs: equal strata, so around the macro SR
        assert up[f"{side}_sr_ci"][0] < up[f"{side}_sr"] < up[f"{side}_sr_ci"][1]
    down = _uplift(summary, "r2a", "base", "camera", 1)
    assert down["uplift"] == pytest.approx(-0.2 / 3)
    overall = _uplift(summary, "base", "r2a", "all", None)
    assert overall["uplift"] > 0 and overall["n_pairs"] == 3 * 4 * 10
    assert _uplift(summary, "base", "r2a", "robot_init", 1)["uplift"] == 0.0


def test_uplift_pooled_per_factor_and_on_clean(summary):
    camera = _uplift(summary, "base", "r2a", "camera", None)               # strata task × level: 6
    assert camera["n_strata"] == 6 and camera["n_pairs"] == 60
    assert camera["uplift"] == pytest.approx(0.2 / 6)
    clean = _uplift(summary, "base", "r2a", "clean", 0)
    assert clean["uplift"] == 0.0 and clean["n_pairs"] == 30 and clean["n_strata"] == 3


def test_paired_diagnostics_name_the_stage_fixed_and_broken(summary):
    up = _uplift(summary, "base", "r2a", "camera", 1)
    # base fails episodes 0, 1, 2 of Lift at "reached", "grasped", "lifted"; r2a succeeds there (F→S)
    assert up["fixed_at"] == {"grasped": 1, "lifted": 1, "reached": 1}
    # base succeeds on episode 8 where r2a fails as it does clean: at "lifted" (S→F)
    assert up["broken_at"] == {"lifted": 1}
    failed = up["both_failed"]                       # Lift ep 9, Stack eps 7-9, Can eps 1-9: same progress
    assert failed["n"] == 1 + 3 + 9 and failed["later"] == failed["earlier"] == 0
    assert failed["baseline_progress"] == pytest.approx(failed["candidate_progress"])
    traj = up["trajectory_both_success"]
    assert traj["n"] == 5 + 7 + 1 and traj["baseline"] == traj["candidate"]


def test_headline_measures_the_goal(summary):
    (h,) = summary["headline"]                                             # base_policy "base" vs r2a
    assert (h["baseline"], h["candidate"]) == ("base", "r2a")
    assert h["n_conditions"] == 4
    assert h["mean_uplift"] == pytest.approx(0.2 / 3 / 4)                  # camera L1 only, of 4 conditions
    assert set(h["factors"]) == {"camera", "robot_init"} and h["factors_ci_below_zero"] == []
    assert h["clean"]["baseline_sr"] == h["clean"]["candidate_sr"] and h["clean"]["uplift"] == 0.0
    assert h["goal"] == {"mean_uplift": False, "factors_ci_above_zero": False, "clean_not_lower": True}
    md = render_markdown(summary)
    assert "## Headline" in md and "| base | r2a | 4 | 0.017 |" in md
    assert "## Paired diagnostics per factor" in md
    assert "| base | r2a | camera | 3 | grasped 1, lifted 1, reached 1" in md


def test_headline_goal_is_met_when_the_candidate_fixes_every_factor():
    recs = []
    for ep in range(10):
        recs += [record(p, "Lift", "clean", 0, ep, True) for p in ("base", "r2a")]
        for factor in ("camera", "robot_init", "light", "noise"):
            recs += [record("base", "Lift", factor, 1, ep, ep < 5),
                     record("r2a", "Lift", factor, 1, ep, True)]
    (h,) = build_summary(recs, n_resamples=500, config={"base_policy": "base"})["headline"]
    assert h["mean_uplift"] == pytest.approx(0.5)
    assert h["factors_ci_above_zero"] == ["camera", "light", "noise", "robot_init"]
    assert all(h["goal"].values())


def test_integrity_counts(summary):
    t = summary["integrity"]
    assert t["records"] == 2 * 3 * 5 * 10 + 2 and t["superseded"] == 1
    assert t["jobs"] == 301 and t["valid"] == 300 and t["errors"] == 1
    assert t["expected_jobs"] == 302 and t["missing"] == 1
    assert t["hash_mismatch"] == 1 and t["seed_mismatch"] == 1 and t["unpaired"] == 0
    row = next(r for r in t["by_factor"] if (r["policy"], r["factor"]) == ("base", "camera"))
    assert row["hash_mismatch"] == 1 and row["modifies_state"] is False
    assert any("observation-only" in p for p in t["problems"])
    seed_row = next(r for r in t["by_factor"] if (r["policy"], r["factor"]) == ("r2a", "robot_init"))
    assert seed_row["seed_mismatch"] == 1 and seed_row["errors"] == 1


def test_integrity_with_expected_job_list(records):
    jobs = [[r["policy"], r["task"], r["factor"], r["level"], r["episode"]] for r in records]
    jobs.append(["base", "Lift", "camera", 3, 0])
    t = build_summary(records, n_resamples=10, config={"expected_jobs": jobs})["integrity"]
    assert (t["expected_jobs"], t["missing"], t["unexpected"]) == (302, 1, 0)


def test_unpaired_runs_fall_back_to_the_expected_fingerprint():
    recs = [record("p", "Lift", "camera", 1, 0, True), record("p", "Lift", "camera", 1, 1, True, fingerprint="x")]
    s = build_summary(recs, n_resamples=10)
    t = s["integrity"]
    assert (t["unpaired"], t["hash_mismatch"], t["hash_unchecked"]) == (2, 1, 0)
    row = s["conditions"][0]
    assert row["n_pairs"] == 0 and row["sr"] == 1.0 and row["delta_sr"] is None and row["mcnemar_p"] == 1.0


def test_summary_is_deterministic_given_the_seed(records, summary):
    again = build_summary(records, n_resamples=2000, seed=0, competence_threshold=0.2,
                          config={"expected_job_count": 302, "base_policy": "base"})
    assert json.dumps(again, sort_keys=True) == json.dumps(summary, sort_keys=True)
    other = build_summary(records, n_resamples=2000, seed=1, competence_threshold=0.2,
                          config={"expected_job_count": 302, "base_policy": "base"})
    assert other["settings"]["seed"] == 1


def test_empty_records_give_an_empty_report(tmp_path):
    s = build_summary([], n_resamples=10)
    assert s["conditions"] == [] and s["integrity"]["jobs"] == 0
    assert sorted(p.name for p in write_report(tmp_path, s)) == ["report.md", "summary.json"]


def test_build_summary_rejects_bad_records():
    with pytest.raises(R2AInputError, match="level 0"):
        build_summary([record("p", "Lift", "clean", 1, 0, True)])
    with pytest.raises(R2AInputError, match="lacks success"):
        build_summary([{k: v for k, v in record("p", "Lift", "clean", 0, 0, True).items() if k != "success"}])


def test_nan_becomes_null():
    recs = [record("p", "Lift", "clean", 0, 0, False), record("p", "Lift", "camera", 1, 0, False)]
    recs[1]["metrics"]["sparc"] = float("nan")
    s = build_summary(recs, n_resamples=10)
    row = s["conditions"][0]
    assert row["s_to_f_stages"]["mean_progress"] is None                  # empty cohort
    assert row["trajectory_both_success"]["n"] == 0
    assert s["uplift"] == []
    json.dumps(s, allow_nan=False)


# ------------------------------------------------------------------------------------------- reading

def _write_jsonl(path, records, tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_load_records_skips_truncated_last_line_and_keeps_last(tmp_path, caplog):
    recs = [record("base", "Lift", "clean", 0, 0, False), record("base", "Lift", "clean", 0, 1, True),
            record("base", "Lift", "clean", 0, 0, True)]
    path = tmp_path / "results.jsonl"
    _write_jsonl(path, recs, tail=json.dumps(recs[0])[:40])
    with caplog.at_level("WARNING"):
        loaded = load_records(path)
    assert "truncated" in caplog.text
    assert [(r["episode"], r["success"]) for r in loaded] == [(1, True), (0, True)]


def test_load_records_rejects_unknown_schema_version(tmp_path):
    recs = [record("base", "Lift", "clean", 0, 0, True), record("base", "Lift", "clean", 0, 1, True)]
    recs[1]["schema_version"] = 3
    path = tmp_path / "results.jsonl"
    _write_jsonl(path, recs)
    with pytest.raises(R2AInputError, match=r"results\.jsonl:2: unknown .*schema_version 3"):
        load_records(path)


def test_load_records_rejects_corruption_before_the_last_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(record("base", "Lift", "clean", 0, 0, True)) + "\n{broken\n"
                    + json.dumps(record("base", "Lift", "clean", 0, 1, True)) + "\n")
    with pytest.raises(R2AInputError, match=r"results\.jsonl:2"):
        load_records(path)
    path.write_text(json.dumps({"schema": "something.else", "schema_version": 1}) + "\n")
    with pytest.raises(R2AInputError, match="not an episode record"):
        load_records(path)


# ------------------------------------------------------------------------------------------- writing

def test_write_report_produces_files(tmp_path, summary):
    paths = write_report(tmp_path / "out", summary)
    names = sorted(p.name for p in paths)
    assert names == ["delta_sr.png", "failure_depth.png", "report.md", "sr_heatmap.png", "summary.json",
                     "uplift.png", "uplift_by_factor.png"]
    for p in paths:
        assert p.is_file() and p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == summary
    md = (tmp_path / "out" / "report.md").read_text()
    for heading in ("## Integrity", "## Per condition", "## Per factor and level", "## Uplift",
                    "## Stage diagnostics", "![uplift.png](uplift.png)"):
        assert heading in md
    assert "0.200 [" in md                                                 # base Lift camera L1 ΔSR
    assert not list((tmp_path / "out").glob(".*.tmp"))


def test_single_policy_report_has_no_uplift_figure(tmp_path):
    recs = [r for r in make_records() if r["policy"] == "base"]
    s = build_summary(recs, n_resamples=200)
    names = sorted(p.name for p in write_report(tmp_path, s))
    assert "uplift.png" not in names and "delta_sr.png" in names
    assert "## Uplift" not in render_markdown(s)
    assert not math.isnan(s["aggregates"][0]["delta_sr"])
    assert np.isfinite(s["conditions"][0]["sr"])


# ------------------------------------------------------------------------------- figures with little to show

def test_no_failures_and_one_policy_leave_empty_figures_out_and_say_why(tmp_path):
    recs = [record("base", "Lift", factor, level, ep, True) for factor, level in [("clean", 0), *SHIFTS]
            for ep in range(4)]
    s = build_summary(recs, n_resamples=200)
    names = sorted(p.name for p in write_report(tmp_path, s))
    assert names == ["report.md", "sr_heatmap.png", "summary.json"]
    md = (tmp_path / "report.md").read_text()
    assert "- `delta_sr.png` is left out: ΔSR is 0 with a zero-width interval in every condition" in md
    assert "- `failure_depth.png` is left out: no episode failed." in md
    assert "- `uplift.png` is left out: one policy only" in md
    assert "- `uplift_by_factor.png` is left out: no pair of policies shares a perturbed episode" in md


def test_a_figure_that_becomes_empty_is_removed_on_the_next_report(tmp_path, summary):
    write_report(tmp_path, summary)
    assert (tmp_path / "uplift.png").exists()
    write_report(tmp_path, build_summary([record("base", "Lift", "clean", 0, 0, True)], n_resamples=10))
    assert not (tmp_path / "uplift.png").exists() and not (tmp_path / "failure_depth.png").exists()


def test_failure_depth_legend_names_only_stages_that_failed_and_explains_all_reached():
    from eval.report.figures import ALL_REACHED_LABEL, _plot_failure_depth

    recs = [record("base", "Lift", "clean", 0, 0, True), record("r2a", "Lift", "clean", 0, 0, True),
            record("base", "Lift", "clean", 0, 1, False, reached=[True, True, True]),   # latched all, not held
            record("base", "Lift", "clean", 0, 2, False, reached=[True, False, False])]
    fig = _plot_failure_depth(build_summary(recs, n_resamples=10))
    (ax,) = fig.axes  # r2a never failed: no empty panel for it
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["stopped before 'grasped'", ALL_REACHED_LABEL]


def test_delta_axis_is_not_blown_up_around_a_tiny_effect(summary):
    from eval.report.figures import _plot_delta_sr

    fig = _plot_delta_sr(summary)
    for ax in fig.axes:
        low, high = ax.get_ylim()
        assert low <= -0.1 and high >= 0.1


def _uplift_table_rows(summary) -> list[str]:
    table = render_markdown(summary).split("## Uplift")[1].split("\n## ")[0]
    return [line for line in table.splitlines() if line.startswith(("| base |", "| r2a |"))]


def test_uplift_table_shows_each_policy_pair_once(records, summary):
    cells = len({(r["factor"], r["level"]) for r in summary["uplift"]})
    rows = _uplift_table_rows(summary)                                       # base_policy "base": its baseline
    assert len(rows) == cells and all(line.startswith("| base | r2a |") for line in rows)
    rows = _uplift_table_rows(build_summary(records, n_resamples=100, config={"base_policy": "r2a"}))
    assert len(rows) == cells and all(line.startswith("| r2a | base |") for line in rows)
    rows = _uplift_table_rows(build_summary(records, n_resamples=100))        # none: the sorted order
    assert len(rows) == cells and all(line.startswith("| base | r2a |") for line in rows)
    assert len(summary["uplift"]) == 2 * cells                               # summary.json keeps both orders


def test_errors_frames_and_provenance_sections(tmp_path):
    prov = {"git": {"commit": "c" * 40, "dirty": True}, "versions": {"mujoco": "3.9.0"},
            "machine": {"cpu": "CPU X", "cores": 2, "gpu": None}, "command": "r2a bench run ...",
            "artifacts": {"builtin": {"base_checkpoint": {"path": "ckpt", "sha256": "d" * 64}}}}
    recs = [record("p", "Lift", "clean", 0, 0, True, frames="frames/clean0.png"),
            record("p", "Lift", "camera", 1, 0, False, frames="frames/cam.png", frame_steps=[0, 75, 149]),
            record("p", "Lift", "camera", 1, 1, False, error="RuntimeError: boom | bad\nmore")]
    s = build_summary(recs, n_resamples=10, provenance=prov)
    assert s["provenance"] == prov
    assert s["errors"] == [{"policy": "p", "task": "Lift", "factor": "camera", "level": 1, "episode": 1,
                            "error": "RuntimeError: boom | bad\nmore"}]
    assert s["failure_frames"] == [{"policy": "p", "task": "Lift", "factor": "camera", "level": 1, "episode": 0,
                                    "error": None, "frames": "frames/cam.png", "frame_steps": [0, 75, 149],
                                    "clean_frames": "frames/clean0.png", "clean_success": True}]
    md = render_markdown(s)
    assert ("| p | Lift | camera | 1 | 0 | ![failed](frames/cam.png) | ![clean twin](frames/clean0.png) | success |"
            in md)
    assert "| p | Lift | camera | 1 | 1 | RuntimeError: boom \\| bad more |" in md
    assert f"- commit: {'c' * 40} (uncommitted changes)" in md and "sha256 dddddddddddddddd…" in md


def test_a_merged_report_says_when_its_runs_were_made_on_different_machines():
    def prov(cpu):
        return {"git": {"commit": "c" * 40, "dirty": False}, "machine": {"cpu": cpu, "cores": 2, "gpu": None}}

    recs = [record("p", "Lift", "clean", 0, 0, True)]
    one = {"merged_from": [{"dir": "a", "policies": ["base"], "provenance": prov("AMD EPYC")},
                           {"dir": "b", "policies": ["r2a"], "provenance": prov("AMD EPYC")}], "command": "merge"}
    assert "different machines" not in render_markdown(build_summary(recs, n_resamples=10, provenance=one))
    two = {**one, "merged_from": [one["merged_from"][0], {**one["merged_from"][1], "provenance": prov("Intel Xeon")}]}
    md = render_markdown(build_summary(recs, n_resamples=10, provenance=two))
    assert "**Made on different machines**" in md and "- `b` vs `a`: machine cpu 'AMD EPYC' vs 'Intel Xeon'" in md
    resumed = prov("AMD EPYC") | {"resumes": [prov("Intel Xeon")]}  # one run, resumed on another machine
    three = {**one, "merged_from": [one["merged_from"][0], {**one["merged_from"][1], "provenance": resumed}]}
    assert "- `b (resumed)` vs `a`: machine cpu" in render_markdown(build_summary(recs, n_resamples=10,
                                                                                   provenance=three))
    md = render_markdown(build_summary(recs, n_resamples=10, provenance=resumed))  # the run's own report
    assert "**resumed on another machine** (machine cpu 'AMD EPYC' vs 'Intel Xeon')" in md


def test_harmonization_share_per_condition_weighs_episodes_by_their_queries():
    recs = [record("harmonize:base", "Lift", "light", 3, 0, True, harmonize={
                "queries": 10, "active_share": {"agentview": 1.0, "wrist": 0.0}, "any_active_share": 1.0}),
            record("harmonize:base", "Lift", "light", 3, 1, False, harmonize={
                "queries": 30, "active_share": {"agentview": 0.0, "wrist": 0.5}, "any_active_share": 0.5})]
    summary = build_summary(recs)
    (row,) = summary["harmonize"]
    assert row["queries"] == 40 and row["active_share"] == pytest.approx((10 + 15) / 40)
    assert row["camera_share"] == {"agentview": pytest.approx(0.25), "wrist": pytest.approx(15 / 40)}
    assert "## Observation harmonization" in render_markdown(summary)
    assert build_summary([record("base", "Lift", "clean", 0, 0, True)])["harmonize"] == []
