"""`r2a bench perf sim`: simulator steps/s per task and image size, the expert driving (tiny counts: a check of the
pipeline, never a timing assertion)."""

from __future__ import annotations

import pytest

from eval.perf.sim_speed import format_table, measure_sim_speed
from r2a_core.errors import R2AInputError


def test_rows_per_task_and_size_with_cameras_only_where_asked():
    result = measure_sim_speed(("Lift",), (0, 16), steps=12, seed=0, culling=(True, False))
    assert [(r["task"], r["image_size"], r["culling"]) for r in result["rows"]] == [
        ("Lift", 0, False), ("Lift", 16, True), ("Lift", 16, False)]  # nothing to cull without cameras
    no_cameras, culled, full = result["rows"]
    assert no_cameras["cameras"] == [] and culled["cameras"] == full["cameras"] == ["agentview", "wrist"]
    for row in result["rows"]:
        assert row["steps_per_s"] > 0 and row["build_s"] > 0 and row["episodes"] >= 1
    table = format_table(result)
    assert "| Lift | robosuite | none | — |" in table and "| Lift | robosuite | 16 | on |" in table
    assert "| Lift | robosuite | 16 | off |" in table


def test_rendering_every_nth_step_is_a_row_beside_every_step():
    result = measure_sim_speed(("Lift",), (0, 16), steps=8, seed=0, render_every=(1, 4))
    assert [(r["image_size"], r["render_every"]) for r in result["rows"]] == [(0, None), (16, 1), (16, 4)]
    table = format_table(result)
    assert "| 16 | on | every step |" in table and "| 16 | on | every 4th |" in table


@pytest.mark.parametrize("sizes, steps, every, message", [
    ((4,), 10, (1,), "expected 0"), ((64,), 0, (1,), "at least 1"), ((64,), 10, (0,), "step counts of at least 1")])
def test_bad_arguments_are_refused_before_any_simulator(sizes, steps, every, message):
    with pytest.raises(R2AInputError, match=message):
        measure_sim_speed(("Lift",), sizes, steps=steps, render_every=every)
