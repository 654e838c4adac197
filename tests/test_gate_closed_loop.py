"""Closed-loop gate rows: the recorder sees the gate's run-time inputs, `r2a gate data` pairs them with the expert's
label chunks, and gate training reads the holding rule's scale and the oracle-S target."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from eval.oracles import oracle_gate
from gating.config import GateTrainConfig
from gating.data import FORMAT, build_gate_data, load_gate_data, save_gate_data
from gating.synthetic import synthetic_gate_data
from graph_builder.build import build_graph_from_episodes
from graph_builder.storage import save_graph
from graph_builder.synthetic import synthetic_episodes
from r2a.adapters.callable_policy import CallablePolicy
from r2a.wrapper.build import build_r2a, load_r2a_config
from r2a.wrapper.gate import closest_gate
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA, Episode
from tests.test_r2a_wrapper import ScriptedBase, _obs
from training.dagger import LearnerControl, attach_gate_recorder
from training.retriever.queries import ChunkCache

SEED = 67000  # a training seed


def test_closest_gate_batches_like_the_per_query_oracle():
    rng = np.random.default_rng(1)
    base, reference, target = (rng.uniform(-1, 1, (6, 8, 7)) for _ in range(3))
    scale = rng.choice([0.0, 1.0], (6, 8))
    scale[0] = 0.0  # the holding rule zeroes every step: S moves nothing
    batch = closest_gate(base, reference, target, scale, 0.5)
    assert batch.shape == (6, 7) and not batch[0].any()
    for i in range(6):
        np.testing.assert_allclose(batch[i, :6], oracle_gate(base[i], reference[i], target[i], scale[i],
                                                             OSC_POSE_DELTA, 0.5)[:6])


@pytest.fixture(scope="module")
def gated_wrapper(tmp_path_factory):
    """An R2A wrapper around a scripted base with a (briefly trained) learned gate and the holding rule."""
    from gating.train import train_gate

    tmp = tmp_path_factory.mktemp("cl")
    graph = save_graph(build_graph_from_episodes(synthetic_episodes(3000, seed=0, num_tasks=2, mean_length=80)),
                       tmp / "graph")
    train_gate(GateTrainConfig.from_dict({"epochs": 2, "holdout_every": 3, "signals": ["disagreement"]}),
               [synthetic_gate_data(tmp / "d.npz")], tmp / "gate", progress=False)
    config = load_r2a_config(None, [f"graph={graph}", "retriever=null", "retrieval.mode=knn", "recovery.enabled=false",
                                    "gate.kind=learned", f"gate.checkpoint={tmp / 'gate'}", "gate.holding_scale=0"])
    base = ScriptedBase()
    chunk = base.reply["actions"].copy()
    chunk[4:, 6] = -1.0  # closed for the first four steps of each chunk: the holding rule zeroes them
    base.reply = {"actions": chunk}
    return build_r2a(config, base)


def test_recorded_rows_are_what_the_gate_read_and_become_closed_loop_gate_rows(gated_wrapper, tmp_path):
    policy = gated_wrapper
    recorder = attach_gate_recorder(policy)
    with pytest.raises(R2AInputError, match="oracle"):  # a wrapper whose S is already replaced
        attach_gate_recorder(policy)
    recorder.reset()
    control = LearnerControl(policy, 7, n_action_steps=8, recorder=recorder)
    steps = 20
    executed = [control(np.zeros(7, np.float32), t, _obs(t)) for t in range(steps)]
    rows = control.summary()["gate_rows"]
    queried = rows["step"]
    assert queried == [0, 8, 16] and all(np.isfinite(a).all() for a in executed)
    assert rows["scale"][0] == [0.0] * 4 + [1.0] * 4
    np.testing.assert_allclose(rows["base"][0], policy.base.reply["actions"][:8], atol=1e-5)

    rng = np.random.default_rng(0)
    labels = rng.uniform(-1, 1, (steps, 8, 7)).astype(np.float32)
    episode = Episode(task="Lift", instruction="lift the cube", actions=np.stack(executed),
                      ee_pos=np.tile([0.0, 0.0, 1.0], (steps, 1)), ee_quat=np.tile([0.0, 1.0, 0.0, 0.0], (steps, 1)),
                      gripper=np.ones(steps), label_chunks=labels,
                      images={"agentview": np.zeros((steps, 8, 8, 3), np.uint8)},
                      meta={"seed": SEED, "dagger": control.summary()})
    data = build_gate_data([("dagger", "x.hdf5", episode)], policy, base_policy=None, progress=False)
    arrays = data["arrays"]
    assert data["meta"]["kind"] == ["closed_loop"] * 3 and data["meta"]["seeds"] == [SEED]
    np.testing.assert_allclose(arrays["expert"][1], labels[8], atol=1e-6)
    np.testing.assert_allclose(arrays["scale"][0], [0, 0, 0, 0, 1, 1, 1, 1])
    path = save_gate_data(data, tmp_path / "rows.npz")
    loaded = load_gate_data([path])
    assert loaded["arrays"]["scale"].shape == (3, 8) and loaded["meta"]["format_version"] == 2

    asked = ChunkCache(tmp_path / "chunks", "scripted")
    both = build_gate_data([("dagger", "x.hdf5", episode)], policy, base_policy=policy.base, progress=False,
                           frames_too=True, chunk_cache=asked)  # and every 2nd frame: the base asked again,
    kinds = np.array(both["meta"]["kind"])                      # the holding rule applied
    assert (kinds == "closed_loop").sum() == 3 and (kinds == "dagger").sum() == 10
    assert (both["arrays"]["scale"][kinds == "dagger"] == [0, 0, 0, 0, 1, 1, 1, 1]).all()
    reply, policy.base.reply = policy.base.reply, {"actions": np.zeros((16, 7), np.float32)}
    again = build_gate_data([("dagger", "x.hdf5", episode)], policy, base_policy=policy.base, progress=False,
                            frames_too=True, chunk_cache=asked)  # the next DAgger round's rebuild of the same frames
    policy.base.reply = reply  # (asked again, the base would have answered zeros: every row would have moved)
    for name in ("base", "reference", "disagreement", "scale"):
        np.testing.assert_array_equal(again["arrays"][name], both["arrays"][name])

    no_labels = Episode(**{**episode.__dict__, "label_chunks": None})
    with pytest.raises(R2AInputError, match="--lookahead"):
        build_gate_data([("dagger", "x.hdf5", no_labels)], policy, base_policy=None, progress=False)


def test_a_policy_without_a_learned_gate_cannot_record_rows():
    with pytest.raises(R2AInputError, match="learned gate"):
        attach_gate_recorder(CallablePolicy(lambda obs: np.zeros((8, 7), np.float32), 7))


def test_version_1_gate_data_is_read_with_scale_one(tmp_path):
    path = synthetic_gate_data(tmp_path / "v2.npz")
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files if k not in ("meta", "scale")}
        meta = json.loads(bytes(f["meta"]).decode())
    np.savez(tmp_path / "v1.npz", meta=np.frombuffer(json.dumps({**meta, "format_version": 1}).encode(), np.uint8),
             **arrays)
    loaded = load_gate_data([tmp_path / "v1.npz"])
    assert (loaded["arrays"]["scale"] == 1).all() and loaded["arrays"]["scale"].shape == arrays["base"].shape[:2]
    np.savez(tmp_path / "v9.npz", meta=np.frombuffer(json.dumps({**meta, "format_version": 9}).encode(), np.uint8),
             **arrays)
    with pytest.raises(R2AInputError, match=f"{FORMAT} v2"):
        load_gate_data([tmp_path / "v9.npz"])


def test_the_oracle_s_target_learns_when_to_blend_and_when_to_stay_out(tmp_path):
    from gating.train import oracle_targets, train_gate
    from r2a.wrapper.gate_checkpoint import load_gate

    data = synthetic_gate_data(tmp_path / "data.npz")  # the reference is right on even episodes, the base on odd
    loaded = load_gate_data([data])
    targets = oracle_targets(loaded["arrays"], list(range(6)), 0.5)
    shifted = loaded["arrays"]["episode"] % 2 == 0
    assert targets[shifted].mean() > 0.4 and targets[~shifted].mean() < 0.1
    with pytest.raises(R2AInputError, match="targets: blend, oracle_s"):
        GateTrainConfig.from_dict({"target": "other"})
    config = GateTrainConfig.from_dict({"epochs": 30, "batch_size": 32, "holdout_every": 3, "lr": 0.01,
                                        "target": "oracle_s"})
    summary = train_gate(config, [data], tmp_path / "gate", progress=False)
    assert summary["final"]["val_gate_mm"] < summary["final"]["val_base_mm"]
    import torch

    from gating.train import feature_matrix

    ckpt = load_gate(tmp_path / "gate")
    with torch.no_grad():
        s = ckpt.net(torch.as_tensor(feature_matrix(loaded["arrays"], ckpt.layout), dtype=torch.float32)).numpy()
    assert s[shifted].mean() > 0.3 and s[~shifted].mean() < 0.15


def test_rows_the_holding_rule_zeroes_are_left_out_of_training(tmp_path):
    from gating.train import best_constant_gate

    loaded = load_gate_data([synthetic_gate_data(tmp_path / "data.npz")])
    arrays = dict(loaded["arrays"])
    rows = np.arange(len(arrays["base"]))
    unheld = best_constant_gate(arrays, rows, list(range(6)), 0.5)
    arrays["scale"] = np.zeros_like(arrays["scale"])
    assert best_constant_gate(arrays, rows, list(range(6)), 0.5) == [0.0, 0.0] != unheld  # S moves nothing


@pytest.mark.slow
def test_the_dagger_command_records_closed_loop_rows_of_the_published_variant(tmp_path):
    pytest.importorskip("robosuite")
    out = tmp_path / "rows.hdf5"
    done = subprocess.run([sys.executable, "-m", "r2a_cli", "policy", "dagger", "--policy", "r2a-harmonize-hold",
                           "--task", "Lift", "--episodes", "1", "--gate-rows", "--seed", str(SEED), "--out", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    from demos.hdf5_io import read_hdf5

    (episode,) = read_hdf5(out)
    rows = episode.meta["dagger"]["gate_rows"]
    assert rows["step"] and all(0 <= t < len(episode) for t in rows["step"])
    assert np.asarray(rows["base"]).shape[1:] == (8, 7) and episode.label_chunks.shape == (len(episode), 8, 7)


def test_the_shipped_closed_loop_gate_loads_under_its_variants():
    from eval.diagnostics import register_diagnostics
    from r2a.policies.registry import r2a_config_for
    from r2a.wrapper.config import resolve_path
    from r2a.wrapper.gate_checkpoint import load_gate

    register_diagnostics()
    for name in ("r2a-harmonize-hold-clgate", "r2a-harmonize-hold-clgate-canon", "r2a-builtin"):
        config = r2a_config_for(name)
        assert config.gate.holding_scale == 0 and config.harmonize.enabled
        ckpt = load_gate(resolve_path(config.gate.checkpoint), OSC_POSE_DELTA)
        assert ckpt.train_config["target"] == "oracle_s" and max(ckpt.seeds) < 100_000
        assert ckpt.provenance["best_constant"] == [0.25, 0.3]
    assert r2a_config_for("r2a-harmonize-hold-clgate-canon").canonicalize.enabled
