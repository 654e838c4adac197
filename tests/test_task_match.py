"""Task matching by meaning (issue 49, lever 2): the decision rule, the wrapper's fallback, the fit's safety rule,
and the training paraphrases' split from the benchmark's lists."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest
import yaml

from r2a.wrapper.task_match import TaskMatcher, TaskMatchSettings, decide
from training.task_match import TRAIN_PARAPHRASES, fit_task_match, load_paraphrases

INSTRUCTIONS = ["pick up the red cube", "put the can into the bin"]
#: a toy embedding: sentences are placed by hand (unit vectors), so similarities are known
VECTORS = {"pick up the red cube": [1, 0, 0], "put the can into the bin": [0, 1, 0],
           "lift the red cube": [0.95, 0.3122, 0], "move something": [0.6, 0.6, 0.5292],
           "open the drawer": [0, 0, 1]}


def toy_embed(texts):
    v = np.array([VECTORS[t] for t in texts], np.float64)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_the_nearest_task_is_taken_only_when_close_and_clear():
    matcher = TaskMatcher(INSTRUCTIONS, TaskMatchSettings(mode="meaning", min_similarity=0.8, min_margin=0.1),
                          toy_embed)
    assert matcher.match("pick up the red cube").instruction == "pick up the red cube"  # exact, no embedding
    assert matcher.match("lift the red cube").instruction == "pick up the red cube"
    ambiguous = matcher.match("move something")  # equally near both: no task
    assert ambiguous.instruction is None and ambiguous.margin == pytest.approx(0.0, abs=1e-3)
    assert matcher.match("open the drawer").instruction is None  # near neither
    exact = TaskMatcher(INSTRUCTIONS, TaskMatchSettings(mode="exact"), toy_embed)
    assert exact.match("lift the red cube").instruction is None
    assert decide(np.array([0.9]), ["only"], 0.8, 0.5).instruction == "only"  # one task: no second to beat


def test_the_wrapper_leaves_the_base_alone_on_an_unknown_task(tmp_path):
    from graph_builder.build import build_graph_from_episodes
    from graph_builder.storage import save_graph
    from graph_builder.synthetic import synthetic_episodes
    from r2a.wrapper import policy as wrapper
    from tests.test_r2a_wrapper import _obs, _r2a

    graph = save_graph(build_graph_from_episodes(synthetic_episodes(600, seed=0, num_tasks=2, mean_length=60)),
                       tmp_path / "g")
    policy, base = _r2a(graph, "task_match.unknown=base")
    known = policy.parts.retriever.instructions[0]
    out = policy.infer(_obs(0, prompt="something nobody asked for"))
    assert out["r2a"]["fallback"] == wrapper.UNKNOWN_TASK and out["r2a"]["matched_task"] is None
    np.testing.assert_allclose(out["actions"], base.reply["actions"][:8])  # the base chunk, untouched
    policy.reset()
    out = policy.infer(_obs(0, prompt=known))
    assert out["r2a"]["fallback"] is None and out["r2a"]["matched_task"] == known
    pooled, _ = _r2a(graph)  # the published default: exact matching, an unknown prompt pools every task
    assert pooled.parts.task_matcher is None
    assert pooled.infer(_obs(0, prompt="something nobody asked for"))["r2a"]["fallback"] is None


def test_the_fit_never_accepts_a_wrong_task():
    tasks = {"pick up the red cube": "Lift", "put the can into the bin": "PickPlaceCan"}
    paraphrases = {"Lift": ["lift the red cube"], "PickPlaceCan": ["move something"], "Drawer": ["open the drawer"]}
    fit = fit_task_match(tasks, paraphrases, toy_embed)
    assert fit["right"] == 1 and fit["none"] == 2 and fit["paraphrases"] == 3
    assert all(r["wrong"] > 0 for r in fit["grid"] if r["min_similarity"] <= 0.55 and r["min_margin"] == 0.0)
    chosen = TaskMatchSettings(mode="meaning", **fit["chosen"])
    matcher = TaskMatcher(list(tasks), chosen, toy_embed)
    assert [matcher.match(s).instruction for s in ("lift the red cube", "move something", "open the drawer")] == [
        "pick up the red cube", None, None]


def test_the_training_paraphrases_share_no_sentence_with_the_benchmark():
    from r2a_core.config import shipped_path

    train = load_paraphrases(shipped_path(TRAIN_PARAPHRASES))
    bench = set()
    for path in glob.glob(str(shipped_path("configs/language")) + "/**/*.yaml", recursive=True):
        doc = yaml.safe_load(open(path))
        bench |= {s.strip().lower() for level in ("L1", "L2", "L3") for s in doc.get(level, [])}
    shared = [s for items in train.values() for s in items if s.strip().lower() in bench]
    assert len(bench) > 100 and len(train) == 24 and not shared, shared


def test_the_training_paraphrases_share_no_sentence_with_liberoplus_language_variants():
    """LIBERO-Plus's language factor reads instructions from its own BDDL files (installed data, not configs/)."""
    from r2a_core.config import shipped_path
    from sim.envs.liberoplus_tasks import package_root
    from sim.shifts.liberoplus import bddl_language

    root = package_root(required=False)
    if root is None:
        pytest.skip("LIBERO-Plus's data is not installed (make install-liberoplus)")
    files = glob.glob(str(root / "liberoplus" / "bddl_files" / "*" / "*_language_*.bddl"))
    variants = {bddl_language(Path(f)).strip().lower().rstrip(".") for f in files}
    train = load_paraphrases(shipped_path(TRAIN_PARAPHRASES))
    shared = [s for items in train.values() for s in items if s.strip().lower().rstrip(".") in variants]
    assert len(variants) > 100 and not shared, shared


@pytest.mark.parametrize("name, published, thresholds",
                         [("r2a-noharm", "r2a-harmonize-hold-clgate-canon", (0.65, 0.03)),
                          ("r2a-libero-noharm", "r2a-libero", (0.70, 0.02))])
def test_the_noharm_variants_are_the_published_ones_with_task_matching_by_meaning(name, published, thresholds):
    from eval.diagnostics import register_diagnostics
    from r2a.policies.registry import r2a_config_for

    register_diagnostics()
    variant, before = r2a_config_for(name).to_dict(), r2a_config_for(published).to_dict()
    match = variant.pop("task_match")
    assert (match["mode"], match["unknown"], (match["min_similarity"], match["min_margin"])) == \
        ("meaning", "base", thresholds)
    before.pop("task_match")
    if name == "r2a-noharm":  # and the view warp's gate chosen on training seeds
        assert variant["canonicalize"].pop("min_gain") == 0.2 and before["canonicalize"].pop("min_gain") == 0.0
        assert variant["canonicalize"].pop("photometric_veto").endswith("r2a_harmonize_stats.json")
        assert before["canonicalize"].pop("photometric_veto") is None
    assert variant == before  # nothing else changes
