"""The headroom oracles: the wrapper's sources, the oracle S, the expert's lookahead chunk, and the registry names."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest

from eval.oracles import oracle_gate
from graph_builder.build import build_graph_from_episodes
from graph_builder.storage import save_graph
from graph_builder.synthetic import synthetic_episodes
from r2a.wrapper.build import build_r2a, load_r2a_config
from r2a.wrapper.policy import summarize_diagnostics
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA
from tests.test_r2a_wrapper import ScriptedBase, _obs

SEED = 90000  # a training seed (the headroom range, docs/architecture.md "Conventions")
GRID = np.linspace(0.0, 0.5, 51)


def _error(base, reference, target, scale, s):
    """Per-dimension squared error of the blend ``base + scale·s·(reference − base)`` against ``target``."""
    blend = base + np.asarray(scale)[:, None] * np.asarray(s) * (reference - base)
    return ((blend - target) ** 2).sum(axis=0)


def test_the_oracle_s_is_in_bounds_and_no_constant_s_blends_closer():
    rng = np.random.default_rng(0)
    for trial in range(50):
        base, reference, target = (rng.uniform(-1, 1, (8, 7)) for _ in range(3))
        scale = rng.choice([0.0, 0.5, 1.0], 8) if trial % 2 else np.ones(8)
        s = oracle_gate(base, reference, target, scale, OSC_POSE_DELTA, 0.5)
        assert s.shape == (7,) and s.min() >= 0 and s.max() <= 0.5 and s[6] == 0
        best = _error(base, reference, target, scale, s)
        for constant in GRID:
            assert (best[:6] <= _error(base, reference, target, scale, np.full(7, constant))[:6] + 1e-12).all()
    base = rng.uniform(-1, 1, (8, 7))
    assert not oracle_gate(base, base, rng.uniform(-1, 1, (8, 7)), np.ones(8), OSC_POSE_DELTA, 0.5).any()
    assert not oracle_gate(base, -base, base * 0, np.zeros(8), OSC_POSE_DELTA, 0.5).any()  # nothing moves: S = 0


# ---------------------------------------------------------------------------------- the wrapper's sources

@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    episodes = synthetic_episodes(600, seed=0, num_tasks=2, mean_length=80)
    return save_graph(build_graph_from_episodes(episodes), tmp_path_factory.mktemp("g") / "graph")


def test_sources_replace_the_reference_and_the_s_and_the_holding_rule_still_applies(graph_dir):
    config = load_r2a_config(None, [f"graph={graph_dir}", "retriever=null", "retrieval.mode=knn",
                                    "recovery.enabled=false", "gate.kind=constant", "gate.holding_scale=0"])
    base = ScriptedBase()
    chunk = base.reply["actions"].copy()
    chunk[4:, 6] = -1.0  # the base opens the gripper from the 5th step: the first four are "holding"
    base.reply = {"actions": chunk}
    policy = build_r2a(config, base)
    target = np.full((8, 7), -0.3)
    seen = {}

    def gate_source(inputs, gate, scale):
        seen.update(reference=inputs.reference, gate=gate, scale=scale)
        return np.full(7, 0.4), {"oracle_gate": [0.4] * 7}

    policy.parts = replace(policy.parts, reference_source=lambda obs, retrieved: target, gate_source=gate_source)
    out = policy.infer(_obs(0))
    np.testing.assert_array_equal(seen["reference"], target)
    np.testing.assert_array_equal(seen["scale"], [0, 0, 0, 0, 1, 1, 1, 1])
    np.testing.assert_allclose(seen["gate"][0], [0.25] * 3 + [0.05] * 3 + [0])  # the gate's own S, bounded
    expected = chunk[:8] + seen["scale"][:, None] * 0.4 * (target - chunk[:8])
    expected[:, 6] = chunk[:8, 6]
    np.testing.assert_allclose(out["actions"], expected, atol=1e-6)
    assert out["r2a"]["oracle_gate"] == [0.4] * 7 and out["r2a"]["gate"][0] == pytest.approx(0.2)


def test_the_episode_summary_carries_the_traced_oracle_s_only_when_traced():
    plain = [{"fallback": None, "gate": [0.2] * 7, "seed_distance": 1.0}]
    assert not any(k.startswith(("mean_oracle", "mean_learned", "mean_expert")) for k in summarize_diagnostics(plain))
    traced = [{**plain[0], "oracle_gate": [s] * 7, "learned_gate": [0.1] * 7,
               "expert_error": {"base": [4.0, 1.0], "blend": [2.0 * s, 0.5]}} for s in (0.5, 1.0)]
    summary = summarize_diagnostics(traced)
    assert summary["mean_oracle_gate"] == [0.75] * 7 and summary["mean_learned_gate"] == [0.1] * 7
    assert summary["mean_expert_error"] == {"base": [4.0, 1.0], "blend": [1.5, 0.5]}


# --------------------------------------------------------------------------------- the real simulator

@pytest.fixture(scope="module")
def lift():
    pytest.importorskip("robosuite")
    from sim.envs.robosuite_env import SimConfig, SimEnv

    sim = SimEnv(SimConfig(task="Lift", image_size=32))
    yield sim
    sim.close()


def test_the_lookahead_is_the_experts_own_future_and_leaves_the_simulator_as_it_was(lift):
    from eval.oracles import ExpertChunks

    expert = ExpertChunks(lift, 8)
    lift.reset(SEED)
    expert.reset()
    for _ in range(12):  # a learner at half the expert's speed: the expert labels where it is
        expert.observe()
        lift.step(0.5 * expert.chunk(1)[0])
    expert.observe()
    fingerprint, control = lift.fingerprint(), lift.control_state()
    phase = (expert.expert._index, expert.expert._steps_in_phase, expert.expert._held)
    chunk = expert.chunk(8)
    assert chunk.shape == (8, 7) and expert.chunk(8) is not None
    assert lift.fingerprint() == fingerprint
    assert all(np.array_equal(v, control[k]) for k, v in lift.control_state().items())
    assert (expert.expert._index, expert.expert._steps_in_phase, expert.expert._held) == phase
    driver = copy.copy(expert.expert)  # the expert itself driving from here does exactly this
    lift.step(chunk[0])
    for k in range(1, 8):
        action = driver.infer({})["actions"][0]
        np.testing.assert_allclose(action, chunk[k], atol=1e-5)
        lift.step(action)


def _queries(lift, name: str, steps: int = 17):
    """Roll ``name`` out for ``steps`` control steps; per gated query: its gate inputs, expert chunk, S, trace and
    the actions it executed."""
    from demos.rollout import run_episode
    from eval.diagnostics import register_diagnostics
    from r2a.policies import make_policy

    register_diagnostics()
    policy = make_policy(name, lift, SEED)
    source, queries = policy.wrapper.parts.gate_source, []

    def spy(inputs, gate, scale):
        chosen, trace = source(inputs, gate, scale)
        queries.append({"base": inputs.base, "reference": inputs.reference, "scale": scale, "s": chosen,
                        "expert": source.expert.chunk(len(inputs.base)).copy(), "trace": trace, "actions": []})
        return chosen, trace

    policy.wrapper.parts = replace(policy.wrapper.parts, gate_source=spy)
    executed = []
    run_episode(lift, policy, SEED, record=False, n_action_steps=1, max_steps=steps,
                observer=lambda step: executed.append((step.index, step.action, step.reply)))
    starts = [i for i, _, reply in executed if reply and reply.get("r2a", {}).get("gate") is not None]
    for query, start in zip(queries, starts):
        query["actions"] = np.stack([a for i, a, _ in executed if start <= i < start + len(query["base"])])
    assert policy.metadata["deployable"] is False and policy.metadata["oracle"] == name
    return queries


@pytest.mark.parametrize("name", ["oracle-ref", "oracle-gate", "oracle-both"])
def test_each_oracle_replaces_its_part_and_traces_the_oracle_s(lift, name):
    queries = _queries(lift, name)
    assert len(queries) >= 2
    for q in queries:
        base, reference, expert, scale, s = q["base"], q["reference"], q["expert"], q["scale"], q["s"]
        if name != "oracle-gate":  # the reference is the expert's own next actions from this state
            np.testing.assert_array_equal(reference, expert)
            assert q["trace"]["expert_error"]["reference"] == [0.0, 0.0]
        blend = base + scale[:, None] * s * (reference - base)
        blend[:, 6] = base[:, 6]
        executed = q["actions"]  # what the robot executed (the last query's chunk is cut by the step limit)
        np.testing.assert_allclose(executed, np.clip(blend, -1, 1)[:len(executed)], atol=1e-5)
        if not scale.any():  # every step under the holding rule: S acts nowhere, the trace has the errors only
            assert "oracle_gate" not in q["trace"] and "expert_error" in q["trace"]
            continue
        oracle = np.asarray(q["trace"]["oracle_gate"])
        assert oracle.min() >= 0 and oracle.max() <= 0.5 and oracle[6] == 0
        if name == "oracle-ref":  # the learned gate's S blends
            np.testing.assert_allclose(s.mean(axis=0), q["trace"]["learned_gate"], atol=1e-4)
        else:  # the oracle S blends, and no constant S in the bounds brings the blend closer to the expert's
            np.testing.assert_allclose(s[0], oracle, atol=1e-4)
            best = _error(base, reference, expert, scale, s[0])
            for constant in GRID:
                assert (best[:6] <= _error(base, reference, expert, scale, np.full(7, constant))[:6] + 1e-9).all()
        if name == "oracle-both":  # with the expert as the reference: the upper bound wherever it moves
            moves = (np.abs(scale[:, None] * (expert - base)).sum(axis=0) > 1e-9)[:6]
            np.testing.assert_allclose(oracle[:6][moves], 0.5)


def test_oracles_need_a_simulator_and_are_registered_as_diagnostics():
    from eval.diagnostics import register_diagnostics
    from r2a.policies import POLICIES, make_policy

    register_diagnostics()
    for name in ("oracle-ref", "oracle-gate", "oracle-both"):
        assert POLICIES[name].diagnostic and "privileged simulator state" in POLICIES[name].help
        with pytest.raises(R2AInputError, match="needs a simulator"):
            make_policy(name)
