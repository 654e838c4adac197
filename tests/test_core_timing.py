"""r2a_core.timing: the one stage timer of the graph build and the run-time profiling."""

from __future__ import annotations

import time

import pytest

from r2a_core.timing import NOT_TIMED, StageTimer, stage_timer


def test_a_stage_entered_twice_counts_both_blocks(monkeypatch) -> None:
    clock = iter([10.0, 10.5, 20.0, 20.25, 30.0, 30.125])  # enter, exit of each block
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    times: dict[str, float] = {}
    for _ in range(2):
        with StageTimer(times, "gnn"):
            pass
    with StageTimer(times, "fuse"):
        pass
    assert times == {"gnn": 0.75, "fuse": 0.125}


def test_a_block_that_raises_still_counts() -> None:
    times: dict[str, float] = {}
    with pytest.raises(ValueError), StageTimer(times, "seed"):
        raise ValueError("bad key")
    assert times["seed"] >= 0.0


def test_timing_off_is_the_shared_no_op() -> None:
    assert stage_timer(None, "gnn") is NOT_TIMED
    times: dict[str, float] = {}
    with stage_timer(times, "gnn"):
        pass
    assert list(times) == ["gnn"]
