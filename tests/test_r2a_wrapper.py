"""The R2A wrapper policy: blending, every fallback path, start-pose recovery, registry names and bounds."""

from __future__ import annotations

import numpy as np
import pytest

from graph_builder.build import build_graph_from_episodes
from graph_builder.storage import save_graph
from graph_builder.synthetic import synthetic_episodes
from r2a.wrapper import policy as wrapper
from r2a.wrapper.build import build_r2a, load_r2a_config
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    episodes = synthetic_episodes(3000, seed=0, num_tasks=2, mean_length=80)
    return save_graph(build_graph_from_episodes(episodes), tmp_path_factory.mktemp("g") / "graph")


class ScriptedBase:
    """A base policy whose next reply the test sets; it records what it was asked."""

    action_space = OSC_POSE_DELTA

    def __init__(self) -> None:
        self.reply = {"actions": np.tile(np.array([0.5, -0.5, 0.2, 0.1, 0, 0, 1], np.float32), (16, 1))}
        self.seen: list[dict] = []

    def reset(self) -> None:
        self.seen.clear()

    def infer(self, obs):
        self.seen.append(obs)
        return dict(self.reply)


def _obs(step: int, pos=(0.0, 0.0, 1.0), prompt="lift the cube") -> dict:
    return {"state/ee_pos": np.array(pos), "state/ee_quat": np.array([0.0, 1.0, 0.0, 0.0]),
            "state/gripper": np.float32(1.0), "prompt": prompt, "state/step": step}


def _r2a(graph_dir, *overrides: str, base=None):
    config = load_r2a_config(None, [f"graph={graph_dir}", "retriever=null", "retrieval.mode=knn",
                                    "recovery.enabled=false", "gate.kind=constant", *overrides])
    base = base or ScriptedBase()
    return build_r2a(config, base), base


def test_blend_moves_the_base_toward_the_reference_and_keeps_the_gripper(graph_dir):
    policy, base = _r2a(graph_dir)
    out = policy.infer(_obs(0))
    actions, diag = out["actions"], out["r2a"]
    assert actions.shape == (8, 7) and diag["fallback"] is None and len(diag["nodes"]) == 8
    np.testing.assert_allclose(actions[:, 6], 1.0)  # the gripper passes through
    np.testing.assert_allclose(diag["gate"], [0.25] * 3 + [0.05] * 3 + [0.0], atol=1e-6)
    a = policy.parts.retriever.arrays
    from r2a.retrieval.synthesis import fused_actions

    ref = fused_actions(a, np.array(diag["nodes"]), np.array(diag["weights"]), 8)
    expected = base.reply["actions"][:8, :3] + 0.25 * (ref[:, :3] - base.reply["actions"][:8, :3])
    np.testing.assert_allclose(actions[:, :3], np.clip(expected, -1, 1), atol=1e-5)
    assert policy.n_action_steps == 8 and "graph" in policy.metadata["artifacts"]


def test_holding_scale_hands_the_motion_to_the_base_while_the_gripper_is_commanded_closed(graph_dir):
    policy, base = _r2a(graph_dir, "gate.holding_scale=0")
    out = policy.infer(_obs(0))  # the scripted base commands the gripper closed (+1) on every step
    np.testing.assert_allclose(out["actions"], np.clip(base.reply["actions"][:8], -1, 1), atol=1e-6)
    np.testing.assert_allclose(out["r2a"]["gate"], 0.0)
    policy.reset()
    open_chunk = base.reply["actions"].copy()
    open_chunk[4:, 6] = -1.0  # the second half of the executed steps opens the gripper: blended as usual
    base.reply = {"actions": open_chunk}
    actions = policy.infer(_obs(0))["actions"]
    np.testing.assert_allclose(actions[:4, :6], open_chunk[:4, :6], atol=1e-6)
    assert np.abs(actions[4:, :3] - open_chunk[4:8, :3]).max() > 1e-4
    with pytest.raises(R2AInputError, match="holding_scale"):
        _r2a(graph_dir, "gate.holding_scale=2")


@pytest.mark.parametrize("case, reason", [
    ("nan_base", wrapper.BASE_NONFINITE), ("guard_fallback", wrapper.BASE_FALLBACK),
    ("no_proprio", wrapper.NO_PROPRIO), ("far", wrapper.FAR_FROM_GRAPH), ("unsure", wrapper.LOW_CONFIDENCE),
    ("raises", wrapper.ERROR)])
def test_every_fallback_returns_finite_bounded_actions_and_says_why(graph_dir, case, reason, monkeypatch):
    overrides = {"far": ["fallback.max_seed_distance=0.0001"], "unsure": ["fallback.max_entropy=0.0"]}
    policy, base = _r2a(graph_dir, *overrides.get(case, []))
    obs = _obs(0)
    if case == "nan_base":
        base.reply = {"actions": np.full((16, 7), np.nan, np.float32)}
    elif case == "guard_fallback":
        base.reply = {**base.reply, "fallback": True}
    elif case == "no_proprio":
        obs.pop("state/ee_pos")
    elif case == "raises":
        monkeypatch.setattr(policy.parts.retriever, "retrieve", lambda *a, **k: 1 / 0)
    out = policy.infer(obs)
    assert out["r2a"]["fallback"] == reason
    assert np.isfinite(out["actions"]).all() and np.abs(out["actions"]).max() <= 1.0
    if case not in ("nan_base",):
        np.testing.assert_allclose(out["actions"], np.clip(base.reply["actions"][:8], -1, 1))
    else:
        np.testing.assert_allclose(out["actions"][:, :6], 0.0)  # hold still
    if case == "raises":
        assert "ZeroDivisionError" in out["r2a"]["error"]


def test_output_is_bounded_for_extreme_base_chunks(graph_dir):
    policy, base = _r2a(graph_dir, "gate.kind=replay")
    rng = np.random.default_rng(0)
    for step in range(0, 80, 8):
        base.reply = {"actions": rng.normal(0, 50, (16, 7)).astype(np.float32)}
        out = policy.infer(_obs(step, pos=rng.normal(0, 0.1, 3) + [0, 0, 1]))
        assert np.isfinite(out["actions"]).all() and np.abs(out["actions"]).max() <= 1.0


def test_recovery_servos_an_out_of_distribution_start_then_starts_the_base_clock(graph_dir):
    policy, base = _r2a(graph_dir, "recovery.enabled=true", "recovery.max_steps=80")
    recovery = policy.parts.recovery
    quat = _turn(recovery._quat[0], np.array([0.0, 0.0, 0.4]))
    pos = recovery._pos[0] + np.array([0.15, -0.1, 0.08])  # far from every demo start
    needed, target, _ = recovery.needed(pos, quat, 1.0)
    assert needed
    step = 0
    while True:
        obs = {**_obs(step, pos=pos), "state/ee_quat": quat}
        out = policy.infer(obs)
        if not out["r2a"]["recovery"]:
            break
        action = out["actions"]
        assert action.shape == (1, 7) and action[0, 6] == -1.0 and np.abs(action).max() <= 1.0
        pos = pos + action[0, :3] * 0.05 * 0.3  # a crude arm: 30 % of the commanded delta per step
        quat = _turn(quat, action[0, 3:6] * 0.5 * 0.3)
        step += 1
        assert step < 80, "the servo never reached the target start"
    assert np.linalg.norm(recovery.errors(pos, quat, target)[0]) <= recovery.settings.position_tolerance
    assert base.seen and base.seen[0]["state/step"] == 0  # the base's clock starts when recovery ends
    assert len(base.seen) == 1  # the base was never asked during recovery


def _turn(quat: np.ndarray, world_rotvec: np.ndarray) -> np.ndarray:
    """``quat`` (wxyz) rotated by a world-frame rotation vector (q' = dq ⊗ q)."""
    from r2a_core.rotations import axis_angle_to_quat

    w1, x1, y1, z1 = axis_angle_to_quat(world_rotvec)
    w2, x2, y2, z2 = quat
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def test_recovery_does_nothing_at_a_demonstrated_start(graph_dir):
    policy, base = _r2a(graph_dir, "recovery.enabled=true")
    start = policy.parts.recovery._pos[3]
    out = policy.infer(_obs(0, pos=start))
    assert out["r2a"]["recovery"] is False and len(base.seen) == 1


def test_recovery_leaves_a_start_inside_the_absolute_floor_alone(graph_dir):
    """Demos that start close together make the spread threshold tiny; a start a few millimetres (or a few
    hundredths of a radian) off is still a usual start, and only the floor's excess triggers the servo."""
    policy, _ = _r2a(graph_dir, "recovery.enabled=true", "recovery.threshold_scale=0")  # the spread says: recover
    recovery = policy.parts.recovery
    start, quat = recovery._pos[3], recovery._quat[3]
    assert recovery.threshold == 0.0
    for offset, turn, expected in [((0.02, -0.015, 0.01), 0.05, False), ((0.0, 0.0, 0.3), 0.0, True),
                                   ((0.0, 0.0, 0.0), 0.8, True)]:
        pos, q = start + np.array(offset), _turn(quat, np.array([0.0, 0.0, turn]))
        needed, target, _ = recovery.needed(pos, q, 1.0)
        assert needed is expected, (offset, turn)
        assert recovery.beyond_floor(pos, q, target) is expected
    policy, _ = _r2a(graph_dir, "recovery.enabled=true", "recovery.threshold_scale=0",
                     "recovery.min_position_offset=0", "recovery.min_rotation_offset=0")
    assert policy.parts.recovery.needed(start + 0.002, quat, 1.0)[0]  # without a floor: any offset


def test_registry_names_and_bad_configs(graph_dir):
    from eval.diagnostics import register_diagnostics
    from r2a.policies import make_policy, policy_names

    register_diagnostics()
    assert {"r2a", "r2a-builtin", "r2a-builtin-libero", "r2a-builtin-libero-strong"} <= set(policy_names())
    assert {"r2a-knn", "r2a-nogate", "r2a-norecovery"} <= set(policy_names(diagnostic=True))
    policy = make_policy(f"r2a-nogate:?graph={graph_dir}&retriever=null&retrieval.mode=knn&"
                         "base=callable:test_r2a_wrapper:still")
    assert policy.parts.max_gate == 1.0 and policy.parts.recovery is not None
    knn = make_policy(f"r2a-knn:?graph={graph_dir}&base=callable:test_r2a_wrapper:still")
    assert knn.parts.retriever.settings.mode == "knn"
    with pytest.raises(R2AInputError, match="unknown field 'gaet'"):
        make_policy(f"r2a:?graph={graph_dir}&gaet.kind=replay")
    with pytest.raises(R2AInputError, match="needs a trained retriever|no retriever checkpoint"):
        make_policy(f"r2a:?graph={graph_dir}&retriever=null")


def still(obs):
    """A base that does nothing (for registry tests)."""
    return np.zeros((16, 7), np.float32)


def test_a_retriever_runs_on_another_graph_only_when_asked(graph_dir, caplog):
    shipped = ["retrieval.mode=gnn", "retriever=r2a/assets/r2a_retriever"]
    with pytest.raises(R2AInputError, match="trained on another graph .*retriever_on_other_graph: true"):
        _r2a(graph_dir, *shipped)
    with caplog.at_level("WARNING"):
        policy, _ = _r2a(graph_dir, *shipped, "retriever_on_other_graph=true")
    assert "retriever_on_other_graph: true" in caplog.text
    out = policy.infer(_obs(0))
    assert np.isfinite(out["actions"]).all() and np.abs(out["actions"]).max() <= 1.0


@pytest.mark.parametrize("own, warned", [(None, False), (8, False), (100, True)])
def test_a_base_that_replans_otherwise_alone_is_said_once(graph_dir, caplog, monkeypatch, own, warned):
    """A lerobot checkpoint left at its default executes 100 actions of a chunk alone; R2A always executes 8. Said
    once per process: a benchmark builds a wrapper per episode."""
    monkeypatch.setattr(wrapper, "_REPLANNING_WARNED", set())
    base = ScriptedBase()
    base.n_action_steps = own
    with caplog.at_level("WARNING", logger="r2a.wrapper.policy"):
        for _ in range(3):
            policy, _ = _r2a(graph_dir, base=base)
            policy.infer(_obs(0))
    said = [r.getMessage() for r in caplog.records if "re-plans" in r.getMessage()]
    assert said == (["the base executes 100 actions of each chunk on its own; R2A executes 8 (executed_steps), so "
                     "R2A re-plans more often than the base alone (unless a run's n_action_steps sets both)"]
                    if warned else [])


def test_the_episode_trace_keeps_each_query_s_gate_fallback_and_the_recovery_span(graph_dir):
    """What the benchmark records per query (episode schema v2) from the wrapper's replies: a blended query's gate,
    a fallback's reason, the servo's steps as one span."""
    from eval.episode_job import ReplyDiagnostics

    policy, base = _r2a(graph_dir, "recovery.enabled=true")
    recovery = policy.parts.recovery
    observer = ReplyDiagnostics("r2a")
    replies = [{"r2a": {"recovery": True, "fallback": None, "recovery_step": 1}},
               {"r2a": {"recovery": True, "fallback": None, "recovery_step": 2}},
               policy.infer(_obs(0, pos=recovery._pos[3])),
               {"r2a": {"fallback": wrapper.FAR_FROM_GRAPH, "step": 8, "recovery": False}}]
    for index, reply in zip((0, 1, 2, 10), replies):
        observer(type("Step", (), {"index": index, "reply": reply})())
    observer(type("Step", (), {"index": 11, "reply": None})())  # a step inside a chunk: no query
    summary = observer.summary()
    trace = summary["trace"]
    assert trace["step"] == [2, 10] and trace["recovery"] == [0, 1] and summary["recovery_steps"] == 2
    assert trace["fallback"] == [None, wrapper.FAR_FROM_GRAPH] and trace["gate"][1] is None
    np.testing.assert_allclose(trace["gate"][0], np.round(replies[2]["r2a"]["gate"], 3))
    assert trace["seed_distance"][0] == round(replies[2]["r2a"]["seed_distance"], 3)
    assert trace["pull"][0] == replies[2]["r2a"]["pull"] >= 0 and trace["pull"][1] is None
    assert trace["disagreement"] == [None, None]  # the first query has no earlier plan


def test_the_pull_is_what_r2a_changed_and_the_disagreement_the_bases_replan(graph_dir):
    policy, base = _r2a(graph_dir)
    first = policy.infer(_obs(0))
    old = base.reply["actions"].astype(np.float64)
    new = old.copy()
    new[:, :3] += 0.1  # the base re-plans: its new chunk moves 0.1 further on x, y, z than it planned
    base.reply = {"actions": new.astype(np.float32)}
    second = policy.infer(_obs(8))
    assert first["r2a"]["disagreement"] is None and second["r2a"]["fallback"] is None
    assert second["r2a"]["disagreement"] == pytest.approx(0.1 * 3 / 6, abs=1e-4)  # 6 motion dimensions
    motion = [0, 1, 2, 3, 4, 5]
    expected = np.abs(np.asarray(second["actions"], np.float64) - new[:8])[:, motion].mean()
    assert second["r2a"]["pull"] == pytest.approx(expected, abs=1e-4) and second["r2a"]["pull"] > 0


def test_the_configs_bound_applies_to_a_trained_gate():
    """`gate.max_gate` below the checkpoint's own bound caps a learned or fixed gate (it was silently ignored)."""
    from r2a.policies import make_policy

    assert make_policy("r2a").parts.max_gate == 0.5
    capped = make_policy("r2a:?gate.max_gate=0.2&gate.translation=0.2")
    assert capped.parts.max_gate == 0.2
    fixed = make_policy("r2a-fixed:?gate.max_gate=0.1&gate.translation=0.1")
    assert fixed.parts.max_gate == 0.1 and float(fixed.parts.gate.values.max()) <= 0.1


def test_no_blend_returns_the_base_chunk_while_it_still_retrieves(graph_dir):
    """The gate bounded at S = 0 (r2a-libero-strong-noharm's NO_BLEND): the reference is retrieved and traced, and
    the base's actions pass through unchanged — the strong base's clean episodes ended as the base's, 400 of 400."""
    from r2a.policies.registry import NO_BLEND

    policy, base = _r2a(graph_dir, *NO_BLEND)
    for step in (0, 8, 16):
        out = policy.infer(_obs(step))
        assert out["r2a"]["fallback"] is None and len(out["r2a"]["nodes"]) == 8
        np.testing.assert_allclose(out["r2a"]["gate"], 0.0)
        np.testing.assert_array_equal(out["actions"], base.reply["actions"][:8])
