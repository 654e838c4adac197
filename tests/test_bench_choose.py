"""``r2a bench choose``: the variant rule applied to a screen, test-seed runs refused, ties and no-eligible cases."""

from __future__ import annotations

import json
import math
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
