import json
import os

import h5py
import numpy as np
import pytest

from demos.dataset import load_episodes
from demos.hdf5_io import FORMAT_VERSION, HDF5EpisodeWriter, read_hdf5, write_hdf5
from r2a_core.errors import R2AInputError
from r2a_core.rotations import quat_to_axis_angle, wxyz_to_xyzw
from tests.conftest import make_episode

FIELDS = ("actions", "ee_pos", "ee_quat", "gripper", "joint_pos", "gripper_qpos", "sim_states", "robot_states")


def assert_same_episode(a, b):
    assert (a.task, a.instruction, a.success) == (b.task, b.instruction, b.success)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.images.keys() == b.images.keys()
    for cam in a.images:
        np.testing.assert_array_equal(a.images[cam], b.images[cam])
    assert {k: b.meta[k] for k in a.meta} == a.meta


def test_round_trip_is_identical(tmp_path, episodes):
    path = write_hdf5(tmp_path / "demos.hdf5", episodes, env_args={"env_name": "Lift"})
    back = read_hdf5(path)
    assert len(back) == len(episodes)
    for a, b in zip(episodes, back):
        assert_same_episode(a, b)
    with h5py.File(path) as f:
        assert json.loads(f["data"].attrs["problem_info"])["language_instruction"] == "do lift"
        assert f["data"].attrs["total"] == sum(len(e) for e in episodes)
        names = set(f["mask/train"][()]) | set(f["mask/valid"][()])
        assert names == {b"demo_0", b"demo_1", b"demo_2"}
        assert f["data/demo_1/obs/agentview_rgb"].shape == (11, 16, 16, 3)
        np.testing.assert_allclose(f["data/demo_0/obs/ee_ori"][()], quat_to_axis_angle(episodes[0].ee_quat))


def test_load_without_images_reports_shapes(tmp_path, episodes):
    path = write_hdf5(tmp_path / "d.hdf5", episodes, env_args={})
    eps = load_episodes(path, load_images=False)
    assert eps[0].images == {} and eps[0].meta["image_shapes"]["wrist"] == [16, 16, 3]


def test_reads_robomimic_layout_and_flips_opengl_images(tmp_path):
    ep = make_episode(6)
    path = tmp_path / "robomimic.hdf5"
    with h5py.File(path, "w") as f:
        g = f.create_group("data/demo_0")
        f["data"].attrs["env_args"] = json.dumps({"env_name": "Lift"})
        g["actions"] = ep.actions
        g["obs/robot0_eef_pos"] = ep.ee_pos
        g["obs/robot0_eef_quat"] = wxyz_to_xyzw(ep.ee_quat)
        g["obs/robot0_gripper_qpos"] = ep.gripper_qpos
        g["obs/agentview_image"] = ep.images["agentview"][:, ::-1, ::-1]
    (back,) = read_hdf5(path)
    np.testing.assert_allclose(back.ee_quat, ep.ee_quat)
    np.testing.assert_array_equal(back.images["agentview"], ep.images["agentview"])
    assert back.task == "Lift" and back.success


def test_reads_libero_axis_angle_orientation(tmp_path):
    ep = make_episode(5, images=False)
    path = tmp_path / "libero.hdf5"
    with h5py.File(path, "w") as f:
        g = f.create_group("data/demo_0")
        f["data"].attrs["problem_info"] = json.dumps({"language_instruction": "open the drawer"})
        g["actions"] = ep.actions
        g["obs/ee_pos"] = ep.ee_pos
        g["obs/ee_ori"] = quat_to_axis_angle(ep.ee_quat)
        g["obs/gripper_states"] = ep.gripper_qpos
    (back,) = read_hdf5(path)
    np.testing.assert_allclose(back.ee_quat, ep.ee_quat, atol=1e-9)
    assert back.instruction == "open the drawer"


def test_missing_file(tmp_path):
    with pytest.raises(R2AInputError, match="no such file"):
        read_hdf5(tmp_path / "nope.hdf5")


def test_truncated_file(tmp_path, episodes):
    path = write_hdf5(tmp_path / "d.hdf5", episodes, env_args={})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(R2AInputError, match="truncated or corrupted"):
        read_hdf5(path)


def test_wrong_layout(tmp_path):
    path = tmp_path / "wrong.hdf5"
    with h5py.File(path, "w") as f:
        f["demos/actions"] = np.zeros((3, 7))
    with pytest.raises(R2AInputError, match="no 'data' group"):
        read_hdf5(path)


def test_missing_field_and_wrong_shape(tmp_path, episodes):
    path = write_hdf5(tmp_path / "d.hdf5", episodes[:1], env_args={})
    with h5py.File(path, "a") as f:
        del f["data/demo_0/obs/ee_pos"]
    with pytest.raises(R2AInputError, match="demo_0/obs: missing field 'ee_pos'"):
        read_hdf5(path)
    path = write_hdf5(tmp_path / "e.hdf5", episodes[:1], env_args={})
    with h5py.File(path, "a") as f:
        del f["data/demo_0/actions"]
        f["data/demo_0/actions"] = np.zeros((3, 7))
    with pytest.raises(R2AInputError, match="has 10 rows, expected 3"):
        read_hdf5(path)


def test_newer_format_version_is_rejected(tmp_path, episodes):
    path = write_hdf5(tmp_path / "d.hdf5", episodes[:1], env_args={})
    with h5py.File(path, "a") as f:
        f["data"].attrs["r2a_format_version"] = FORMAT_VERSION + 1
    with pytest.raises(R2AInputError, match="newer than this reader"):
        read_hdf5(path)


def test_failed_write_leaves_nothing(tmp_path, episodes):
    bad = make_episode(6)
    bad.gripper = bad.gripper[:3]
    with pytest.raises(R2AInputError):
        with HDF5EpisodeWriter(tmp_path / "out.hdf5", env_args={}) as writer:
            writer.add(episodes[0])
            writer.add(bad)
    assert list(tmp_path.iterdir()) == []


def test_unknown_source_kind(tmp_path):
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(R2AInputError, match="unknown demonstration format"):
        load_episodes(tmp_path / "x.txt")
    with pytest.raises(R2AInputError, match="not a LeRobot v3 dataset"):
        load_episodes(tmp_path)


def test_a_terminated_writer_leaves_no_temp_file(tmp_path):
    """SIGTERM (``timeout``, ``kill``) mid-write unwinds like Ctrl-C under the r2a command: nothing half-written."""
    import subprocess
    import sys

    script = (
        "import os, signal, time\n"
        "from r2a_core.interrupts import interrupt_on_sigterm\n"
        "from demos.hdf5_io import HDF5EpisodeWriter\n"
        "from tests.conftest import make_episode\n"
        "interrupt_on_sigterm()\n"
        f"with HDF5EpisodeWriter({str(tmp_path / 'demos.hdf5')!r}, {{'env_name': 'Lift'}}) as writer:\n"
        "    writer.add(make_episode(length=5))\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_written_files_follow_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        path = write_hdf5(tmp_path / "demos.hdf5", [make_episode(length=5)], env_args={"env_name": "Lift"})
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644


# ---------------------------------------------------------------------------- robomimic compatibility

OBS_KEYS = ("agentview_rgb", "eye_in_hand_rgb", "ee_pos", "ee_ori", "ee_quat", "gripper_states", "joint_states")


def test_our_files_have_the_layout_robomimic_reads(tmp_path, episodes):
    """What robomimic's SequenceDataset needs, checked with h5py (robomimic 0.3.0, utils/dataset.py): ``data``
    with ``env_args``, per demo ``num_samples`` and ``actions``/``rewards``/``dones`` and ``obs/*`` of that
    length, ``mask/<split>`` naming demos — and no ``next_obs``, which is why ``load_next_obs=False``."""
    path = write_hdf5(tmp_path / "demos.hdf5", episodes, env_args={"env_name": "Lift"})
    with h5py.File(path) as f:
        assert json.loads(f["data"].attrs["env_args"])["env_name"] == "Lift"
        for ep, name in zip(episodes, sorted(f["data"])):
            demo = f["data"][name]
            n = int(demo.attrs["num_samples"])
            assert n == len(ep.actions) and "next_obs" not in demo
            for key in ("actions", "rewards", "dones"):
                assert demo[key].shape[0] == n, key
            for key in OBS_KEYS:
                assert demo["obs"][key].shape[0] == n, key
        assert {n.decode() for n in f["mask/train"][()]} | {n.decode() for n in f["mask/valid"][()]} == set(f["data"])


def test_robomimic_sequence_dataset_reads_our_file(tmp_path, episodes):
    """robomimic's own reader, where it is installed (the Makefile installs it with --no-deps: its declared
    torchvision would pull a CUDA torch; the reader needs only torch, h5py, tqdm and termcolor)."""
    pytest.importorskip("robomimic")
    import robomimic.utils.obs_utils as obs_utils
    from robomimic.utils.dataset import SequenceDataset

    path = write_hdf5(tmp_path / "demos.hdf5", episodes, env_args={"env_name": "Lift"})
    low_dim = ["ee_pos", "ee_quat", "gripper_states", "joint_states"]
    obs_utils.initialize_obs_utils_with_obs_specs({"obs": {"low_dim": low_dim, "rgb": ["agentview_rgb"]}})
    dataset = SequenceDataset(hdf5_path=str(path), obs_keys=(*low_dim, "agentview_rgb"),
                              dataset_keys=("actions", "rewards", "dones"), seq_length=4, load_next_obs=False,
                              hdf5_cache_mode="low_dim", pad_seq_length=True)
    assert len(dataset) == sum(len(ep) for ep in episodes)
    item = dataset[0]
    np.testing.assert_allclose(item["actions"], episodes[0].actions[:4], rtol=1e-6)
    np.testing.assert_array_equal(item["obs"]["agentview_rgb"], episodes[0].images["agentview"][:4])
    assert item["obs"]["ee_quat"].shape == (4, 4)
    with pytest.raises(KeyError):  # robomimic's default expects next_obs, which LIBERO's layout lacks too
        SequenceDataset(hdf5_path=str(path), obs_keys=tuple(low_dim), dataset_keys=("actions",),
                        hdf5_cache_mode="low_dim")
