"""Graph inputs: bad episodes and incompatible sources are refused with clear messages, never merged."""

from __future__ import annotations

import numpy as np
import pytest

from graph_builder.build import build_graph
from graph_builder.config import GraphConfig, apply_override
from graph_builder.frames import source_from_episodes
from graph_builder.synthetic import line_episode, synthetic_episodes
from r2a_core.errors import R2AInputError
from r2a_core.types import ActionSpace


def _build(*sources, cfg=None):
    return build_graph(list(sources), cfg or GraphConfig())


def test_mixed_sources_merge_when_compatible():
    a = source_from_episodes(synthetic_episodes(1000, seed=1), "a.hdf5")
    b = source_from_episodes(synthetic_episodes(1000, seed=2), "b_lerobot")
    g = _build(a, b)
    assert [s["path"] for s in g.manifest["sources"]] == ["a.hdf5", "b_lerobot"]
    assert set(g.arrays["demo_source"].tolist()) == {0, 1}
    assert g.manifest["per_task"]["lift"]["sources"] == ["a.hdf5", "b_lerobot"]
    assert g.manifest["sources"][0]["sha256"] != g.manifest["sources"][1]["sha256"]


def test_different_action_dims_are_refused():
    a = source_from_episodes([line_episode(20)], "a.hdf5")
    b = source_from_episodes([line_episode(20, action_dim=8)], "b.hdf5")
    with pytest.raises(R2AInputError, match=r"different action spaces \(a.hdf5 episode 0: 7-D actions; "
                                            r"b.hdf5 episode 0: 8-D actions\); build one graph per action space"):
        _build(a, b)


def test_different_action_space_kinds_are_refused():
    delta, absolute = line_episode(20), line_episode(20)
    names = tuple(f"a{i}" for i in range(7))
    delta.meta["action_space"] = ActionSpace("delta_ee", names, (-1,) * 7, (1,) * 7, (6,)).to_dict()
    absolute.meta["action_space"] = ActionSpace("abs_ee", names, (-1,) * 7, (1,) * 7, (6,))
    with pytest.raises(R2AInputError, match="7-D delta_ee .*7-D abs_ee"):
        _build(source_from_episodes([delta], "d.hdf5"), source_from_episodes([absolute], "a.hdf5"))


def test_conflicting_instructions_are_refused_unless_allowed():
    a = source_from_episodes([line_episode(20, task="lift", instruction="lift the cube")], "a.hdf5")
    b = source_from_episodes([line_episode(20, task="lift", instruction="pick up the block")], "b.hdf5")
    with pytest.raises(R2AInputError, match=r"task 'lift' different instructions \(a.hdf5: \['lift the cube'\]; "
                                            r"b.hdf5: \['pick up the block'\]\)"):
        _build(a, b)
    g = _build(a, b, cfg=apply_override(GraphConfig(), "inputs.allow_instruction_mismatch=true"))
    assert g.manifest["instructions"] == ["lift the cube", "pick up the block"]
    assert g.arrays["demo_instruction"].tolist() == [0, 1]


@pytest.mark.parametrize("field, value, message", [
    ("ee_pos", np.full((20, 3), np.nan), "ee_pos contains NaN"),
    ("ee_quat", np.zeros((20, 4)), "ee_quat has zero-length quaternions"),
    ("gripper", np.full(20, 40.0), r"gripper ranges 40..40, expected the normalized opening in \[0, 1\]"),
    ("ee_pos", np.zeros((19, 3)), "ee_pos has 19 rows, expected 20"),
])
def test_bad_episodes_name_source_episode_and_field(field, value, message):
    eps = [line_episode(20), line_episode(20)]
    setattr(eps[1], field, value)
    with pytest.raises(R2AInputError, match=f"bad.hdf5 episode 1: {message}"):
        _build(source_from_episodes(eps, "bad.hdf5"))


def test_no_successful_demos():
    src = source_from_episodes([line_episode(20, success=False)], "failed.hdf5")
    with pytest.raises(R2AInputError, match="no successful demonstrations in failed.hdf5"):
        _build(src)
    g = _build(src, cfg=apply_override(GraphConfig(), "inputs.skip_failed=false"))
    assert g.manifest["counts"]["demos"] == 1


def test_one_instruction_under_two_task_names_is_reported():
    a = source_from_episodes([line_episode(20, task="stack", instruction="stack the cubes")], "a.hdf5")
    b = source_from_episodes([line_episode(20, task="stack_the_cubes", instruction="stack the cubes")], "lerobot")
    g = _build(a, b)
    assert g.manifest["tasks"] == ["stack", "stack_the_cubes"]
    assert g.manifest["instructions"] == ["stack the cubes"]  # one instruction id
    assert g.manifest["warnings"] == ["instruction 'stack the cubes' belongs to different tasks ('stack' in a.hdf5; "
                                      "'stack_the_cubes' in lerobot); they stay separate tasks (rename the tasks "
                                      "to merge them)"]
