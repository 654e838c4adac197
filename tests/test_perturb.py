"""DART-style perturbed collection: the disturbance model on its own, then with the real simulator (the expert's
action is recorded as the label while the disturbed one is executed, and the expert recovers from a drop)."""

from __future__ import annotations

import json
from dataclasses import asdict

import h5py
import numpy as np
import pytest

from demos.perturb import ActionPerturbation, PerturbConfig
from r2a_core.errors import R2AInputError

CLOSED = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], dtype=np.float32)


def test_no_disturbance_returns_the_action_unchanged():
    perturb = ActionPerturbation(PerturbConfig(), seed=0)
    action = np.array([0.2, -0.3, 0.1, 0.0, 0.05, 0.0, 1.0], dtype=np.float32)
    assert np.array_equal(perturb(action, 0), action) and not PerturbConfig().active


def test_offset_is_correlated_with_the_configured_spread_and_only_on_position():
    perturb = ActionPerturbation(PerturbConfig(noise=0.2, correlation=0.9), seed=3)
    offsets = np.array([perturb(np.zeros(7, np.float32), t) for t in range(20000)])
    assert np.all(offsets[:, 3:] == 0.0)
    assert offsets[:, :3].std() == pytest.approx(0.2, rel=0.1)
    lag1 = np.corrcoef(offsets[:-1, 0], offsets[1:, 0])[0, 1]
    assert lag1 == pytest.approx(0.9, abs=0.03)


def test_same_seed_same_disturbance_and_actions_stay_in_bounds():
    config = PerturbConfig(noise=2.0, drop_prob=1.0)
    a, b = ActionPerturbation(config, 7), ActionPerturbation(config, 7)
    out_a = np.array([a(np.ones(7, np.float32), t) for t in range(100)])
    out_b = np.array([b(np.ones(7, np.float32), t) for t in range(100)])
    assert np.array_equal(out_a, out_b) and np.abs(out_a).max() <= 1.0


def test_a_forced_drop_opens_the_gripper_once_for_drop_steps():
    perturb = ActionPerturbation(PerturbConfig(drop_prob=1.0, drop_hazard=1.0, min_closed=5, drop_steps=4), 0)
    gripper = [perturb(CLOSED, t)[6] for t in range(30)]
    assert gripper[:4] == [1.0] * 4 and gripper[4:8] == [-1.0] * 4 and set(gripper[8:]) == {1.0}
    assert perturb.summary()["forced_drops_at"] == [4]


def test_no_drop_when_not_armed_or_the_gripper_is_open():
    never = ActionPerturbation(PerturbConfig(drop_prob=0.0, drop_hazard=1.0), 0)
    open_hand = ActionPerturbation(PerturbConfig(drop_prob=1.0, drop_hazard=1.0, min_closed=0), 0)
    assert all(never(CLOSED, t)[6] == 1.0 for t in range(50))
    assert all(open_hand(-CLOSED, t)[6] == -1.0 for t in range(50))
    assert never.summary()["forced_drops_at"] == [] == open_hand.summary()["forced_drops_at"]


@pytest.mark.parametrize("bad", [{"noise": -0.1}, {"correlation": 1.0}, {"drop_prob": 1.5}, {"drop_steps": 0},
                                 {"drop_hazard": 0.0}])
def test_bad_configs_are_refused(bad):
    with pytest.raises(R2AInputError, match="perturbation"):
        PerturbConfig(**bad)


def test_perturbed_collection_records_expert_labels_and_recovers_from_a_drop(tmp_path):
    pytest.importorskip("robosuite")
    from demos.collect import CollectConfig, collect
    from demos.info import summarize

    config = PerturbConfig(noise=0.3, drop_prob=1.0, drop_hazard=1.0, min_closed=12)
    out = tmp_path / "lift.hdf5"
    result = collect(CollectConfig(task="Lift", episodes=1, out=out, seed=11, cameras=(), perturb=config),
                     progress=False)
    assert result.successes == 1  # the expert picked the dropped cube up again
    with h5py.File(out) as f:
        demo = f["data/demo_0"]
        meta = json.loads(demo.attrs["meta"])
        actions = demo["actions"][:]
    (drop,) = meta["perturbation"]["forced_drops_at"]
    assert np.all(actions[drop:drop + config.drop_steps, 6] == 1.0)  # labels: the expert still wanted it closed
    assert np.abs(actions).max() <= 1.0 and len(actions) > 40
    perturbed = summarize(out)["perturbed"]
    assert perturbed["episodes"] == 1 and perturbed["forced_drops"] == 1
    assert perturbed["settings"] == [{**asdict(config)}]
