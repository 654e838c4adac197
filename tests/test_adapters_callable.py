"""Plain Python functions as policies, loaded by 'package.module:function', guarded by the registry."""

from types import SimpleNamespace

import numpy as np
import pytest

from r2a.adapters.callable_policy import CallablePolicy, load_callable
from r2a.adapters.guard import GuardedPolicy
from r2a.policies import make_policy
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA

MODULE = '''
import numpy as np

def one_action(obs):
    return [0.1, 0, 0, 0, 0, 0, 2.0]

def chunk(obs):
    return {"actions": np.zeros((3, 7)), "note": "hi"}

def nan_policy(obs):
    return np.full(7, np.nan)

class Holder:
    @staticmethod
    def act(obs):
        return np.zeros(7)

class MyPolicy:
    def __init__(self):
        self.resets = 0
    def infer(self, obs):
        return {"actions": np.ones((2, 7))}
    def reset(self):
        self.resets += 1

NOT_CALLABLE = 3
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "r2a_test_user_policies.py").write_text(MODULE)
    (tmp_path / "r2a_test_broken.py").write_text("import r2a_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "r2a_test_user_policies"


def test_single_action_chunk_and_dict_replies():
    single = CallablePolicy(lambda obs: [0.0] * 7, 7).infer({})
    assert single["actions"].shape == (1, 7) and single["actions"].dtype == np.float32
    out = CallablePolicy(lambda obs: {"actions": np.zeros((5, 7)), "value": 1.5}, 7).infer({})
    assert out["actions"].shape == (5, 7) and out["value"] == 1.5


def test_bad_replies_are_clear_errors():
    with pytest.raises(R2AInputError, match=r"shape \(1, 3\), expected \(7,\) or \(H, 7\)"):
        CallablePolicy(lambda obs: [1, 2, 3], 7, name="f").infer({})
    with pytest.raises(R2AInputError, match="without 'actions' .*keys: act"):
        CallablePolicy(lambda obs: {"act": 1}, 7).infer({})
    with pytest.raises(R2AInputError, match="not a numeric array"):
        CallablePolicy(lambda obs: "left", 7).infer({})
    with pytest.raises(R2AInputError, match="needs a callable"):
        CallablePolicy(3, 7)


def test_reset_fn_or_the_objects_own_reset():
    calls = []
    CallablePolicy(lambda obs: np.zeros(7), 7, reset_fn=lambda: calls.append("fn")).reset()

    class Stateful:
        def __call__(self, obs):
            return np.zeros(7)

        def reset(self):
            calls.append("obj")

    CallablePolicy(Stateful(), 7).reset()
    CallablePolicy(lambda obs: np.zeros(7), 7).reset()  # nothing to call
    assert calls == ["fn", "obj"]


def test_load_callable_finds_functions_and_dotted_attributes(user_module):
    assert load_callable(f"{user_module}:one_action")({}) == [0.1, 0, 0, 0, 0, 0, 2.0]
    assert load_callable(f"{user_module}:Holder.act")({}).shape == (7,)


@pytest.mark.parametrize("spec, message", [
    ("no_colon", "expected 'package.module:function'"),
    (":f", "expected 'package.module:function'"),
    ("r2a_no_such_module:f", "module 'r2a_no_such_module' not found"),
    ("r2a_test_broken:f", "importing 'r2a_test_broken' failed: No module named 'r2a_no_such_dependency'"),
    ("r2a_test_user_policies:one_actoin", "has no attribute 'one_actoin' \\(did you mean 'one_action'\\?\\)"),
    ("r2a_test_user_policies:Holder.nope", "'r2a_test_user_policies.Holder' has no attribute 'nope'"),
    ("r2a_test_user_policies:NOT_CALLABLE", "'NOT_CALLABLE' is not callable \\(type int\\)"),
])
def test_load_callable_errors(user_module, spec, message):
    with pytest.raises(R2AInputError, match=message):
        load_callable(spec)


def test_registry_builds_a_guarded_callable_policy(user_module):
    sim = SimpleNamespace(action_space=OSC_POSE_DELTA)
    policy = make_policy(f"callable:{user_module}:one_action", sim, seed=0)
    assert isinstance(policy, GuardedPolicy)
    np.testing.assert_allclose(policy.infer({})["actions"], [[0.1, 0, 0, 0, 0, 0, 1.0]])  # clipped
    assert make_policy(f"callable:{user_module}:chunk", sim, 0).infer({})["note"] == "hi"
    out = make_policy(f"callable:{user_module}:nan_policy", sim, 0).infer({})
    assert out["fallback"] is True and np.isfinite(out["actions"]).all()
    cls_policy = make_policy(f"callable:{user_module}:MyPolicy", sim, 0)
    assert cls_policy.infer({})["actions"].shape == (2, 7)
    cls_policy.reset()
    assert cls_policy.inner.resets == 1
    with pytest.raises(R2AInputError, match="policy 'callable' needs an argument"):
        make_policy("callable", sim, 0)
    served = make_policy(f"callable:{user_module}:one_action", sim=None)  # as `r2a policy serve` builds it
    assert served.action_space == OSC_POSE_DELTA and served.infer({})["actions"].shape == (1, 7)
