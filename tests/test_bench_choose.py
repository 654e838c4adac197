"""``r2a bench choose``: the variant rule applied to a screen, test-seed runs refused, ties and no-eligible cases."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from eval.choose import CHOICE_SCHEMA, apply_rule, choose_variant
from r2a_cli.main import main
from r2a_core.errors import R2AInputError
from tests.test_bench_view import make_run

#: the strong base's seven-factor screen on training seeds (docs/experiments/libero_strong.md), shipped with its records
SCREEN = Path(__file__).resolve().parents[1] / "docs" / "results" / "libero_strong_screen"
NO_BLEND = "r2a-libero-strong:?gate.max_gate=0&gate.translation=0&gate.rotation=0"


def _headline(candidate: str, clean: float, pooled: float, clean_pairs: int = 40, pairs: int = 280) -> dict:
    return {"candidate": candidate, "pooled_uplift": pooled, "pooled_ci": [pooled - 0.05, pooled + 0.05],
            "n_pairs": pairs, "factors": {"camera": {"uplift": pooled}},
            "clean": {"baseline_sr": 0.8, "candidate_sr": 0.8 + clean, "uplift": clean, "n_pairs": clean_pairs}}


def test_the_shipped_screen_chooses_what_the_strong_base_published(tmp_path):
    """The rule in code makes the choice written in libero_strong.md by hand: no blend, harmonization kept."""
    out = tmp_path / "choice.json"
    choice = choose_variant(SCREEN, out=out)
    assert choice["chosen"] == NO_BLEND
    assert choice["baseline"] == "builtin-libero-strong" and choice["seeds"][1] < 100_000
    rows = {r["candidate"]: r for r in choice["candidates"]}
    assert rows["r2a-libero-strong"]["eligible"] is False
    assert rows["r2a-libero-strong"]["why_not"] == "clean -7.5 points"
    assert rows[NO_BLEND]["pooled_uplift"] == pytest.approx(0.1071, abs=1e-4)
    assert json.loads(out.read_text())["schema"] == CHOICE_SCHEMA


def test_candidates_are_only_those_named(capsys):
    assert main(["bench", "choose", str(SCREEN), "--candidate", "r2a-libero-strong"]) == 1  # none eligible
    assert "chosen: none" in capsys.readouterr().out
    assert main(["bench", "choose", str(SCREEN), "--candidate", "r2a-libero-strong",
                 "--max-clean-drop", "10"]) == 0
    assert "chosen: r2a-libero-strong\n" in capsys.readouterr().out


def test_a_run_with_test_seeds_is_refused(tmp_path):
    run = make_run(tmp_path / "run")  # seeds 100000…
    with pytest.raises(R2AInputError, match="test seeds.*chosen on training seeds only"):
        choose_variant(run)


def test_unknown_candidates_and_baselines_name_the_run_s_policies():
    with pytest.raises(R2AInputError, match=r"candidates \['r2a'\] are not policies"):
        choose_variant(SCREEN, candidates=["r2a"])
    with pytest.raises(R2AInputError, match="the baseline 'builtin' did not run here"):
        choose_variant(SCREEN, baseline="builtin")


def test_clean_drop_bound_is_inclusive_and_ties_go_to_the_first_listed():
    rows = [_headline("a", -0.02, 0.30), _headline("b", -0.01, 0.10), _headline("c", 0.0, 0.10)]
    choice = apply_rule(rows, 1.0)
    assert [r["eligible"] for r in choice["candidates"]] == [False, True, True]
    assert choice["chosen"] == "b"
    assert apply_rule(rows, 2.0)["chosen"] == "a"


def test_a_candidate_without_clean_or_shifted_pairs_is_not_eligible():
    rows = [_headline("no-clean", 0.0, 0.5, clean_pairs=0), _headline("no-shift", 0.0, math.nan, pairs=0)]
    choice = apply_rule(rows, 1.0)
    assert choice["chosen"] is None
    assert [r["why_not"] for r in choice["candidates"]] == ["no clean pairs", "no shifted pairs"]


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_the_clean_bound_must_be_a_finite_non_negative_number(bad):
    with pytest.raises(R2AInputError, match="--max-clean-drop"):
        apply_rule([_headline("a", 0.0, 0.1)], bad)


SCREEN_CONFIG = {"name": "choose-test", "tasks": ["Lift"], "factors": {"camera": [1]}, "episodes": 4, "seed": 1000,
                 "image_size": 64, "n_action_steps": None, "competence_threshold": 0.2, "base_policy": "base",
                 "n_resamples": 200, "save_trajectories": False}


def _screen_record(policy: str, factor: str, episode: int, success: bool) -> dict:
    from eval.episode_job import Job
    from tests.test_bench_view import _record

    record = _record(Job("Lift", episode, factor, 0 if factor == "clean" else 1, policy), success)
    return {**record, "env_seed": 1000 + episode, "policy_seed": 1000 + episode}


@pytest.fixture(scope="module")
def small_screen(tmp_path_factory) -> Path:
    """A screen on training seeds: every clean episode succeeds; shifted, the base wins 0 of 4, 'a' 2, 'b' 1."""
    from eval.runner import report_from_dir

    run = tmp_path_factory.mktemp("choose") / "screen"
    run.mkdir()
    wins = {"base": 0, "a": 2, "b": 1}
    lines = [_screen_record(p, "clean", e, True) for p in wins for e in range(4)]
    lines += [_screen_record(p, "camera", e, e < wins[p]) for p in wins for e in range(4)]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (run / "run.json").write_text(json.dumps({"config": SCREEN_CONFIG, "policies": list(wins)}))
    report_from_dir(run)
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name, copy_function=shutil.copy2))  # copy2: mtimes kept


def _rerun_b_winning_every_shifted_episode(run: Path) -> None:
    """What a resumed screen appends: newer records of b's shifted jobs (the last record of a job counts)."""
    with open(run / "results.jsonl", "a") as sink:
        for e in range(4):
            sink.write(json.dumps(_screen_record("b", "camera", e, True)) + "\n")


def test_a_summary_of_other_records_is_rebuilt_before_choosing(small_screen, tmp_path, caplog):
    run = _copy(small_screen, tmp_path)
    assert choose_variant(run)["chosen"] == "a"
    summary = (run / "summary.json").read_text()
    _rerun_b_winning_every_shifted_episode(run)
    choice = choose_variant(run)
    assert choice["chosen"] == "b"  # not the stale summary's 'a'
    assert {r["candidate"]: r["pooled_uplift"] for r in choice["candidates"]} == {"a": 0.5, "b": 1.0}
    assert "out of date (it was built from other records" in caplog.text
    assert (run / "summary.json").read_text() == summary  # choosing writes nothing into the screen


def test_a_summary_without_a_digest_is_rebuilt_when_the_records_changed_after_it(small_screen, tmp_path, caplog):
    run = _copy(small_screen, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    del summary["built_from"]  # as summaries written before it was recorded
    (run / "summary.json").write_text(json.dumps(summary))
    _rerun_b_winning_every_shifted_episode(run)  # the same jobs, newer records: only the file's time tells
    os.utime(run / "summary.json", ns=(1, 1))
    assert choose_variant(run)["chosen"] == "b"
    assert "results.jsonl changed after it was written" in caplog.text


def test_a_summary_without_a_digest_is_rebuilt_when_it_counts_other_jobs(small_screen, tmp_path, caplog):
    run = _copy(small_screen, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    del summary["built_from"]
    (run / "summary.json").write_text(json.dumps(summary))
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    kept = [r for r in records if not (r["policy"] == "b" and r["factor"] == "camera" and not r["success"])]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))  # b's failed episodes dropped
    os.utime(run / "results.jsonl", ns=(1, 1))  # older than the summary: only the count tells
    assert choose_variant(run)["chosen"] == "b"
    assert f"it counts {len(records)} jobs, results.jsonl holds {len(kept)} now" in caplog.text


def test_a_current_summary_is_used_as_it_is(small_screen, tmp_path, monkeypatch):
    run = _copy(small_screen, tmp_path)
    os.utime(run / "summary.json", ns=(1, 1))  # older than the records, yet its digest says it describes them
    monkeypatch.setattr("eval.runner.summary_from_dir", lambda *a, **k: pytest.fail("rebuilt a current summary"))
    assert choose_variant(run)["chosen"] == "a"


def test_a_stale_summary_that_cannot_be_rebuilt_is_a_one_line_error(small_screen, tmp_path, capsys):
    run = _copy(small_screen, tmp_path)
    _rerun_b_winning_every_shifted_episode(run)
    (run / "run.json").unlink()
    assert main(["bench", "choose", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "summary.json: out of date" in err and "cannot be rebuilt" in err
