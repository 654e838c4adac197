"""The learned gate: bounds for any input, features, training with resume, 2-process DDP, bad input, the image
signal's statistics, and the gate inside the wrapper (every NaN path falls back and says so)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gating.config import GateTrainConfig
from gating.data import load_gate_data
from gating.synthetic import synthetic_gate_data
from r2a.wrapper.gate import GateInputs
from r2a.wrapper.learned_gate import GateInputError, GateLayout, LearnedGate, build_gate_net, gate_features
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA, ActionSpace
from r2a_core.visual_ood import (
    FEATURE_DIM,
    ImageStats,
    fit_camera_stats,
    load_image_stats,
    pooled_image_features,
    save_image_stats,
)

ROOT = Path(__file__).resolve().parents[1]


def _inputs(rng: np.random.Generator, scale: float = 1.0, plan: bool = True, image: bool = True) -> GateInputs:
    obs = {"images/agentview": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)} if image else {}
    return GateInputs(base=scale * rng.normal(size=(8, 7)), reference=scale * rng.normal(size=(8, 7)),
                      base_chunk=rng.normal(size=(16, 7)),
                      previous_plan=scale * rng.normal(size=(8, 7)) if plan else None,
                      retrieval={"entropy": rng.random(), "top_weight": rng.random(), "seed_distance": 5 * rng.random(),
                                 "progress": rng.random()},
                      proprio={"ee_pos": rng.normal(size=3), "gripper": np.array(rng.random())},
                      step=int(rng.integers(0, 1000)), observation=obs)


class _Scorer:
    def __init__(self, value: float = 1.0) -> None:
        self.value = value

    def score(self, camera: str, image: np.ndarray) -> float:
        return self.value


def test_s_stays_inside_its_bounds_for_any_input():
    import torch

    torch.manual_seed(0)
    layout = GateLayout()
    net = build_gate_net(layout, hidden=16, max_gate=0.4)
    with torch.no_grad():  # an untrained net with large weights: the output must still be bounded
        for p in net.parameters():
            p.mul_(50.0)
    gate = LearnedGate(net, layout, OSC_POSE_DELTA, _Scorer())
    rng = np.random.default_rng(0)
    for i in range(200):
        scale = [1e-6, 1.0, 1e3, 1e6][i % 4]
        s = gate(_inputs(rng, scale, plan=bool(i % 2), image=bool(i % 3)))
        assert s.shape == (8, 7) and np.isfinite(s).all()
        assert s.min() >= 0.0 and s.max() <= 0.4 + 1e-7
        assert np.all(s[:, 6] == 0.0)  # the gripper passes through


def test_features_follow_the_layout_and_refuse_nan():
    rng = np.random.default_rng(1)
    full, bare = GateLayout(), GateLayout(signals=())
    inputs = _inputs(rng)
    assert gate_features(inputs, full, _Scorer()).shape == (full.dim,)
    assert gate_features(inputs, bare).shape == (bare.dim,) and bare.dim == full.dim - 9
    bad = GateInputs(**{**inputs.__dict__, "retrieval": {**inputs.retrieval, "entropy": float("nan")}})
    with pytest.raises(GateInputError):
        gate_features(bad, full, _Scorer())
    with pytest.raises(GateInputError):
        gate_features(inputs, full, _Scorer(float("inf")))
    with pytest.raises(R2AInputError, match="unknown gate signal"):
        GateLayout(signals=("gaze",))


def test_image_stats_score_separates_a_shifted_image_and_round_trips(tmp_path):
    rng = np.random.default_rng(2)
    base = rng.integers(60, 120, (1, 1, 3))
    frames = [np.clip(base + rng.integers(-10, 10, (32, 32, 3)), 0, 255).astype(np.uint8) for _ in range(60)]
    stats = fit_camera_stats(frames)
    assert pooled_image_features(frames[0]).shape == (FEATURE_DIM,)
    inside = np.median([stats.score(pooled_image_features(f)) for f in frames[:10]])
    dark = stats.score(pooled_image_features((frames[0] * 0.3).astype(np.uint8)))
    assert dark > 20 * inside
    path = save_image_stats(ImageStats({"agentview": stats}), tmp_path / "stats.json")
    loaded = load_image_stats(path)
    assert loaded.score("agentview", frames[0]) == pytest.approx(stats.score(pooled_image_features(frames[0])))
    with pytest.raises(R2AInputError, match="no camera"):
        loaded.score("wrist", frames[0])
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "format_version": 9}))
    with pytest.raises(R2AInputError, match="format_version 9"):
        load_image_stats(path)


def test_training_learns_where_to_trust_the_reference_and_resumes(tmp_path):
    from gating.train import train_gate
    from r2a.wrapper.gate_checkpoint import load_gate

    data = synthetic_gate_data(tmp_path / "data.npz")
    config = GateTrainConfig.from_dict({"epochs": 30, "batch_size": 32, "save_every": 10, "holdout_every": 3,
                                        "lr": 0.01})
    out = tmp_path / "gate"
    first = train_gate(GateTrainConfig.from_dict({**config.to_dict(), "epochs": 10}), [data], out, progress=False)
    assert first["final"]["epoch"] == 10
    summary = train_gate(config, [data], out, progress=False)  # resumes at epoch 10
    ckpt = load_gate(out, OSC_POSE_DELTA)
    history = ckpt.history
    assert [h["epoch"] for h in history] == list(range(1, 31))
    assert summary["final"]["val_gate_mm"] < summary["final"]["val_base_mm"]
    assert ckpt.seeds[:2] == [20000, 20001] and (out / "training_curve.png").is_file()
    with pytest.raises(R2AInputError, match="trained for"):
        load_gate(out, ActionSpace(kind="joint_delta", names=tuple(f"j{i}" for i in range(8)), low=(-1.0,) * 8,
                                   high=(1.0,) * 8, gripper_dims=(7,)))


def test_balanced_row_weights_give_each_kind_the_same_total():
    from gating.train import row_weights

    kinds = ["demo"] * 30 + ["dagger"] * 10
    np.testing.assert_allclose(row_weights(kinds, False), 1.0)
    w = row_weights(kinds, True)
    assert w.mean() == pytest.approx(1.0) and w[:30].sum() == pytest.approx(w[30:].sum())


def test_two_process_ddp_training_on_gloo(tmp_path):
    data = synthetic_gate_data(tmp_path / "data.npz")
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(port),
           "-m", "r2a_cli", "gate", "train", "--data", str(data), "--out", str(out), "--set", "epochs=3",
           "--set", "holdout_every=3", "--set", "threads=1", "--set", "batch_size=16"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["processes"] == 2 and len(summary["history"]) == 3 and summary["ddp_backend"] == "gloo"
    assert json.loads((out / "manifest.json").read_text())["provenance"]["processes"] == 2


def test_bad_gate_data_is_refused(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, meta=np.frombuffer(json.dumps({"format": "other"}).encode(), np.uint8))
    with pytest.raises(R2AInputError, match="not gate data"):
        load_gate_data([path])
    (tmp_path / "y.npz").write_text("not a zip")
    with pytest.raises(R2AInputError, match="not a gate data file"):
        load_gate_data([tmp_path / "y.npz"])


def test_the_wrapper_uses_a_learned_gate_and_falls_back_on_nan_inputs(tmp_path):
    from gating.train import train_gate
    from graph_builder.build import build_graph_from_episodes
    from graph_builder.storage import save_graph
    from graph_builder.synthetic import synthetic_episodes
    from r2a.wrapper import policy as wrapper
    from r2a.wrapper.build import build_r2a, load_r2a_config

    graph = save_graph(build_graph_from_episodes(synthetic_episodes(3000, seed=0, num_tasks=2, mean_length=80)),
                       tmp_path / "graph")
    gate_dir = tmp_path / "gate"
    train_gate(GateTrainConfig.from_dict({"epochs": 2, "holdout_every": 3, "signals": ["disagreement"]}),
               [synthetic_gate_data(tmp_path / "d.npz")], gate_dir, progress=False)

    class Base:
        action_space = OSC_POSE_DELTA

        def __init__(self) -> None:
            self.reply = {"actions": np.tile(np.array([0.5, -0.5, 0.2, 0.1, 0, 0, 1], np.float32), (16, 1))}

        def reset(self) -> None:
            return None

        def infer(self, obs):
            return dict(self.reply)

    config = load_r2a_config(None, [f"graph={graph}", "retriever=null", "retrieval.mode=knn", "recovery.enabled=false",
                                    "gate.kind=learned", f"gate.checkpoint={gate_dir}"])
    policy = build_r2a(config, Base())
    obs = {"state/ee_pos": np.array([0.0, 0.0, 1.0]), "state/ee_quat": np.array([0.0, 1.0, 0.0, 0.0]),
           "state/gripper": np.float32(1.0), "prompt": "lift the cube", "state/step": 0}
    out = policy.infer(obs)
    assert out["r2a"]["fallback"] is None and "gate" in policy.metadata["artifacts"]
    assert np.isfinite(out["actions"]).all() and np.abs(out["actions"]).max() <= 1.0
    gate_values = np.array(out["r2a"]["gate"])
    assert gate_values.min() >= 0 and gate_values.max() <= 0.5 and gate_values[6] == 0
    policy.parts.gate.layout = GateLayout(signals=("image_ood",))  # a gate that reads images, a scorer gone wrong
    policy.parts.gate.image_scorer = _Scorer(float("nan"))
    policy.reset()
    out = policy.infer({**obs, "images/agentview": np.zeros((8, 8, 3), np.uint8)})
    assert out["r2a"]["fallback"] == wrapper.GATE_INPUT
    np.testing.assert_allclose(out["actions"], Base().reply["actions"][:8], atol=1e-6)


def test_the_benchmark_refuses_a_gate_or_retriever_that_saw_its_seeds(tmp_path):
    from eval.bench_config import BenchConfig
    from eval.preflight import check_split

    ckpt = tmp_path / "gate"
    ckpt.mkdir()
    (ckpt / "manifest.json").write_text(json.dumps({"format": "r2a.gate.checkpoint", "version": 1,
                                                    "provenance": {"data": [], "seeds": [20000, 100003]}}))
    config = BenchConfig(tasks=["Lift"], episodes=5, seed=100_000)
    with pytest.raises(R2AInputError, match=r"gate checkpoint .* trained on 1 of this run's seeds \(e.g. 100003\)"):
        check_split("r2a", {"gate": {"path": str(ckpt), "sha256": "x"}}, config)
    check_split("r2a", {"gate": {"path": str(ckpt), "sha256": "x"}}, BenchConfig(tasks=["Lift"], episodes=3,
                                                                                  seed=100_000))
    shipped = ROOT / "r2a" / "assets" / "r2a_retriever"
    check_split("r2a", {"retriever": {"path": str(shipped), "sha256": "x"}}, config)
    with pytest.raises(R2AInputError, match="retriever checkpoint"):
        check_split("r2a", {"retriever": {"path": str(shipped), "sha256": "x"}},
                    BenchConfig(tasks=["Lift"], episodes=2, seed=20_000))


def test_training_refuses_data_outside_the_training_split(tmp_path):
    from gating.train import train_gate

    data = synthetic_gate_data(tmp_path / "d.npz")
    with pytest.raises(R2AInputError, match="outside the training split"):
        train_gate(GateTrainConfig.from_dict({"epochs": 1, "training_shifts": ["camera:2"]}), [data], tmp_path / "g",
                   progress=False)


def test_the_shipped_gate_and_its_ablations_load():
    from eval.diagnostics import register_diagnostics
    from r2a.policies.registry import R2A_VARIANTS, r2a_config_for
    from r2a.wrapper.config import resolve_path
    from r2a.wrapper.gate_checkpoint import load_gate

    register_diagnostics()
    config = r2a_config_for("r2a")
    assert config.gate.kind == "learned"
    ckpt = load_gate(resolve_path(config.gate.checkpoint), OSC_POSE_DELTA)
    assert ckpt.layout.steps == config.executed_steps and set(ckpt.layout.signals) == {"disagreement", "image_ood"}
    assert max(ckpt.seeds) < 100_000 and ckpt.provenance["best_constant"]
    assert load_image_stats(resolve_path(config.gate.image_stats)).cameras["agentview"].frames > 1000
    for name in ("r2a-gate-nodisagreement", "r2a-gate-noimage"):
        assert name in R2A_VARIANTS
        ablated = load_gate(resolve_path(r2a_config_for(name).gate.checkpoint), OSC_POSE_DELTA)
        assert len(ablated.layout.signals) == 1
    assert r2a_config_for("r2a-fixed").gate.kind == "fixed"
