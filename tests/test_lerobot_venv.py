"""A LeRobot policy as a base, across two environments (issue 48): lerobot lives in its own venv (``make lerobot-venv``;
docs/architecture.md, "Platform notes"), this test runs in the project's.

Where that venv exists (``$R2A_LEROBOT_VENV``, default ``.venv-lerobot`` in the repository root) it runs the whole
path with the checkout's code: synthetic demos → ``scripts/lerobot/export_dataset.py`` (lerobot's own writer) → a
tiny ACT from ``scripts/lerobot/train_act.sh`` (lerobot-train, 3 steps, no network) → ``check_adapter.py`` (the
adapter feeds it what lerobot's pipeline does) → ``r2a serve --policy lerobot:…`` there, and our openpi client here.
A checkpoint trained on LIBERO's converted datasets is fed through configs/adapters/lerobot_libero.yaml exactly what
lerobot's own LIBERO evaluation feeds it (its LiberoProcessorStep run there). Without the venv those tests are
skipped with the reason. The export's state layout is checked against the adapter's in
both cases (without lerobot: the export's pure part).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import make_episode

from demos.dataset import load_episodes
from demos.hdf5_io import write_hdf5
from r2a.adapters.lerobot_policy import default_lerobot_keymap
from r2a_core.types import PROMPT, STATE_EE_POS, STATE_EE_QUAT, STATE_GRIPPER, image_key

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts" / "lerobot"
VENV = Path(os.environ.get("R2A_LEROBOT_VENV") or REPO / ".venv-lerobot")
PYTHON = VENV / "bin" / "python"
needs_venv = pytest.mark.skipif(not PYTHON.is_file(), reason=f"no lerobot venv at {VENV} (build it with "
                                                              f"'make lerobot-venv', or set R2A_LEROBOT_VENV)")
#: the tiny ACT the test trains (lerobot-train options, appended to train_act.sh's)
TINY_ACT = ["--policy.dim_model=32", "--policy.dim_feedforward=64", "--policy.n_heads=2", "--policy.n_encoder_layers=1",
            "--policy.n_decoder_layers=1", "--policy.n_vae_encoder_layers=1", "--policy.latent_dim=4"]
#: what a LIBERO-port checkpoint's config.json says about its inputs (the adapter's default key map reads it)
LIBERO_CONFIG = {"input_features": {"observation.images.image": {"type": "VISUAL", "shape": [3, 32, 32]},
                                    "observation.images.wrist_image": {"type": "VISUAL", "shape": [3, 32, 32]},
                                    "observation.state": {"type": "STATE", "shape": [8]}},
                 "output_features": {"action": {"type": "ACTION", "shape": [7]}}}


def _sim_observation(ep, t: int) -> dict:
    """Frame ``t`` as the simulator's observation has it at run time (written here independently of the export)."""
    obs = {image_key(cam): frames[t] for cam, frames in ep.images.items()}
    obs.update({STATE_EE_POS: np.asarray(ep.ee_pos[t], np.float32),
                STATE_EE_QUAT: np.asarray(ep.ee_quat[t], np.float32),
                STATE_GRIPPER: np.float32(ep.gripper[t]), PROMPT: ep.instruction})
    return obs


def _episodes() -> list:
    """Three synthetic episodes with 32-px cameras; the second failed (the export must leave it out)."""
    return [make_episode(length=10 + 3 * i, seed=i, size=32) for i in range(3)]


def _export_module():
    spec = importlib.util.spec_from_file_location("export_dataset", SCRIPTS / "export_dataset.py")
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)
    return export


@pytest.mark.parametrize("size", [None, 16])
def test_export_frames_are_what_the_adapter_feeds_at_run_time(size):
    """State and images (resized or not) exported as the adapter maps the run-time observation for a checkpoint
    whose inputs are the export's features."""
    export = _export_module()
    side = size or 32
    config = {**LIBERO_CONFIG, "input_features": {
        key: {**f, "shape": [3, side, side]} if f["type"] == "VISUAL" else f
        for key, f in LIBERO_CONFIG["input_features"].items()}}
    keymap = default_lerobot_keymap(config)
    for ep in _episodes():
        rows = export.frames(ep, None if size is None else (size, size))
        states = np.stack([row["observation.state"] for row in rows])
        assert states.dtype == np.float32 and states.shape == (len(ep), 8)
        for t, row in enumerate(rows):
            run_time = keymap.map_obs(_sim_observation(ep, t))
            for key in ("observation.state", "observation.images.image", "observation.images.wrist_image"):
                np.testing.assert_array_equal(row[key], run_time[key])
            assert row["observation.images.image"].shape == (side, side, 3)
        np.testing.assert_allclose(states[:, :3], ep.ee_pos, atol=1e-6)  # and it is LIBERO's layout
        np.testing.assert_allclose(states[:, 6] - states[:, 7], ep.gripper * 0.08, atol=1e-6)
    if size is None:
        np.testing.assert_array_equal(rows[0]["observation.images.image"], ep.images["agentview"][0])


# ----------------------------------------------------------------------------------------- in the lerobot venv


def _venv_env() -> dict:
    """The checkout's code in the lerobot venv (PYTHONPATH wins over its editable install), never the network."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE",
               LEROBOT_VENV=str(VENV))
    return env


def _run(cmd: list, timeout: float = 120) -> str:
    proc = subprocess.run([str(c) for c in cmd], env=_venv_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{cmd[:2]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def lerobot_run(tmp_path_factory):
    """Demos → LeRobot dataset → a 3-step ACT saved at every step, all in the lerobot venv."""
    root = tmp_path_factory.mktemp("lerobot")
    episodes = _episodes()
    demos = write_hdf5(root / "demos.hdf5", episodes, env_args={"env_name": "Lift"})
    dataset, out = root / "dataset", root / "act"
    (root / "dataset.partial").mkdir()  # an interrupted export's leftover: started again, then renamed
    _run([PYTHON, SCRIPTS / "export_dataset.py", demos, "--out", dataset])
    assert (dataset / "meta" / "info.json").is_file() and not (root / "dataset.partial").exists()
    env = {"DATASET": dataset, "OUT": out, "STEPS": "3", "BATCH_SIZE": "2", "SAVE_FREQ": "1", "NUM_WORKERS": "0",
           "KEEP_CHECKPOINTS": "2"}
    _run(["env", *(f"{k}={v}" for k, v in env.items()), "bash", SCRIPTS / "train_act.sh", *TINY_ACT])
    recorded = [ep for ep in load_episodes(demos) if ep.success]  # what the export read
    assert len(recorded) == 2
    return {"episodes": recorded, "demos": demos, "dataset": dataset, "run": out}


@needs_venv
def test_exported_dataset_holds_the_run_time_state_and_images(lerobot_run):
    import pyarrow.parquet as pq

    from demos.lerobot_v3 import read_lerobot_v3

    ckpt = lerobot_run["run"] / "checkpoints" / "last" / "pretrained_model"
    config = json.loads((ckpt / "config.json").read_text())
    assert config["chunk_size"] == 16 and config["n_action_steps"] == 8
    assert config["pretrained_backbone_weights"] is None  # nothing downloaded
    keymap = default_lerobot_keymap(config)  # what the adapter feeds this checkpoint
    table = pq.read_table(sorted((lerobot_run["dataset"] / "data").rglob("*.parquet"))[0]).to_pydict()
    expected = [keymap.map_obs(_sim_observation(ep, t))["observation.state"]
                for ep in lerobot_run["episodes"] for t in range(len(ep))]
    np.testing.assert_array_equal(np.asarray(table["observation.state"], np.float32), np.stack(expected))
    read = read_lerobot_v3(lerobot_run["dataset"])  # and our reader finds the demos again
    assert [len(ep) for ep in read] == [len(ep) for ep in lerobot_run["episodes"]]
    for ours, theirs in zip(lerobot_run["episodes"], read):
        assert theirs.instruction == ours.instruction
        np.testing.assert_array_equal(theirs.images["agentview"], ours.images["agentview"])
        np.testing.assert_array_equal(theirs.images["wrist"], ours.images["wrist"])
        np.testing.assert_array_equal(theirs.actions, ours.actions.astype(np.float32))


@needs_venv
def test_training_keeps_the_newest_checkpoints_only(lerobot_run):
    checkpoints = lerobot_run["run"] / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["000002", "000003", "last"]
    assert (checkpoints / "last").resolve().name == "000003"


@needs_venv
def test_adapter_matches_lerobots_own_pipeline(lerobot_run):
    out = _run([PYTHON, SCRIPTS / "check_adapter.py", lerobot_run["run"], lerobot_run["demos"],
                "--dataset", lerobot_run["dataset"], "--frames", "4"])
    result = json.loads(out.strip().splitlines()[-1])
    assert result["ok"] and result["chunk_shape"] == [16, 7], result


@needs_venv
def test_served_from_the_lerobot_venv_driven_from_here(lerobot_run):
    from r2a.policies.registry import make_policy
    from r2a_core.provenance import sha256_path

    log = lerobot_run["run"] / "serve.log"
    with open(log, "w") as stderr:  # the training run directory (not the checkpoint's) stands for its last checkpoint
        server = subprocess.Popen([str(PYTHON), "-m", "r2a_cli", "serve", "--policy", f"lerobot:{lerobot_run['run']}",
                                   "--port", "0"], env=_venv_env(), cwd=REPO, stderr=stderr)
    try:
        found, deadline = None, time.monotonic() + 60
        while not found and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            found = re.search(r"serving GuardedPolicy on ws://127\.0\.0\.1:(\d+)", log.read_text())
        assert found, "the lerobot venv's server did not start:\n" + log.read_text()[-3000:]
        policy = make_policy(f"openpi:ws://127.0.0.1:{found.group(1)}")
        assert policy.n_action_steps == 8  # the checkpoint's own, announced: the client re-plans as lerobot does
        # and the checkpoint it loaded, by content: runs and fits refuse a server restarted with another
        served = lerobot_run["run"] / "checkpoints" / "last" / "pretrained_model"
        assert policy.metadata["artifacts"]["base_checkpoint"]["sha256"] == sha256_path(served)
        ep = lerobot_run["episodes"][0]
        policy.reset()
        for t in (0, 5):
            actions = policy.infer(_sim_observation(ep, t))["actions"]
            assert actions.shape == (16, 7) and actions.dtype == np.float32 and np.isfinite(actions).all()
    finally:
        server.terminate()
        server.wait(timeout=10)



# ------------------------------------------------------------- a checkpoint trained on LIBERO's converted datasets
#: lerobot's own LIBERO evaluation from LIBERO's raw observation (a vector env of one): LiberoEnv._format_raw_obs's
#: layout, lerobot.envs.utils.preprocess_observation, then LiberoProcessorStep (180° turn, the 8-D state)
LEROBOT_LIBERO_SIDE = """
import sys
import numpy as np
from lerobot.envs.utils import preprocess_observation
from lerobot.processor.env_processor import LiberoProcessorStep
raw = {k: v[None] for k, v in np.load(sys.argv[1]).items()}
obs = {"pixels": {"image": raw["agentview_image"], "image2": raw["robot0_eye_in_hand_image"]},
       "robot_state": {"eef": {"pos": raw["robot0_eef_pos"], "quat": raw["robot0_eef_quat"], "mat": np.eye(3)[None]},
                       "gripper": {"qpos": raw["robot0_gripper_qpos"], "qvel": np.zeros((1, 2))},
                       "joints": {"pos": np.zeros((1, 7)), "vel": np.zeros((1, 7))}}}
out = LiberoProcessorStep()._process_observation(preprocess_observation(obs))
np.savez(sys.argv[2], **{k: v.numpy() for k, v in out.items()})
"""


def _libero_observation(size: int = 256) -> tuple[dict, dict]:
    """One of our LIBERO-backend observations and LIBERO's raw observation behind it (our upright rows reversed,
    LIBERO's xyzw quaternion of the hand)."""
    from r2a.adapters import libero_convention as lc
    from r2a_core.rotations import axis_angle_to_quat, wxyz_to_xyzw

    rng = np.random.default_rng(3)
    hand = lc.hand_quat_from_site(axis_angle_to_quat(np.array([2.2, 2.2, 0.05])))
    ours = {image_key("agentview"): rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            image_key("wrist"): rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            lc.LIBERO_EEF_POS: np.array([-0.2105493, -0.0114551, 1.1748394]), lc.LIBERO_EEF_QUAT: hand,
            lc.LIBERO_GRIPPER_QPOS: np.array([0.0386967, -0.0386805]), PROMPT: "put the bowl on the plate"}
    raw = {"agentview_image": ours[image_key("agentview")][::-1],
           "robot0_eye_in_hand_image": ours[image_key("wrist")][::-1],
           "robot0_eef_pos": ours[lc.LIBERO_EEF_POS], "robot0_eef_quat": wxyz_to_xyzw(hand),
           "robot0_gripper_qpos": ours[lc.LIBERO_GRIPPER_QPOS]}
    return ours, raw


def test_the_shipped_lerobot_libero_keymap_speaks_lerobots_libero_keys():
    from r2a.adapters.keymap import ADAPTER_DIR, load_adapter_config
    from r2a.adapters.lerobot_policy import to_lerobot_batch
    from r2a_core.images import resize_image

    config = load_adapter_config(ADAPTER_DIR / "lerobot_libero.yaml")
    assert config.checkpoint is not None and config.keymap.actions.model_dim == 7
    ours, _ = _libero_observation(size=128)  # the LIBERO bench configs' renders, area-resized to the model's 256
    batch = to_lerobot_batch(config.keymap.map_obs(ours))
    assert sorted(batch) == ["observation.images.image", "observation.images.image2", "observation.state", "task"]
    assert batch["observation.images.image"].shape == (1, 3, 256, 256) and batch["observation.state"].shape == (1, 8)
    # the model's view: our upright frame mirrored left-right
    mirrored = resize_image(ours[image_key("agentview")][:, ::-1], (256, 256), "area").transpose(2, 0, 1)[None]
    np.testing.assert_array_equal(batch["observation.images.image"], mirrored / np.float32(255))


@needs_venv
def test_the_lerobot_libero_keymap_feeds_what_lerobots_libero_pipeline_does(tmp_path):
    from r2a.adapters.keymap import ADAPTER_DIR, load_keymap
    from r2a.adapters.lerobot_policy import to_lerobot_batch

    ours, raw = _libero_observation()
    np.savez(tmp_path / "raw.npz", **raw)
    (tmp_path / "side.py").write_text(LEROBOT_LIBERO_SIDE)
    _run([PYTHON, tmp_path / "side.py", tmp_path / "raw.npz", tmp_path / "lerobot.npz"])
    theirs = dict(np.load(tmp_path / "lerobot.npz"))
    batch = to_lerobot_batch(load_keymap(ADAPTER_DIR / "lerobot_libero.yaml").map_obs(ours))
    assert sorted(theirs) == sorted(k for k in batch if k != "task")
    for key in ("observation.images.image", "observation.images.image2"):
        assert batch[key].dtype == theirs[key].dtype == np.float32
        np.testing.assert_array_equal(batch[key], theirs[key])
    assert batch["observation.state"].dtype == theirs["observation.state"].dtype == np.float32
    np.testing.assert_allclose(batch["observation.state"], theirs["observation.state"], rtol=0, atol=1e-6)
