"""The LeRobot adapter: the pure observation mapping, the loading path (with a stand-in lerobot module), the
missing-extra message, and — only where lerobot is installed — a real checkpoint round trip."""

import json
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from r2a.adapters.guard import GuardedPolicy
from r2a.adapters.lerobot_policy import LeRobotPolicy, default_lerobot_keymap, to_lerobot_batch
from r2a.policies import make_policy
from r2a_core.errors import R2AInputError
from r2a_core.provenance import artifact
from r2a_core.types import OSC_POSE_DELTA

LIBERO_CONFIG = {
    "type": "act",
    "input_features": {"observation.images.image": {"type": "VISUAL", "shape": [3, 24, 24]},
                       "observation.images.image2": {"type": "VISUAL", "shape": [3, 24, 24]},
                       "observation.state": {"type": "STATE", "shape": [8]}},
    "output_features": {"action": {"type": "ACTION", "shape": [7]}},
}


def _obs() -> dict:
    return {"images/agentview": np.full((32, 32, 3), 255, np.uint8), "images/wrist": np.zeros((32, 32, 3), np.uint8),
            "state/ee_pos": np.array([0.1, 0.2, 0.3]), "state/ee_quat": np.array([1.0, 0, 0, 0]),
            "state/gripper": np.array([1.0]), "state/joint_pos": np.zeros(7), "prompt": "lift the cube"}


def test_batch_mapping_is_pure_numpy():
    keymap = default_lerobot_keymap(LIBERO_CONFIG)
    batch = to_lerobot_batch(keymap.map_obs(_obs()))
    assert sorted(batch) == ["observation.images.image", "observation.images.image2", "observation.state", "task"]
    image = batch["observation.images.image"]
    assert image.shape == (1, 3, 24, 24) and image.dtype == np.float32 and image.max() == 1.0
    assert batch["observation.images.image2"].max() == 0.0  # image2 is the wrist camera
    np.testing.assert_allclose(batch["observation.state"], [[0.1, 0.2, 0.3, 0, 0, 0, 0.04, -0.04]], atol=1e-6)
    assert batch["task"] == ["lift the cube"] and keymap.actions.model_dim == 7


def test_batch_rejects_a_non_image():
    with pytest.raises(R2AInputError, match=r"'observation.images.x' has shape \(4,\)"):
        to_lerobot_batch({"observation.images.x": np.zeros(4)})


@pytest.mark.parametrize("feature, message", [
    ({"observation.images.side": {"type": "VISUAL", "shape": [3, 8, 8]}}, "camera input 'observation.images.side'"),
    ({"observation.state": {"type": "STATE", "shape": [5]}}, r"input 'observation.state' \(shape \[5\]\)"),
    ({"observation.environment_state": {"type": "ENV", "shape": [10]}}, "write an adapter YAML"),
])
def test_default_keymap_asks_for_a_yaml_when_it_cannot_guess(feature, message):
    with pytest.raises(R2AInputError, match=message):
        default_lerobot_keymap({"input_features": feature}, "ckpt/config.json")


# ------------------------------------------------------------------------- loading, with a stand-in lerobot


class FakeLeRobotPolicy:
    instances: list = []

    def __init__(self, path, kwargs):
        self.path, self.kwargs, self.batches, self.resets, self.device = path, kwargs, [], 0, None
        self.config = SimpleNamespace()
        FakeLeRobotPolicy.instances.append(self)

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        return cls(path, kwargs)

    def to(self, device):
        self.device = device
        return self

    def eval(self):
        return self

    def predict_action_chunk(self, batch):
        self.batches.append(batch)
        return torch.full((1, 5, 7), 0.25)

    def select_action(self, batch):
        self.batches.append(batch)
        return torch.full((1, 7), 0.5)

    def reset(self):
        self.resets += 1


@pytest.fixture
def fake_lerobot(monkeypatch):
    factory = types.ModuleType("lerobot.policies.factory")
    factory.get_policy_class = lambda name: FakeLeRobotPolicy
    policies = types.ModuleType("lerobot.policies")
    policies.factory = factory
    root = types.ModuleType("lerobot")
    root.policies = policies
    for name, module in {"lerobot": root, "lerobot.policies": policies, "lerobot.policies.factory": factory}.items():
        monkeypatch.setitem(sys.modules, name, module)
    FakeLeRobotPolicy.instances.clear()


def _checkpoint(tmp_path, policy_type: str = "act"):
    (tmp_path / "config.json").write_text(json.dumps({**LIBERO_CONFIG, "type": policy_type}))
    return tmp_path


def test_loads_locally_and_returns_chunks(fake_lerobot, tmp_path):
    policy = LeRobotPolicy(_checkpoint(tmp_path), action_space=OSC_POSE_DELTA)
    fake = FakeLeRobotPolicy.instances[-1]
    assert fake.path == str(tmp_path) and fake.kwargs == {"local_files_only": True} and fake.device == "cpu"
    assert policy.mode == "chunk"
    out = policy.infer(_obs())
    assert out["actions"].shape == (5, 7) and np.allclose(out["actions"], 0.25)
    batch = fake.batches[-1]
    assert isinstance(batch["observation.state"], torch.Tensor) and batch["observation.state"].shape == (1, 8)
    assert batch["observation.images.image"].shape == (1, 3, 24, 24) and batch["task"] == ["lift the cube"]
    policy.reset()
    assert fake.resets == 1


def test_a_chunk_policy_executes_its_checkpoints_n_action_steps(fake_lerobot, tmp_path):
    """ACT trained to execute 8 of 16: the benchmark, a served client and R2A re-plan as lerobot does."""

    (tmp_path / "config.json").write_text(json.dumps({**LIBERO_CONFIG, "chunk_size": 16, "n_action_steps": 8}))
    policy = LeRobotPolicy(tmp_path)
    assert policy.n_action_steps == 8 and policy.metadata["n_action_steps"] == 8
    assert policy.metadata["type"] == "act" and policy.metadata["mode"] == "chunk"
    assert policy.metadata["artifacts"] == {"base_checkpoint": artifact(tmp_path)}  # what a server announces
    (tmp_path / "config.json").write_text(json.dumps({**LIBERO_CONFIG, "chunk_size": 16, "n_action_steps": 20}))
    with pytest.raises(R2AInputError, match="n_action_steps=20"):
        LeRobotPolicy(tmp_path)
    assert LeRobotPolicy(_checkpoint(tmp_path, "diffusion")).n_action_steps is None  # one action per reply


def test_queue_based_policies_use_select_action(fake_lerobot, tmp_path):
    policy = LeRobotPolicy(_checkpoint(tmp_path, "diffusion"))
    assert policy.mode == "select"
    assert policy.infer(_obs())["actions"].shape == (1, 7)


def test_a_training_run_directory_stands_for_its_last_checkpoint(fake_lerobot, tmp_path):
    last = tmp_path / "checkpoints" / "last" / "pretrained_model"  # as lerobot-train writes it
    last.mkdir(parents=True)
    _checkpoint(last)
    for given in (tmp_path, tmp_path / "checkpoints" / "last", last):
        LeRobotPolicy(given)
        assert FakeLeRobotPolicy.instances[-1].path == str(last)


@pytest.mark.parametrize("setup, message", [
    (lambda d: d / "missing", "not a directory"),
    (lambda d: d, "no config.json"),
    (lambda d: (d / "config.json").write_text("{") and d, "not valid JSON"),
    (lambda d: (d / "config.json").write_text("{}") and d, "no policy 'type'"),
])
def test_bad_checkpoint_dirs_are_input_errors(fake_lerobot, tmp_path, setup, message):
    with pytest.raises(R2AInputError, match=message):
        LeRobotPolicy(setup(tmp_path))


def test_registry_lerobot_specs(fake_lerobot, tmp_path):
    sim = SimpleNamespace(action_space=OSC_POSE_DELTA)
    policy = make_policy(f"lerobot:{_checkpoint(tmp_path)}", sim, seed=0)
    assert isinstance(policy, GuardedPolicy) and policy.infer(_obs())["actions"].shape == (5, 7)
    yaml_path = tmp_path / "adapter.yaml"
    yaml_path.write_text(f"format_version: 1\ncheckpoint: {tmp_path}\nstate: {{observation.state: [state/ee_pos]}}\n"
                         "copy: {task: prompt}\n")
    policy = make_policy(f"lerobot:{yaml_path}", sim, seed=0)
    assert policy.infer(_obs())["actions"].shape == (5, 7)
    assert FakeLeRobotPolicy.instances[-1].batches[-1]["observation.state"].shape == (1, 3)
    # a YAML that only says where and on which device: the checkpoint's default observation map, its actions: kept
    (tmp_path / "where.yaml").write_text(f"format_version: 1\ncheckpoint: {tmp_path}\ndevice: meta\n"
                                         "actions: {flip_gripper: true}\nstate_dtype: float64\n")
    policy = make_policy(f"lerobot:{tmp_path / 'where.yaml'}", sim, seed=0)
    assert policy.infer(_obs())["actions"].shape == (5, 7) and FakeLeRobotPolicy.instances[-1].device == "meta"
    batch = FakeLeRobotPolicy.instances[-1].batches[-1]
    assert sorted(batch) == ["observation.images.image", "observation.images.image2", "observation.state", "task"]
    keymap = policy.inner.keymap
    assert keymap.actions.flip_gripper and keymap.actions.model_dim == 7 and "maps no observation" in keymap.source
    assert keymap.state_dtype == "float64"
    (tmp_path / "nock.yaml").write_text("format_version: 1\n")
    with pytest.raises(R2AInputError, match="nock.yaml: no 'checkpoint:'"):
        make_policy(f"lerobot:{tmp_path / 'nock.yaml'}", sim, seed=0)
    with pytest.raises(R2AInputError, match="policy 'lerobot' needs an argument"):
        make_policy("lerobot", sim, seed=0)


def test_missing_lerobot_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "lerobot", None)  # as if it were not installed
    with pytest.raises(R2AInputError, match=r"pip install 'r2a\[lerobot\]'.*docs/architecture.md, 'Platform notes'"):
        LeRobotPolicy(_checkpoint(tmp_path))


# ------------------------------------------------------------------------------- the real library, if present


def test_real_lerobot_checkpoint_round_trip(tmp_path):
    pytest.importorskip("lerobot")
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy

    config = ACTConfig(
        input_features={"observation.images.image": PolicyFeature(FeatureType.VISUAL, (3, 32, 32)),
                        "observation.state": PolicyFeature(FeatureType.STATE, (8,))},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (7,))},
        chunk_size=4, n_action_steps=4, dim_model=32, dim_feedforward=64, n_heads=2, n_encoder_layers=1,
        n_decoder_layers=1, use_vae=False, pretrained_backbone_weights=None, device="cpu")
    ACTPolicy(config).save_pretrained(tmp_path)
    policy = LeRobotPolicy(tmp_path, action_space=OSC_POSE_DELTA)
    out = policy.infer(_obs())
    assert out["actions"].shape == (4, 7) and np.isfinite(out["actions"]).all()
    policy.reset()
