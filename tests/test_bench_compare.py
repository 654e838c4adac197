"""``r2a bench compare``: two results directories paired episode by episode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.compare import compare_runs, comparison_markdown
from r2a_core.errors import R2AInputError
from tests.test_bench_report import record


def _write(run_dir: Path, records: list[dict]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


def test_pairs_by_episode_and_counts_discordant_pairs(tmp_path):
    old = [record("builtin:old", "Stack", "clean", 0, i, success=i < 3) for i in range(10)]
    new = [record("builtin:new", "Stack", "clean", 0, i, success=i in (0, 4, 5, 6, 7, 8)) for i in range(10)]
    new += [record("builtin:new", "Lift", "clean", 0, 0, success=True)]  # nothing to pair it with
    result = compare_runs(_write(tmp_path / "a", old), _write(tmp_path / "b", new))
    (row,) = result["rows"]
    assert (row["n"], row["sr_a"], row["sr_b"], row["S->F"], row["F->S"]) == (10, 0.3, 0.6, 2, 5)
    assert row["mcnemar_p"] == pytest.approx(0.453125)  # 2·P(X ≤ 2), X ~ Bin(7, 1/2)
    assert result["only_in_b"] == 1 and result["paired"] == 10
    assert "| Stack | clean | 0 | 10 | 0.30 [" in comparison_markdown(result)


def test_counts_the_pairs_that_played_identically(tmp_path):
    """A proxy beside the same wrapper in-process: every pair must play the same way, not only end the same."""
    ee = {"start": [0.0, 0.0, 1.0], "end": [0.1, 0.2, 0.9], "min_z": 0.9}
    a = [record("r2a", "Lift", "clean", 0, i, success=True, ee_summary=ee) for i in range(4)]
    b = [record("openpi:ws://127.0.0.1:8020", "Lift", "clean", 0, i, success=True, ee_summary=ee) for i in range(2)]
    b += [record("openpi:ws://127.0.0.1:8020", "Lift", "clean", 0, 2, success=True, ee_summary=ee, steps=51),
          record("openpi:ws://127.0.0.1:8020", "Lift", "clean", 0, 3, success=True,
                 ee_summary={**ee, "end": [0.1, 0.2, 0.9001]})]
    result = compare_runs(_write(tmp_path / "a", a), _write(tmp_path / "b", b))
    assert (result["paired"], result["identical"]) == (4, 2)
    assert "2 of them played identically" in comparison_markdown(result)
    no_summary = [record("p", "Lift", "clean", 0, 0, success=True)]  # nothing to tell it by: not counted
    assert compare_runs(_write(tmp_path / "c", no_summary), _write(tmp_path / "d", no_summary))["identical"] == 0


def test_episodes_with_another_seed_or_start_are_not_paired(tmp_path):
    a = [record("p", "Lift", "clean", 0, i, success=True) for i in range(3)]
    b = [record("p", "Lift", "clean", 0, 0, success=False, env_seed=5),
         record("p", "Lift", "clean", 0, 1, success=False, fingerprint="other"),
         record("p", "Lift", "clean", 0, 2, success=False)]
    result = compare_runs(_write(tmp_path / "a", a), _write(tmp_path / "b", b))
    assert result["paired"] == 1 and result["mismatched"] == 2


def test_a_directory_of_several_policies_needs_a_choice(tmp_path):
    both = [record(p, "Lift", "clean", 0, 0, success=True) for p in ("base", "r2a")]
    a = _write(tmp_path / "a", both)
    with pytest.raises(R2AInputError, match=r"choose the policy.*\['base', 'r2a'\]"):
        compare_runs(a, a)
    result = compare_runs(a, a, policy_a="base", policy_b="r2a")
    assert result["rows"][0]["sr_a"] == 1.0
    with pytest.raises(R2AInputError, match="unknown 'r3a'"):
        compare_runs(a, a, policy_a="r3a", policy_b="r2a")
    with pytest.raises(R2AInputError, match=r"results\.jsonl: no such file \(nor results\.jsonl\.gz"):
        compare_runs(tmp_path / "missing", a)


def test_cli_prints_the_table_and_writes_json(tmp_path, capsys):
    from r2a_cli.main import main

    runs = [_write(tmp_path / name, [record(name, "Lift", "clean", 0, i, success=True) for i in range(2)])
            for name in ("a", "b")]
    assert main(["bench", "compare", str(runs[0]), str(runs[1]), "--json", str(tmp_path / "cmp.json")]) == 0
    assert "| Lift | clean | 0 | 2 |" in capsys.readouterr().out
    assert json.loads((tmp_path / "cmp.json").read_text())["paired"] == 2


def _provenance(commit: str = "a" * 40, mujoco: str = "3.9.0", cpu: str = "CPU X") -> dict:
    return {"git": {"commit": commit, "dirty": False}, "versions": {"robosuite": "1.5.2", "mujoco": mujoco},
            "machine": {"cpu": cpu, "cores": 2, "gpu": None}}


def test_warns_when_the_runs_differ_in_commit_simulator_or_machine(tmp_path, caplog):
    runs = []
    for name, prov in (("a", _provenance()), ("b", _provenance()), ("c", _provenance("b" * 40, "3.8.0", "CPU Y"))):
        run = _write(tmp_path / name, [record("p", "Lift", "clean", 0, i, success=True) for i in range(2)])
        (run / "run.json").write_text(json.dumps({"config": {}, "policies": ["p"], "provenance": prov}))
        runs.append(run)
    assert compare_runs(runs[0], runs[1])["warnings"] == []
    with caplog.at_level("WARNING"):
        result = compare_runs(runs[0], runs[2])
    assert [w.split(": ", 1)[1].split(" —")[0] for w in result["warnings"]] == [
        f"git commit {'a' * 12} vs {'b' * 12}", "mujoco 3.9.0 vs 3.8.0", "machine cpu 'CPU X' vs 'CPU Y'"]
    assert "mujoco 3.9.0 vs 3.8.0" in caplog.text
    assert "**Warning:** the runs differ: mujoco 3.9.0 vs 3.8.0" in comparison_markdown(result)
    (runs[1] / "run.json").unlink()
    assert "no provenance in" in compare_runs(runs[0], runs[1])["warnings"][0]
