"""``r2a bench perf policy``: the scripted expert timed side by side with the real simulator, and the CLI."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("robosuite")

from eval.perf.policy_latency import format_table, measure_policy_latency  # noqa: E402
from r2a_cli.main import main  # noqa: E402


@pytest.fixture(scope="module")
def expert_row() -> dict:
    return measure_policy_latency("expert", "Lift", image_size=32, queries=5, warmup=1, seed=0, threads=1)


def test_the_expert_row_has_every_number_and_they_add_up(expert_row):
    row = expert_row
    for key in ("query_ms_p50", "query_ms_p95", "query_ms_mean", "policy_ms_per_step", "sim_step_ms_mean",
                "sim_step_ms_p50", "ratio", "wall_s"):
        assert row[key] > 0, key
    assert row["query_ms_p50"] <= row["query_ms_p95"]
    # the expert returns one action per query and has no n_action_steps: the horizon is the chunk length
    assert row["chunk_length"] == row["n_action_steps"] == 1 and row["n_action_steps_from"] == "chunk length"
    assert row["sim_steps"] == row["queries"] * row["n_action_steps"] == 5
    assert row["policy_ms_per_step"] == pytest.approx(row["query_ms_mean"] / row["n_action_steps"])
    assert row["ratio"] == pytest.approx(row["policy_ms_per_step"] / row["sim_step_ms_mean"])
    assert (row["spec"], row["task"], row["image_size"], row["warmup"]) == ("expert", "Lift", 32, 1)
    assert row["machine"]["cpus"] >= 1 and row["machine"]["processor"]
    assert row["torch_threads"] in (None, 1)
    assert "| ratio policy / sim step |" in format_table(row)


def test_a_bad_count_or_policy_is_an_input_error(capsys):
    assert main(["bench", "perf", "policy", "--policy", "expert", "--queries", "0"]) == 2
    assert main(["bench", "perf", "policy", "--policy", "exprt", "--queries", "1", "--image-size", "16"]) == 2
    assert "unknown policy 'exprt'" in capsys.readouterr().err


def test_the_command_prints_the_table_and_writes_json(capsys, tmp_path):
    out = tmp_path / "latency.json"
    code = main(["bench", "perf", "policy", "--policy", "expert", "--image-size", "32", "--queries", "3",
                 "--warmup", "1", "--json", str(out)])
    assert code == 0
    assert "policy per control step" in capsys.readouterr().out
    row = json.loads(out.read_text())
    assert row["queries"] == 3 and row["format_version"] == 1 and row["spec"] == "expert"
    assert [p.name for p in tmp_path.iterdir()] == ["latency.json"]  # no temp file left behind
