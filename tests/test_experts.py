"""Scripted experts solve every built-in task (state-only simulation for speed)."""

import numpy as np
import pytest

from demos.experts.phase import OPEN, Phase
from demos.experts.scripted import DOWN, ScriptedExpert, make_expert
from demos.rollout import run_episode
from r2a_core.rotations import matrix_to_quat
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


class _StillHand:
    """A hand that points straight down at yaw 0 and never moves (the expert's commands are all we look at)."""

    def ee_pos(self):
        return np.zeros(3)

    def ee_quat(self):
        return matrix_to_quat(DOWN)

    def is_grasped(self, name):
        return True


def _phase(name, tilt=None):
    return Phase(name, lambda sim: np.zeros(3), OPEN, tolerance=1.0, tilt=tilt)


def test_a_phase_s_tilt_turns_the_hand_and_later_phases_keep_it():
    tilt = np.array([0.04, -0.02, 0.0])  # rad, world frame; under the alignment tolerance, so the phase ends
    expert = ScriptedExpert(_StillHand(), [_phase("tilted", tilt=lambda sim: tilt), _phase("after")])
    first, second = expert.infer({}), expert.infer({})
    assert (first["phase"], second["phase"]) == ("tilted", "after")
    for step in (first, second):
        assert np.allclose(step["actions"][0, 3:6], tilt / 0.5, atol=1e-6)  # ROT_SCALE: 0.5 rad at full scale
    untilted = ScriptedExpert(_StillHand(), [_phase("plain")]).infer({})
    assert np.allclose(untilted["actions"][0, 3:6], 0.0, atol=1e-9)
