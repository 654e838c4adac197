"""``r2a bench export``: the per-episode result vector and the per-cell table, on a run whose outcomes are known."""

from __future__ import annotations

import csv
import json

import pytest

from eval.export import CELL_COLUMNS, EPISODE_COLUMNS, export_run
from r2a_cli.main import main
from r2a_core.errors import R2AInputError
from tests.test_bench_view import BASE, EPISODES, OUTCOMES, R2A, SHIFTS, TASKS, make_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("export") / "run")


def test_every_episode_is_a_row_and_every_cell_counts_its_outcomes(run, tmp_path):
    result = export_run(run, tmp_path / "csv", tmp_path / "all.json")
    episodes = list(csv.DictReader(open(tmp_path / "csv" / "episodes.csv")))
    cells = list(csv.DictReader(open(tmp_path / "csv" / "cells.csv")))
    assert result["episodes"] == len(episodes) == 2 * len(TASKS) * EPISODES * (1 + len(SHIFTS))
    assert list(episodes[0]) == list(EPISODE_COLUMNS) and list(cells[0]) == list(CELL_COLUMNS)
    for row in episodes:
        expected = True if row["factor"] == "clean" else OUTCOMES[int(row["episode"])][row["policy"] == R2A]
        assert row["success"] == str(int(expected))
    r2a_rows = [r for r in episodes if r["policy"] == R2A]
    assert all(r["r2a_queries"] == "19" and r["harmonized_share"] == "1.0" for r in r2a_rows)
    cell = {(c["policy"], c["factor"], c["level"]): c for c in cells}
    for policy in (BASE, R2A):
        wins = sum(OUTCOMES[e][policy == R2A] for e in range(EPISODES))
        for factor, level in SHIFTS:
            row = cell[(policy, factor, str(level))]
            assert (row["tasks"], row["episodes"], row["successes"]) == (str(len(TASKS)), str(2 * EPISODES),
                                                                          str(2 * wins))
            assert float(row["sr"]) == float(row["sr_macro"]) == wins / EPISODES
            assert float(row["sr_lo"]) < float(row["sr"]) < float(row["sr_hi"])
        assert cell[(policy, "clean", "0")]["sr"] == "1.0" and (policy, "clean", "all") not in cell
    doc = json.loads((tmp_path / "all.json").read_text())
    assert doc["format"] == "r2a.bench.export" and doc["columns"]["cells"] == CELL_COLUMNS
    assert len(doc["cells"]) == len(cells) and doc["episodes"][0]["success"] in (0, 1)


def test_the_command_and_its_errors(run, tmp_path, capsys):
    assert main(["bench", "export", str(run), "--json", str(tmp_path / "x.json")]) == 0
    assert json.loads(capsys.readouterr().out)["json"] == str(tmp_path / "x.json")
    with pytest.raises(R2AInputError, match="--csv DIR and/or --json FILE"):
        export_run(run)
    assert main(["bench", "export", str(tmp_path), "--csv", str(tmp_path / "c")]) == 2
    assert "results.jsonl: no such file" in capsys.readouterr().err


def test_an_errored_episode_is_a_row_but_no_cell_counts_it_and_each_factor_has_its_all_row(run, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    lines = (copy / "results.jsonl").read_text().splitlines()
    last = next(json.loads(line) for line in lines
                if '"factor": "camera"' in line and json.loads(line).get("policy") == R2A)
    failed = {**last, "success": True, "error": "Traceback (most recent call last):\nRuntimeError: boom"}
    with open(copy / "results.jsonl", "a") as f:  # the job's last record is the one that counts
        f.write(json.dumps(failed) + "\n")
    export_run(copy, tmp_path / "csv")
    episodes = list(csv.DictReader(open(tmp_path / "csv" / "episodes.csv")))
    errored = [r for r in episodes if r["error"]]
    assert [(r["error"], r["success"]) for r in errored] == [("RuntimeError: boom", "0")]
    cell = {(c["policy"], c["factor"], c["level"]): c for c in csv.DictReader(open(tmp_path / "csv" / "cells.csv"))}
    assert cell[(R2A, "camera", "1")]["episodes"] == str(2 * EPISODES - 1)
    assert not any(level == "all" for _, _, level in cell)  # one level per factor here: no pooled row


def test_a_factor_with_several_levels_gets_a_pooled_row():
    from eval.export import cell_rows

    def record(task, level, success):
        return {"policy": "p", "task": task, "factor": "camera", "level": level, "success": success}

    records = [record("A", 1, True), record("A", 1, True), record("B", 1, False), record("A", 2, False),
               record("B", 2, True), record("B", 2, True), {**record("B", 2, True), "error": "boom"}]
    rows = {(r["factor"], r["level"]): r for r in cell_rows(records)}
    assert list(rows) == [("camera", 1), ("camera", 2), ("camera", "all")]
    pooled = rows[("camera", "all")]
    assert (pooled["tasks"], pooled["episodes"], pooled["successes"]) == (2, 6, 4)
    assert pooled["sr_macro"] == round((2 / 3 + 2 / 3) / 2, 4) and rows[("camera", 2)]["episodes"] == 3
    level1 = rows[("camera", 1)]  # A 2 of 2, B 0 of 1: pooled 2/3, the mean of the tasks' rates 1/2
    assert (level1["sr"], level1["sr_macro"]) == (round(2 / 3, 4), 0.5)
