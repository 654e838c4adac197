"""The built-in VLA: features, model, training on tiny synthetic data, checkpoints, the frozen policy, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from r2a.vla.checkpoint import MANIFEST, WEIGHTS, load_checkpoint, read_manifest
from r2a.vla.model import SpatialSoftmax, VLANet, VLANetConfig, expand_action_modes
from r2a_core.errors import R2AInputError
from r2a_core.images import resize_image
from r2a_core.types import OSC_POSE_DELTA, STATE_STEP, image_key
from tests.conftest import make_episode
from training.vla.data import build_arrays, chunk_targets, merge_arrays
from training.vla.train import TrainConfig, losses, random_shift, train_policy

TINY = ["steps=6", "batch_size=8", "chunk=4", "n_action_steps=2", "image_size=16", "conv_channels=8",
        "keypoints=4", "hidden=32", "aux_weight=0", "log_every=2", "save_every=3", "warmup_steps=2",
        "holdout_every=2", "threads=1"]


def test_chunk_targets_pad_with_last_action_and_mask_it():
    actions = np.arange(6, dtype=np.float32).reshape(3, 2)
    chunks, mask = chunk_targets(actions, 4)
    assert chunks.shape == (3, 4, 2)
    np.testing.assert_array_equal(chunks[1], [[2, 3], [4, 5], [4, 5], [4, 5]])
    np.testing.assert_array_equal(mask[1], [1, 1, 0, 0])


def test_resize_area_and_nearest():
    image = np.zeros((4, 4, 3), np.uint8)
    image[:2, :2] = 200
    np.testing.assert_array_equal(resize_image(image, (2, 2))[..., 0], [[200, 0], [0, 0]])
    assert resize_image(np.zeros((10, 10, 3), np.uint8), (4, 4), "nearest").shape == (4, 4, 3)


def test_resizing_a_stack_gives_each_frame_as_it_comes_out_alone():
    """The trainer resizes each episode's frames at once; the run time resizes one frame: the same pixels."""
    frames = np.random.default_rng(0).integers(0, 256, (5, 128, 96, 3), dtype=np.uint8)
    frames[0] = 255
    frames[1, ::2] = 0
    for size in ((64, 48), (32, 24), (32, 32), (100, 90), (128, 96)):  # power-of-two blocks, others, none
        for method in ("area", "nearest"):
            want = np.stack([resize_image(frame, size, method) for frame in frames])
            np.testing.assert_array_equal(resize_image(frames, size, method), want, err_msg=f"{size} {method}")
    floats = frames.astype(np.float32) / 3
    np.testing.assert_array_equal(resize_image(floats, (64, 48)), np.stack([resize_image(f, (64, 48)) for f in floats]))


def test_spatial_softmax_finds_a_bright_spot():
    layer = SpatialSoftmax(1, 1)
    with torch.no_grad():
        layer.to_keypoints.weight.fill_(50.0)
        layer.to_keypoints.bias.zero_()
    features = torch.zeros(1, 1, 9, 9)
    features[0, 0, 2, 6] = 1.0  # row 2 (y = -0.5), column 6 (x = +0.5)
    np.testing.assert_allclose(layer(features)[0].detach().numpy(), [0.5, -0.5], atol=1e-3)


def test_random_shift_is_a_translation():
    images = torch.rand(3, 3, 8, 8)
    rng = np.random.default_rng(0)
    assert torch.equal(random_shift(images, 0, rng), images)
    shifted = random_shift(images, 2, rng)
    assert shifted.shape == images.shape


def test_model_output_shapes():
    config = VLANetConfig(image_size=16, chunk=4, conv_channels=8, keypoints=4, hidden=32)
    net = VLANet(config)
    images = {cam: torch.rand(2, 3, 16, 16) for cam in config.cameras}
    actions, aux = net(images, torch.zeros(2, 10), torch.zeros(2, 1), torch.zeros(2, 384))
    assert actions.shape == (2, 4, 7) and aux.shape == (2, 9)


def _tiny_net(**overrides) -> VLANet:
    return VLANet(VLANetConfig(image_size=16, chunk=4, conv_channels=8, keypoints=4, hidden=32, **overrides))


def _net_inputs(batch: int) -> tuple:
    """``batch`` copies of one observation."""
    images = {cam: torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)).expand(batch, -1, -1, -1)
              for cam in ("agentview", "wrist")}
    return images, torch.zeros(batch, 10), torch.zeros(batch, 1), torch.zeros(batch, 384)


def test_several_hypotheses_deploy_the_best_scored_chunk():
    net = _tiny_net(action_modes=3).eval()
    with torch.no_grad():
        chunks, scores, _ = net.hypotheses(*_net_inputs(2))
        executed, _ = net(*_net_inputs(2))
    assert chunks.shape == (2, 3, 4, 7) and scores.shape == (2, 3)
    for row in range(2):
        torch.testing.assert_close(executed[row], chunks[row, scores[row].argmax()])


def test_a_single_chunk_network_expands_to_hypotheses_that_start_from_its_chunk():
    single = _tiny_net().eval()
    multi = _tiny_net(action_modes=3).eval()
    multi.load_state_dict(expand_action_modes(single.state_dict(), 3, 0.3, torch.Generator().manual_seed(0)))
    with torch.no_grad():
        chunk, _ = single(*_net_inputs(2))
        chunks, scores, _ = multi.hypotheses(*_net_inputs(2))
        executed, _ = multi(*_net_inputs(2))
    torch.testing.assert_close(executed, chunk)  # uniform scores: hypothesis 0, the trained chunk itself
    offsets = (chunks - chunk[:, None]).abs().mean(dim=(0, 2, 3))
    assert offsets[0] == 0 and (offsets[1:] > 0.05).all()


def _bimodal_fit(modes: int, steps: int = 300) -> tuple[torch.Tensor, dict]:
    """Fit one input whose labels are +1 half of the time and -1 the other half (descend vs back up)."""
    torch.manual_seed(0)
    net = _tiny_net(action_modes=modes)
    images, proprio, time, text = _net_inputs(8)
    labels = torch.ones(8, 4, 7)
    labels[::2] = -1.0
    batch = {"images": images, "proprio": proprio, "time": time, "text": text, "actions": labels,
             "mask": torch.ones(8, 4), "aux": torch.zeros(8, 9), "aux_mask": torch.zeros(8, 9)}
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(steps):
        loss, parts = losses(net, batch, aux_weight=0.0, wta_epsilon=0.05)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return net({c: v[:1] for c, v in images.items()}, proprio[:1], time[:1], text[:1])[0], parts


def test_hypotheses_keep_conflicting_labels_apart_where_one_l1_chunk_settles_between():
    single, _ = _bimodal_fit(1)
    multi, parts = _bimodal_fit(2)
    assert single.abs().max() < 0.9  # L1's optimum lies anywhere between the modes: a hovering arm
    assert parts["best_l1"] < 0.1  # each label has a hypothesis of its own
    assert (multi.abs() > 0.9).all()  # and the executed chunk is one of them, whole


def test_a_network_without_the_clock_ignores_the_time_input():
    timed = VLANet(VLANetConfig(image_size=16, chunk=4, conv_channels=8, keypoints=4, hidden=32)).eval()
    untimed = VLANet(VLANetConfig(image_size=16, chunk=4, conv_channels=8, keypoints=4, hidden=32,
                                  time_input=False)).eval()
    untimed.load_state_dict(timed.state_dict())
    images = {cam: torch.rand(1, 3, 16, 16) for cam in timed.config.cameras}
    early, late = torch.zeros(1, 1), torch.full((1, 1), 1.5)
    with torch.no_grad():
        assert not torch.allclose(timed(images, torch.ones(1, 10), early, torch.ones(1, 384))[0],
                                  timed(images, torch.ones(1, 10), late, torch.ones(1, 384))[0])
        torch.testing.assert_close(untimed(images, torch.ones(1, 10), early, torch.ones(1, 384))[0],
                                   untimed(images, torch.ones(1, 10), late, torch.ones(1, 384))[0])
        torch.testing.assert_close(untimed(images, torch.ones(1, 10), late, torch.ones(1, 384))[0],
                                   timed(images, torch.ones(1, 10), early, torch.ones(1, 384))[0])


def test_config_rejects_unknown_fields_and_bad_chunking(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stepz: 3\n")
    with pytest.raises(R2AInputError, match="stepz"):
        TrainConfig.from_yaml(bad)
    with pytest.raises(R2AInputError, match="n_action_steps"):
        TrainConfig.from_yaml(None, ["chunk=4", "n_action_steps=8"])


def test_build_arrays_names_a_missing_camera():
    episode = make_episode(images=False)
    with pytest.raises(R2AInputError, match="camera"):
        build_arrays([episode], ("agentview", "wrist"), 16, 4, aux=False)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from demos.hdf5_io import write_hdf5

    root = tmp_path_factory.mktemp("vla")
    episodes = [make_episode(length=10 + i, seed=2 * i) for i in range(4)]  # even seeds: successful
    demos = write_hdf5(root / "demos.hdf5", episodes, env_args={"env_name": "Lift"})
    config = TrainConfig.from_yaml(None, TINY)
    summary = train_policy(config, [demos], root / "ckpt")
    assert summary["steps"] == 6 and np.isfinite(summary["final"]["loss"])
    return root / "ckpt"


def test_training_writes_a_loadable_versioned_checkpoint(tiny_checkpoint):
    manifest = read_manifest(tiny_checkpoint)
    assert manifest["version"] == 1 and manifest["n_action_steps"] == 2
    assert manifest["prompts"].keys() == {"do lift"}
    history = manifest["provenance"]["history"]
    assert [row["step"] for row in history] == [2, 4, 6] and "val_loss" in history[-1]
    assert manifest["provenance"]["sources"][0]["episodes"] == 4
    ckpt = load_checkpoint(tiny_checkpoint)
    assert ckpt.model.config.chunk == 4


def test_predict_gives_every_hypothesis_and_the_aux_estimate_without_advancing_time(tiny_checkpoint):
    from r2a.vla.policy import BuiltinVLAPolicy

    policy = BuiltinVLAPolicy(tiny_checkpoint)
    obs = {**_observation(policy.config.image_size), STATE_STEP: 5}
    chunks, scores, aux = policy.predict(obs)
    assert chunks.shape == (1, policy.config.chunk, 7) and scores.shape == (1,) and aux.shape == (3, 3)
    assert np.all(np.abs(chunks) <= 1.0) and np.isfinite(aux).all()
    np.testing.assert_array_equal(policy.predict(obs)[0], chunks)  # no state: the same answer twice
    np.testing.assert_array_equal(policy.infer(obs)["actions"], chunks[0])


def test_policy_infers_bounded_chunks_and_counts_time(tiny_checkpoint):
    from r2a.vla.policy import BuiltinVLAPolicy

    policy = BuiltinVLAPolicy(tiny_checkpoint)
    obs = _observation(size=32)
    actions = policy.infer(obs)["actions"]
    assert actions.shape == (4, 7) and actions.dtype == np.float32
    assert np.isfinite(actions).all() and np.abs(actions).max() <= 1.0
    later = policy.infer({**obs, STATE_STEP: 150})["actions"]
    assert not np.allclose(actions, later)  # the elapsed time is an input
    with pytest.raises(R2AInputError, match="images/wrist"):
        policy.infer({k: v for k, v in obs.items() if k != image_key("wrist")})


def test_checkpoint_versions_and_corruption_are_rejected(tiny_checkpoint, tmp_path):
    import shutil

    copy = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    (copy / MANIFEST).write_text(json.dumps({**manifest, "version": 99}))
    with pytest.raises(R2AInputError, match="version 99"):
        load_checkpoint(copy)
    (copy / MANIFEST).write_text(json.dumps(manifest))
    (copy / WEIGHTS).write_bytes(b"not weights")
    with pytest.raises(R2AInputError, match="weights"):
        load_checkpoint(copy)
    with pytest.raises(R2AInputError, match="no manifest"):
        load_checkpoint(tmp_path / "nowhere")


def test_registry_builds_the_builtin_policy_from_a_path(tiny_checkpoint):
    from r2a.policies import make_policy

    policy = make_policy(f"builtin:{tiny_checkpoint}")
    assert policy.infer(_observation(16))["actions"].shape[1] == OSC_POSE_DELTA.dim
    with pytest.raises(R2AInputError, match="expert"):
        make_policy("expert")  # needs a simulator


def test_cli_info_describes_a_checkpoint(tiny_checkpoint, capsys):
    from r2a_cli.main import main

    assert main(["policy", "info", str(tiny_checkpoint)]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["version"] == 1 and described["weights_bytes"] > 0
    assert main(["policy", "info", str(tiny_checkpoint.parent)]) == 2


def _observation(size: int) -> dict:
    rng = np.random.default_rng(0)
    return {image_key("agentview"): rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            image_key("wrist"): rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            "state/ee_pos": np.array([0.0, 0.0, 1.0]), "state/ee_quat": np.array([0.0, 1.0, 0.0, 0.0]),
            "state/gripper": np.array(1.0), "state/joint_pos": np.zeros(7), "prompt": "do lift", STATE_STEP: 0}


def test_builtin_policy_served_over_the_openpi_protocol(tiny_checkpoint):
    """A real local websocket server serves the built-in VLA; our client and openpi's get its chunks."""
    from r2a.policies import make_policy
    from r2a.serve.policy_server import PolicyServer
    from r2a.vla.policy import BuiltinVLAPolicy

    served = BuiltinVLAPolicy(tiny_checkpoint)
    obs = _observation(16)
    expected = BuiltinVLAPolicy(tiny_checkpoint).infer(obs)["actions"]
    with PolicyServer(served, port=0, metadata=served.metadata) as server:
        port = server.port
        client = make_policy(f"openpi:ws://127.0.0.1:{port}")
        client.reset()
        np.testing.assert_allclose(client.infer(obs)["actions"], expected, atol=1e-6)
        assert client.n_action_steps == 2 and client.metadata["policy"] == "builtin"
        openpi_client = pytest.importorskip("openpi_client.websocket_client_policy")
        reference = openpi_client.WebsocketClientPolicy(host="127.0.0.1", port=port)
        np.testing.assert_allclose(reference.infer(obs)["actions"], expected, atol=1e-6)


def test_temporal_ensemble_averages_overlapping_predictions(tiny_checkpoint):
    from r2a.policies import make_policy
    from r2a.vla.policy import BuiltinVLAPolicy

    plain = BuiltinVLAPolicy(tiny_checkpoint)
    ensembled = make_policy(f"builtin:{tiny_checkpoint}?temporal_ensemble=0.5")
    assert ensembled.n_action_steps == 1
    obs0, obs1 = _observation(16), {**_observation(16), STATE_STEP: 1, "state/ee_pos": np.array([0.1, 0, 1.0])}
    first = ensembled.infer(obs0)
    np.testing.assert_allclose(first["actions"][0], plain.infer(obs0)["actions"][0], atol=1e-6)
    second = ensembled.infer(obs1)["actions"][0]
    older, newer = plain.infer(obs0)["actions"][1], plain.infer(obs1)["actions"][0]
    np.testing.assert_allclose(second, (older + np.exp(-0.5) * newer) / (1 + np.exp(-0.5)), atol=1e-5)
    with pytest.raises(R2AInputError, match="unknown option"):
        make_policy(f"builtin:{tiny_checkpoint}?speed=2")
    with pytest.raises(R2AInputError, match="n_action_steps=9"):
        make_policy(f"builtin:{tiny_checkpoint}?n_action_steps=9")


def test_training_can_continue_from_a_checkpoint(tiny_checkpoint, tmp_path):
    from demos.hdf5_io import write_hdf5

    demos = write_hdf5(tmp_path / "d.hdf5", [make_episode(length=9, seed=0)], env_args={"env_name": "Lift"})
    start = load_checkpoint(tiny_checkpoint)
    config = TrainConfig.from_yaml(None, TINY + ["steps=2", f"init_from={tiny_checkpoint}", "holdout_every=0"])
    train_policy(config, [demos], tmp_path / "more")
    continued = load_checkpoint(tmp_path / "more")
    np.testing.assert_array_equal(continued.stats["action_std"], start.stats["action_std"])
    train_policy(TrainConfig.from_yaml(None, TINY + ["steps=2", f"init_from={tiny_checkpoint}", "holdout_every=0",
                                                     "time_input=false"]), [demos], tmp_path / "untimed")
    assert load_checkpoint(tmp_path / "untimed").model.config.time_input is False
    train_policy(TrainConfig.from_yaml(None, TINY + ["steps=2", f"init_from={tiny_checkpoint}", "holdout_every=0",
                                                     "action_modes=3"]), [demos], tmp_path / "modes")
    modes = load_checkpoint(tmp_path / "modes")
    assert modes.model.config.action_modes == 3 and "best_l1" in modes.provenance["history"][-1]
    with pytest.raises(R2AInputError, match="differs"):  # hypotheses cannot be merged back into one chunk
        train_policy(TrainConfig.from_yaml(None, TINY + ["steps=2", f"init_from={tmp_path / 'modes'}"]), [demos],
                     tmp_path / "bad")
    with pytest.raises(R2AInputError, match="differs"):
        train_policy(TrainConfig.from_yaml(None, TINY + ["hidden=16", f"init_from={tiny_checkpoint}"]), [demos],
                     tmp_path / "bad")


def test_checkpoints_continued_from_one_start_average_and_others_are_refused(tiny_checkpoint, tmp_path):
    from demos.hdf5_io import write_hdf5
    from r2a.vla.checkpoint import average_checkpoints
    from r2a_cli.policy import build_parser, run

    demos = write_hdf5(tmp_path / "d.hdf5", [make_episode(length=9, seed=0)], env_args={"env_name": "Lift"})
    train_policy(TrainConfig.from_yaml(None, TINY + ["steps=2", f"init_from={tiny_checkpoint}", "holdout_every=0",
                                                     "lr=0.1"]), [demos], tmp_path / "more")
    assert run(build_parser("r2a policy").parse_args(["average", str(tiny_checkpoint), str(tmp_path / "more"),
                                                      "--out", str(tmp_path / "soup")])) == 0
    a, b, soup = (load_checkpoint(p).model.state_dict()
                  for p in (tiny_checkpoint, tmp_path / "more", tmp_path / "soup"))
    name = next(k for k in a if a[k].is_floating_point() and not torch.equal(a[k], b[k]))
    torch.testing.assert_close(soup[name], (a[name] + b[name]) / 2)
    assert len(load_checkpoint(tmp_path / "soup").provenance["averaged"]) == 2
    other = tmp_path / "other"
    train_policy(TrainConfig.from_yaml(None, TINY + ["steps=2", "holdout_every=0"]), [demos], other)
    with pytest.raises(R2AInputError, match="normalization"):
        average_checkpoints([tiny_checkpoint, other], tmp_path / "bad")
    with pytest.raises(R2AInputError, match="at least two"):
        average_checkpoints([tiny_checkpoint], tmp_path / "bad")


def test_task_weights_shift_the_sampling():
    from training.vla.train import sampling_probabilities

    episodes = [make_episode(length=10, seed=0, task="Lift"), make_episode(length=10, seed=2, task="Stack")]
    arrays = build_arrays(episodes, ("agentview", "wrist"), 16, 4, aux=False)
    rows = np.arange(len(arrays))
    p = sampling_probabilities(arrays, rows, {"Stack": 3.0})
    assert np.isclose(p[arrays.task_index == arrays.tasks.index("Stack")].sum(), 0.75)
    with pytest.raises(R2AInputError, match="Stak"):
        sampling_probabilities(arrays, rows, {"Stak": 2.0})


def test_the_shipped_checkpoint_loads_and_acts():
    """The committed checkpoint is what `--policy builtin` and the quickstart use without retraining."""
    from r2a.vla.policy import BUILTIN_CHECKPOINT, BuiltinVLAPolicy

    manifest = read_manifest(BUILTIN_CHECKPOINT)
    assert manifest["version"] == 1 and len(manifest["prompts"]) == 4
    assert (BUILTIN_CHECKPOINT / WEIGHTS).stat().st_size < 5_000_000
    policy = BuiltinVLAPolicy()
    actions = policy.infer({**_observation(64), "prompt": "pick up the red cube"})["actions"]
    assert actions.shape == (16, 7) and np.isfinite(actions).all()


def test_the_shipped_libero_checkpoint_is_builtin_libero_and_knows_both_suites_prompts():
    """`--policy builtin-libero` loads the LIBERO base (issue 34): trained on libero_spatial and libero_object only,
    128-px observations resized as in its training; it takes options, not another checkpoint."""
    from r2a.policies import make_policy
    from r2a.vla.policy import BUILTIN_LIBERO_CHECKPOINT

    manifest = read_manifest(BUILTIN_LIBERO_CHECKPOINT)
    assert manifest["version"] == 1 and (BUILTIN_LIBERO_CHECKPOINT / WEIGHTS).stat().st_size < 20_000_000
    tasks = {Path(source["path"]).stem.rsplit("_", 1)[0] for source in manifest["provenance"]["sources"]}
    assert tasks == {"libero_spatial", "libero_object"} and len(manifest["prompts"]) == 20
    policy = make_policy("builtin-libero:?n_action_steps=4", None, 0)
    actions = policy.infer({**_observation(128), "prompt": sorted(manifest["prompts"])[0]})["actions"]
    assert actions.shape == (16, 7) and np.isfinite(actions).all() and policy.metadata["n_action_steps"] == 4
    with pytest.raises(R2AInputError, match="options only"):
        make_policy("builtin-libero:some/dir", None, 0)


def test_the_strong_libero_checkpoint_is_the_recipe_s_last_stage():
    """`--policy builtin-libero-strong` (issue 46) loads the strong base: both suites, its last stage trained on the
    demonstrations, DART and both DAgger rounds' files (scripts/libero_strong_base.sh); options only."""
    from r2a.policies import make_policy
    from r2a.vla.policy import BUILTIN_LIBERO_STRONG_CHECKPOINT

    manifest = read_manifest(BUILTIN_LIBERO_STRONG_CHECKPOINT)
    assert manifest["version"] == 1 and (BUILTIN_LIBERO_STRONG_CHECKPOINT / WEIGHTS).stat().st_size < 20_000_000
    sources = [Path(source["path"]) for source in manifest["provenance"]["sources"]]
    assert {p.parent.name for p in sources} == {"demos", "dart", "dagger1", "dagger2"}
    assert {p.stem.rsplit("_", 1)[0] for p in sources} == {"libero_spatial", "libero_object"}
    assert len(sources) == 80 and len(manifest["prompts"]) == 20
    policy = make_policy("builtin-libero-strong:?n_action_steps=4", None, 0)
    actions = policy.infer({**_observation(128), "prompt": sorted(manifest["prompts"])[0]})["actions"]
    assert actions.shape == (16, 7) and np.isfinite(actions).all() and policy.metadata["n_action_steps"] == 4
    with pytest.raises(R2AInputError, match="options only"):
        make_policy("builtin-libero-strong:some/dir", None, 0)


def test_arrays_of_separate_sources_merge_like_one_source(tmp_path):
    """Reading demo files in parallel processes gives exactly the arrays of reading them together."""
    from demos.hdf5_io import write_hdf5
    from training.vla.data import load_training_arrays

    lift = [make_episode(length=9, seed=0), make_episode(length=7, seed=2)]
    stack = [make_episode(length=8, seed=4, task="Stack")]
    whole = build_arrays(lift + stack, ("agentview", "wrist"), 16, 4, aux=False)
    merged = merge_arrays([build_arrays(stack, ("agentview", "wrist"), 16, 4, aux=False),
                           build_arrays(lift, ("agentview", "wrist"), 16, 4, aux=False)])
    assert merged.prompts == whole.prompts and merged.tasks == whole.tasks
    np.testing.assert_array_equal(merged.episode, [0] * 8 + [1] * 9 + [2] * 7)
    stack_rows = merged.task_index == merged.tasks.index("Stack")
    np.testing.assert_array_equal(merged.actions[stack_rows],
                                  whole.actions[whole.task_index == whole.tasks.index("Stack")])
    assert {merged.prompts[i] for i in merged.prompt_index[stack_rows]} == {"do stack"}
    files = [write_hdf5(tmp_path / "lift.hdf5", lift, env_args={"env_name": "Lift"}),
             write_hdf5(tmp_path / "stack.hdf5", stack, env_args={"env_name": "Stack"})]
    parallel, sources = load_training_arrays(files, ("agentview", "wrist"), 16, 4, aux=False, workers=2)
    np.testing.assert_array_equal(parallel.actions, whole.actions)
    np.testing.assert_array_equal(parallel.images["wrist"], whole.images["wrist"])
    np.testing.assert_array_equal(parallel.episode, whole.episode)
    assert [s["episodes"] for s in sources] == [2, 1]
    failed = write_hdf5(tmp_path / "failed.hdf5", [make_episode(length=6, seed=1)], env_args={"env_name": "Lift"})
    with_failed, sources = load_training_arrays(files + [failed], ("agentview", "wrist"), 16, 4, aux=False, workers=1)
    assert len(with_failed) == len(whole) and sources[-1]["skipped_failures"] == 1  # a failed file adds nothing
    with pytest.raises(R2AInputError, match="no successful episodes"):
        load_training_arrays([failed], ("agentview", "wrist"), 16, 4, aux=False)


def test_a_stopped_run_resumes_to_the_weights_of_one_that_never_stopped(tiny_checkpoint, tmp_path, monkeypatch):
    """A run killed mid-way (a session's end) resumes from its last save: same weights, average, optimizer and
    sampler, so the result is the uninterrupted run's, bit for bit; another config is refused."""
    import training.vla.train as train
    from demos.dataset import load_episodes
    from r2a.vla.checkpoint import MANIFEST, TRAIN_WEIGHTS, still_training
    from r2a_core.provenance import episodes_sha256, legacy_source_sha256, sha256_file

    demos = tiny_checkpoint.parent / "demos.hdf5"
    config = TrainConfig.from_yaml(None, TINY + ["save_every=2", f"prompts_from={tiny_checkpoint}"])
    train_policy(config, [demos], tmp_path / "straight")
    optimize, calls = train._optimize, []

    def killed_at_the_fourth_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return optimize(*args, **kwargs)

    monkeypatch.setattr(train, "_optimize", killed_at_the_fourth_step)
    with pytest.raises(KeyboardInterrupt):
        train_policy(config, [demos], tmp_path / "stopped")
    monkeypatch.setattr(train, "_optimize", optimize)
    assert still_training(tmp_path / "stopped")  # saved at step 2
    with pytest.raises(R2AInputError, match="another config.*lr"):
        train_policy(TrainConfig.from_yaml(None, TINY + ["save_every=2", f"prompts_from={tiny_checkpoint}",
                                                         "lr=0.5"]), [demos], tmp_path / "stopped")
    # a run stopped before issue 47 recorded its demos' name-salted digest: it resumes all the same
    manifest = json.loads((tmp_path / "stopped" / MANIFEST).read_text())
    assert manifest["provenance"]["sources"][0]["sha256"] == sha256_file(demos)
    manifest["provenance"]["sources"][0]["sha256"] = legacy_source_sha256(demos)
    (tmp_path / "stopped" / MANIFEST).write_text(json.dumps(manifest))
    recorded = manifest["provenance"]["sources"][0]
    assert recorded["content_sha256"] == episodes_sha256(load_episodes(demos))
    # demos re-collected on a new machine: the same episodes in other bytes resume; other episodes do not
    assert train.same_sources([{**recorded, "sha256": "0" * 64}], [recorded])
    assert not train.same_sources([{**recorded, "sha256": "0" * 64, "content_sha256": "1" * 64}], [recorded])
    assert not train.same_sources([{k: v for k, v in recorded.items() if k != "content_sha256"} | {"sha256": "0" * 64}],
                                  [recorded])
    summary = train_policy(config, [demos], tmp_path / "stopped")
    assert summary["steps"] == 6 and not still_training(tmp_path / "stopped")
    assert not (tmp_path / "stopped" / TRAIN_WEIGHTS).exists()  # the finished checkpoint ships the average only
    resumed, straight = load_checkpoint(tmp_path / "stopped"), load_checkpoint(tmp_path / "straight")
    for name, value in straight.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name
    provenance = read_manifest(tmp_path / "stopped")["provenance"]
    assert [row["step"] for row in provenance["history"]] == [2, 4, 6] and provenance["resumed_at"] == [2]


def test_time_limited_training_anneals_and_stops(tiny_checkpoint, tmp_path, monkeypatch):
    """A time limit ends training with a saved, annealed checkpoint; stored prompt embeddings are reused."""
    import r2a.vla.text as text
    from demos.hdf5_io import write_hdf5

    def no_sentence_model():
        raise AssertionError("the sentence model must not be loaded for a prompt the checkpoint knows")

    monkeypatch.setattr(text, "_load_minilm", no_sentence_model)
    demos = write_hdf5(tmp_path / "d.hdf5", [make_episode(length=9, seed=0)], env_args={"env_name": "Lift"})
    config = TrainConfig.from_yaml(None, TINY + ["steps=100000", "time_limit_s=0.000001", "holdout_every=0",
                                                 f"prompts_from={tiny_checkpoint}", "device=cpu"])
    summary = train_policy(config, [demos], tmp_path / "timed")
    assert summary["steps"] == config.warmup_steps + 1
    history = read_manifest(tmp_path / "timed")["provenance"]["history"]
    assert history[-1]["lr"] == pytest.approx(1e-5)
    assert read_manifest(tmp_path / "timed")["provenance"]["device"] == "cpu"


def test_time_jitter_moves_only_the_time_input_of_training_batches():
    from r2a.vla.features import time_feature
    from training.vla.train import Batches, normalization_stats

    arrays = build_arrays([make_episode(length=30, seed=0)], ("agentview", "wrist"), 16, 4, aux=False)
    data = Batches(arrays, normalization_stats(arrays), torch.zeros(1, 384), shift_pixels=0, time_jitter=5)
    rows = np.arange(len(arrays))
    exact = time_feature(arrays.step)
    jittered = data.batch(rows, np.random.default_rng(0), augment=True)["time"][:, 0].numpy()
    offsets = np.rint((jittered - exact) * 200).astype(int)
    assert np.abs(offsets).max() <= 5 and len(set(offsets.tolist())) > 3
    assert (jittered >= 0).all()
    np.testing.assert_array_equal(
        data.batch(rows, np.random.default_rng(0), augment=False)["time"][:, 0].numpy(), exact)


def test_release_frames_are_the_steps_before_the_gripper_opens():
    from training.vla.train import release_frames, sampling_probabilities

    episodes = [make_episode(length=10, seed=0), make_episode(length=10, seed=2)]
    for ep in episodes:
        ep.actions[:, -1] = [-1, -1, 1, 1, 1, 1, 1, -1, -1, -1]  # closes at 2, opens at 7
    arrays = build_arrays(episodes, ("agentview", "wrist"), 16, 4, aux=False)
    near = release_frames(arrays, window=2)
    np.testing.assert_array_equal(np.flatnonzero(near), [5, 6, 7, 15, 16, 17])
    rows = np.arange(len(arrays))
    p = sampling_probabilities(arrays, rows, {}, (4.0, 2))
    assert np.isclose(p[near].sum(), 6 * 4 / (6 * 4 + 14))
    assert np.allclose(sampling_probabilities(arrays, rows, {}), 1 / len(arrays))


def test_on_policy_frames_can_be_sampled_more_often():
    from training.dagger import DAGGER_META_KEY
    from training.vla.train import sampling_probabilities

    episodes = [make_episode(length=10, seed=0), make_episode(length=5, seed=2)]
    episodes[1].meta[DAGGER_META_KEY] = {"learner": "builtin", "beta": 0.1}
    arrays = build_arrays(episodes, ("agentview", "wrist"), 16, 4, aux=False)
    np.testing.assert_array_equal(arrays.on_policy, [False] * 10 + [True] * 5)
    assert merge_arrays([arrays, arrays]).on_policy.sum() == 10
    p = sampling_probabilities(arrays, np.arange(len(arrays)), {}, on_policy_weight=3.0)
    assert np.isclose(p[arrays.on_policy].sum(), 15 / 25)
    with pytest.raises(R2AInputError, match="on_policy_weight"):
        TrainConfig.from_yaml(None, ["on_policy_weight=0"])


def test_validation_files_replace_the_every_nth_holdout(tmp_path):
    from demos.hdf5_io import write_hdf5

    train = write_hdf5(tmp_path / "train.hdf5", [make_episode(length=9, seed=0), make_episode(length=8, seed=2)],
                       env_args={"env_name": "Lift"})
    val = write_hdf5(tmp_path / "val.hdf5", [make_episode(length=7, seed=4)], env_args={"env_name": "Lift"})
    config = TrainConfig.from_yaml(None, TINY + ["steps=2", "log_every=2", f"val_demos=[{val}]"])
    train_policy(config, [train], tmp_path / "ckpt")
    provenance = load_checkpoint(tmp_path / "ckpt").provenance
    assert (provenance["train_frames"], provenance["heldout_frames"]) == (17, 7)
    assert [s.get("role") for s in provenance["sources"]] == [None, "validation"]
    assert "val_action_l1" in provenance["history"][-1]
