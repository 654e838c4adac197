"""The reference in the real simulator: conversion into OSC_POSE actions retraces a demo; recovery moves a shifted
start back to the demos' starts."""

from __future__ import annotations

import numpy as np
import pytest

from demos.experts.scripted import make_expert
from demos.rollout import run_episode
from graph_builder.build import build_graph_from_episodes
from r2a.retrieval.history import ExecutionHistory
from r2a.retrieval.motion import response_for
from r2a.retrieval.synthesis import reference_chunk
from sim.envs.robosuite_env import SimConfig, SimEnv

pytest.importorskip("robosuite")


@pytest.fixture(scope="module")
def lift():
    sim = SimEnv(SimConfig(task="Lift", cameras=()))
    episodes = [run_episode(sim, make_expert(sim), seed)[0] for seed in range(6)]
    for episode in episodes:  # what a demo file records with each episode
        episode.meta["action_space"] = sim.action_space.to_dict()
    yield sim, episodes, build_graph_from_episodes(episodes)
    sim.close()


def _drive_reference(sim, episode, graph, demo: int, node: int, conversion: str) -> np.ndarray:
    """Replay ``episode`` up to the node's start, then execute the node's reference; per-step position error."""
    a = graph.arrays
    start = int(a["node_span"][node][0])
    sim.reset(int(episode.meta["seed"]))
    history = ExecutionHistory(7)
    history.observe(0, sim.ee_pos(), sim.ee_quat(), 1.0)
    for t in range(start):
        history.plan(episode.actions[t:t + 1])
        sim.step(episode.actions[t])
        history.observe(t + 1, sim.ee_pos(), sim.ee_quat(), 1.0)
    np.testing.assert_allclose(sim.ee_pos(), episode.ee_pos[start], atol=1e-9)  # the demo's own state
    n = min(8, len(episode) - start - 1)
    window = history.window(16)
    ref = reference_chunk(a, np.array([node]), np.array([1.0]), window, n, conversion, response_for(graph),
                          sim.action_space)
    ref[:, 6] = episode.actions[start:start + n, 6]  # the gripper passes through (here: the demo's own)
    reached = []
    for action in ref:
        sim.step(action)
        reached.append(sim.ee_pos())
    return np.linalg.norm(np.array(reached) - episode.ee_pos[start + 1:start + 1 + n], axis=1)


def test_the_reference_of_a_demos_own_node_retraces_the_demo(lift):
    sim, episodes, graph = lift
    a = graph.arrays
    exact, approx = [], []
    for demo in range(2):
        episode = episodes[int(a["demo_episode"][demo])]
        for node in graph.demo_nodes(demo)[1:-1:2]:
            exact.append(_drive_reference(sim, episode, graph, demo, int(node), "actions"))
            approx.append(_drive_reference(sim, episode, graph, demo, int(node), "response"))
    # recorded actions from the recorded state: the same motion (to floating-point noise)
    assert max(e.max() for e in exact) < 1e-6
    # the anchored trajectory through the fitted controller response, open loop over the chunk: within a few mm
    errors = np.concatenate(approx)
    assert errors.mean() < 0.006 and np.percentile(errors, 90) < 0.015, (errors.mean(), errors.max())


def test_recovery_brings_a_shifted_start_back_to_the_demo_starts(lift):
    from r2a.wrapper.build import _steady_gains
    from r2a.wrapper.config import RecoverySettings
    from r2a.wrapper.recovery import StartPoseRecovery
    from sim.shifts import apply_shift

    sim, _, graph = lift
    recovery = StartPoseRecovery(graph, RecoverySettings(max_steps=80), sim.action_space,
                                 _steady_gains(response_for(graph)))
    sim.reset(100000)
    apply_shift(sim, "robot_init", 3, seed=100000)  # the benchmark's strongest start-pose shift
    before, target = recovery.distance(sim.ee_pos(), sim.ee_quat(), 1.0)
    needed = recovery.needed(sim.ee_pos(), sim.ee_quat(), 1.0)[0]
    assert needed and before > recovery.threshold
    steps = 0
    while not recovery.done(sim.ee_pos(), sim.ee_quat(), target, steps):
        sim.step(recovery.action(sim.ee_pos(), sim.ee_quat(), target))
        steps += 1
    after, _ = recovery.distance(sim.ee_pos(), sim.ee_quat(), 1.0)
    pos_err, rot_err = recovery.errors(sim.ee_pos(), sim.ee_quat(), target)
    assert steps < 80 and np.linalg.norm(pos_err) <= 0.01 and np.linalg.norm(rot_err) <= 0.1
    assert after < recovery.threshold < before
