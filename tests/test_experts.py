"""Scripted experts solve every built-in task (state-only simulation for speed)."""

import pytest

from demos.experts.scripted import make_expert
from demos.rollout import run_episode
from sim.envs.robosuite_env import SimConfig, SimEnv
from sim.envs.tasks import BUILTIN_TASKS

pytest.importorskip("robosuite")


def _success_rate(task: str, seeds: range, variant: str = "scripted") -> tuple[float, list[dict]]:
    sim = SimEnv(SimConfig(task=task, cameras=()))
    summaries = [run_episode(sim, make_expert(sim, variant=variant), seed, record=False)[1] for seed in seeds]
    sim.close()
    return sum(s["success"] for s in summaries) / len(summaries), summaries


@pytest.mark.parametrize("task", list(BUILTIN_TASKS))
def test_expert_succeeds_and_latches_every_stage(task):
    rate, summaries = _success_rate(task, range(100, 103))
    assert rate == 1.0, summaries
    for s in summaries:
        assert all(s["stages"].values()), s


@pytest.mark.slow
@pytest.mark.parametrize("task", list(BUILTIN_TASKS))
def test_expert_success_rate_is_at_least_95_percent(task):
    rate, _ = _success_rate(task, range(40))
    assert rate >= 0.95


@pytest.mark.parametrize("task", ["Stack", "StackThree"])
def test_funnel_expert_succeeds_and_latches_every_stage(task):
    rate, summaries = _success_rate(task, range(100, 103), variant="scripted-funnel")
    assert rate == 1.0 and all(all(s["stages"].values()) for s in summaries), summaries
