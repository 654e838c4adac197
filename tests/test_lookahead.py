"""Lookahead chunk labels: the expert's own next actions from each state, rolled out in a shadow simulator."""

import numpy as np
import pytest

from demos.lookahead import chain
from r2a_core.errors import R2AInputError
from tests.conftest import make_episode
from training.vla.data import episode_chunk_targets


def test_chunk_targets_come_from_the_label_chunks_and_mask_past_their_horizon():
    ep = make_episode(length=6, seed=0)
    plain, plain_mask = episode_chunk_targets(ep, 4)
    np.testing.assert_array_equal(plain[0], ep.actions[:4])
    assert plain_mask[-1].tolist() == [1, 0, 0, 0]
    ep.label_chunks = np.random.default_rng(0).normal(size=(6, 3, ep.actions.shape[1])).astype(np.float32)
    targets, mask = episode_chunk_targets(ep, 4)
    np.testing.assert_array_equal(targets[:, :3], ep.label_chunks)
    np.testing.assert_array_equal(targets[:, 3], ep.label_chunks[:, 2])  # padded, and masked out
    assert mask.tolist() == [[1, 1, 1, 0]] * 6
    longer, longer_mask = episode_chunk_targets(ep, 2)
    np.testing.assert_array_equal(longer, ep.label_chunks[:, :2])
    assert longer_mask.min() == 1


def test_label_chunks_of_the_wrong_shape_name_the_field():
    ep = make_episode(length=5, seed=0)
    ep.label_chunks = np.zeros((4, 8, ep.actions.shape[1]), np.float32)
    with pytest.raises(R2AInputError, match="label_chunks"):
        ep.validate()


def test_chained_hooks_run_in_order_and_none_is_skipped():
    seen = []
    record = lambda action, step, obs: seen.append(step) or action  # noqa: E731
    double = lambda action, step, obs: action * 2  # noqa: E731
    hook = chain(record, None, double)
    assert hook(np.ones(2), 3, {}).tolist() == [2, 2] and seen == [3]
    assert chain(None, None) is None


def _collect(tmp_path, **kwargs):
    pytest.importorskip("robosuite")
    from demos.collect import CollectConfig, collect
    from demos.hdf5_io import read_hdf5

    out = tmp_path / "lookahead.hdf5"
    result = collect(CollectConfig(task="Lift", episodes=1, out=out, cameras=(), **kwargs), progress=False)
    (episode,) = read_hdf5(out)
    return result, episode


def test_when_the_expert_drives_the_lookahead_is_its_recorded_future(tmp_path):
    """The shadow simulator (MuJoCo state + controller state + the expert's phase machine) replays the future."""
    _, ep = _collect(tmp_path, seed=3, lookahead=6)
    assert ep.success and ep.label_chunks.shape == (len(ep), 6, 7)
    np.testing.assert_array_equal(ep.label_chunks[:, 0], ep.actions)
    for k in range(1, 6):  # from the first step on: right after a reset the controllers' stale cache travels too
        np.testing.assert_allclose(ep.label_chunks[:len(ep) - k, k], ep.actions[k:], atol=1e-5)


def test_an_idle_learner_gets_the_experts_own_plan_as_its_chunk(tmp_path, monkeypatch):
    """The recorded future of an idle learner repeats "go"; the lookahead shows the expert actually going."""
    from training.dagger import LearnerExecutor

    (tmp_path / "r2a_test_idle2.py").write_text("import numpy as np\n\ndef idle(obs):\n    return np.zeros(7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result, ep = _collect(tmp_path, seed=5, lookahead=16,
                          executor=LearnerExecutor("callable:r2a_test_idle2:idle", 0.0))
    assert result.successes == 0 and np.ptp(ep.ee_pos, axis=0).max() < 0.01  # the robot never moved
    np.testing.assert_array_equal(ep.label_chunks[:, 0], ep.actions)
    plan = ep.label_chunks[0, :, :3]
    assert np.abs(ep.actions[:, :3] - ep.actions[0, :3]).max() < 1e-6  # the recorded future never changes
    assert np.linalg.norm(plan[-1]) < 0.8 * np.linalg.norm(plan[0])  # the expert's own plan closes in
    with pytest.raises(R2AInputError, match="lookahead"):
        _collect(tmp_path, lookahead=-1)
