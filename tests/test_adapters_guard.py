"""The guard: wrong reply forms raise clear errors; non-finite actions become a logged, bounded hold-still."""

import logging

import numpy as np
import pytest

from r2a.adapters.guard import WARN_EVERY, GuardedPolicy
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA


class Scripted:
    """Replies with the given results in turn."""

    def __init__(self, *replies):
        self.replies, self.resets = list(replies), 0

    def infer(self, obs):
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def reset(self):
        self.resets += 1


def _chunk(value: float = 0.5, gripper: float = 1.0, horizon: int = 4) -> np.ndarray:
    chunk = np.full((horizon, 7), value, np.float32)
    chunk[:, 6] = gripper
    return chunk


def test_finite_chunks_are_clipped_and_passed_on():
    guard = GuardedPolicy(Scripted({"actions": _chunk(3.0), "extra": 1}), OSC_POSE_DELTA)
    out = guard.infer({})
    assert out["extra"] == 1 and out["fallback"] is False and out["actions"].dtype == np.float32
    assert out["actions"].max() == 1.0 and guard.fallbacks == 0


def test_nan_gives_a_finite_bounded_hold_still_keeping_the_gripper(caplog):
    bad = _chunk()
    bad[1, 2] = np.nan
    bad[2, 0] = np.inf
    guard = GuardedPolicy(Scripted({"actions": _chunk(gripper=0.8)}, {"actions": bad}), OSC_POSE_DELTA, name="m")
    guard.infer({})
    with caplog.at_level(logging.WARNING, logger="r2a.adapters.guard"):
        out = guard.infer({})
    actions = out["actions"]
    assert out["fallback"] is True and guard.fallbacks == 1
    assert actions.shape == (4, 7) and np.isfinite(actions).all() and np.abs(actions).max() <= 1.0
    assert (actions[:, :6] == 0).all() and np.allclose(actions[:, 6], 0.8)  # last finite gripper command
    assert "policy 'm' returned 2 non-finite of 28 action values" in caplog.text


def test_first_chunk_nan_holds_with_the_gripper_open_and_reset_forgets():
    guard = GuardedPolicy(Scripted({"actions": np.full((2, 7), np.nan)}), OSC_POSE_DELTA)
    np.testing.assert_array_equal(guard.infer({})["actions"][:, 6], [-1.0, -1.0])
    guard.reset()
    assert guard.inner.resets == 1


def test_warnings_are_rate_limited_and_fallbacks_bounded(caplog):
    guard = GuardedPolicy(Scripted({"actions": np.full((1, 7), np.nan)}), OSC_POSE_DELTA,
                          max_consecutive_fallbacks=3)
    with caplog.at_level(logging.WARNING, logger="r2a.adapters.guard"):
        for _ in range(3):
            guard.infer({})
        with pytest.raises(RuntimeError, match="non-finite actions 4 times in a row"):
            guard.infer({})
    assert len(caplog.records) == 1
    guard = GuardedPolicy(Scripted({"actions": np.full((1, 7), np.nan)}), OSC_POSE_DELTA,
                          max_consecutive_fallbacks=10 * WARN_EVERY)
    with caplog.at_level(logging.WARNING, logger="r2a.adapters.guard"):
        caplog.clear()
        for _ in range(2 * WARN_EVERY):
            guard.infer({})
    assert [r.getMessage().split("#")[-1] for r in caplog.records] == ["1)", f"{WARN_EVERY})", f"{2 * WARN_EVERY})"]


def test_a_finite_chunk_resets_the_consecutive_count():
    nan = {"actions": np.full((1, 7), np.nan)}
    ok = {"actions": np.zeros((1, 7))}
    guard = GuardedPolicy(Scripted(nan, nan, ok, nan, nan, ok), OSC_POSE_DELTA, max_consecutive_fallbacks=2)
    for _ in range(6):
        guard.infer({})
    assert guard.fallbacks == 4


@pytest.mark.parametrize("actions, shape", [(np.zeros((4, 6)), r"\(4, 6\)"), (np.zeros(7), r"\(7,\)"),
                                            (np.zeros((0, 7)), r"\(0, 7\)"), (np.zeros((2, 3, 7)), r"\(2, 3, 7\)")])
def test_wrong_shape_is_a_clear_error(actions, shape):
    guard = GuardedPolicy(Scripted({"actions": actions}), OSC_POSE_DELTA, name="net")
    with pytest.raises(R2AInputError, match=rf"policy 'net' returned actions of shape {shape}, expected \(H, 7\)"):
        guard.infer({})


@pytest.mark.parametrize("reply, message", [({"action": np.zeros((1, 7))}, r"a dict with keys \['action'\]"),
                                            (np.zeros((1, 7)), "returned ndarray"),
                                            ({"actions": "left"}, "not a numeric array")])
def test_missing_actions_or_wrong_type_is_a_clear_error(reply, message):
    with pytest.raises(R2AInputError, match=message):
        GuardedPolicy(Scripted(reply), OSC_POSE_DELTA).infer({})
