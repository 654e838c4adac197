"""The built-in VLA end to end with real MuJoCo: expert demos → training (with the auxiliary object targets
recomputed from recorded simulator states) → the benchmark's clean condition with ``--policy builtin:DIR``."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("robosuite")

from demos.collect import CollectConfig, collect  # noqa: E402
from eval.bench_config import BenchConfig  # noqa: E402
from eval.runner import RESULTS, run_benchmark  # noqa: E402
from training.vla.data import build_arrays, load_training_episodes  # noqa: E402
from training.vla.train import TrainConfig, train_policy  # noqa: E402

TINY = ["steps=4", "batch_size=8", "chunk=4", "n_action_steps=4", "image_size=16", "conv_channels=8",
        "keypoints=4", "hidden=32", "log_every=2", "save_every=4", "warmup_steps=1", "holdout_every=0",
        "threads=1"]


@pytest.fixture(scope="module")
def lift_demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("vla_sim") / "lift.hdf5"
    collect(CollectConfig(task="Lift", episodes=2, out=out, seed=7, image_size=32), progress=False)
    return out


def test_object_targets_come_from_the_recorded_states(lift_demos):
    episodes, sources = load_training_episodes([lift_demos])
    arrays = build_arrays(episodes, ("agentview", "wrist"), 16, 4, aux=True)
    assert sources[0]["episodes"] == 2 and arrays.images["agentview"].shape[1:] == (16, 16, 3)
    assert arrays.aux_mask[:, :3].all() and not arrays.aux_mask[:, 3:].any()  # Lift has one object
    first = arrays.episode == 0
    distance = np.linalg.norm(arrays.aux[first, :3], axis=1)
    assert distance[0] > 0.05 and distance.min() < 0.03  # the gripper starts away from the cube, then reaches it


def test_trained_checkpoint_runs_in_the_benchmark(lift_demos, tmp_path):
    ckpt = tmp_path / "ckpt"
    train_policy(TrainConfig.from_yaml(None, TINY), [lift_demos], ckpt)
    config = BenchConfig.from_dict({"name": "vla-smoke", "tasks": ["Lift"], "factors": {}, "episodes": 1,
                                    "seed": 100000, "image_size": 32, "n_resamples": 100})
    run_benchmark(config, [f"builtin:{ckpt}"], tmp_path / "bench", workers=1, progress=False)
    (record,) = [json.loads(line) for line in (tmp_path / "bench" / RESULTS).read_text().splitlines()]
    assert record["policy"] == f"builtin:{ckpt}" and record["steps"] > 0 and record["error"] is None
