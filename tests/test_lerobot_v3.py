"""The LeRobot v3 reader on fixtures written by the real lerobot 0.4.4 (tests/fixtures/lerobot/README.md).

The expected values re-implement the formulas of tests/fixtures/lerobot/make_fixture.py; lerobot is not needed.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demos.lerobot_v3 import (
    LeRobotMapping,
    auto_cameras,
    is_lerobot_v3_dir,
    read_lerobot_v3,
    slugify,
)
from r2a_core.errors import R2AInputError
from r2a_core.rotations import quat_to_matrix

FIXTURES = Path(__file__).parent / "fixtures" / "lerobot"
IMAGES = FIXTURES / "tiny_images"
VIDEO = FIXTURES / "tiny_video"
LENGTHS = [12, 9, 15]
TASKS = ["lift the red cube", "stack the red cube on the green cube", "lift the red cube"]
BLUE = {"agentview": 200, "wrist": 40}
DATA_FILE = "data/chunk-000/file-000.parquet"


# ------------------------------------------------------------------------------- the fixture's formulas


def expected_state(e: int, t: int) -> np.ndarray:
    f = 0.04 - 0.002 * t
    return np.array([0.1 * e + 0.01 * t, 0.2 - 0.01 * t, 0.9 + 0.005 * t,
                     2.0 + 0.02 * t, 0.1 * e, -0.05 * t, f, -f], dtype=np.float32)


def expected_action(e: int, t: int, length: int) -> np.ndarray:
    return np.array([e + 0.01 * t + 0.001 * j for j in range(6)] + [-1.0 if t < length / 2 else 1.0],
                    dtype=np.float32)


def expected_image(e: int, t: int, blue: int) -> np.ndarray:
    img = np.empty((32, 32, 3), dtype=np.uint8)
    img[:] = (60 + 60 * e, 10 * t, blue)
    img[:8, :8] = 255
    return img


def rodrigues(v: np.ndarray) -> np.ndarray:
    """Rotation matrix of an axis-angle vector, written independently of r2a_core.rotations."""
    theta = np.linalg.norm(v)
    k = v / theta
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(theta) * kx + (1 - np.cos(theta)) * kx @ kx


# ------------------------------------------------------------------------------- reading the fixtures


@pytest.fixture(scope="module")
def image_episodes():
    return read_lerobot_v3(IMAGES)


@pytest.fixture(scope="module")
def video_episodes():
    pytest.importorskip("av")
    return read_lerobot_v3(VIDEO)


@pytest.mark.parametrize("name", ["image_episodes", "video_episodes"])
def test_episodes_tasks_and_meta(name, request):
    episodes = request.getfixturevalue(name)
    root = IMAGES if name == "image_episodes" else VIDEO
    assert [len(ep) for ep in episodes] == LENGTHS
    assert [ep.instruction for ep in episodes] == TASKS
    assert [ep.task for ep in episodes] == [slugify(t) for t in TASKS]
    assert episodes[1].task == "stack_the_red_cube_on_the_green_cube"
    for e, ep in enumerate(episodes):
        assert ep.success is True
        assert ep.meta["episode_index"] == e
        assert ep.meta["fps"] == 10
        assert ep.meta["source"] == str(root.resolve())
        assert ep.meta["format"] == "lerobot_v3"
        assert ep.joint_pos is None


@pytest.mark.parametrize("name", ["image_episodes", "video_episodes"])
def test_state_and_actions_exact(name, request):
    for e, ep in enumerate(request.getfixturevalue(name)):
        n = len(ep)
        state = np.stack([expected_state(e, t) for t in range(n)]).astype(np.float64)
        actions = np.stack([expected_action(e, t, n) for t in range(n)])
        assert ep.actions.dtype == np.float32 and ep.actions.shape == (n, 7)
        np.testing.assert_array_equal(ep.actions, actions)
        np.testing.assert_array_equal(ep.ee_pos, state[:, :3])
        np.testing.assert_array_equal(ep.gripper_qpos, state[:, 6:8])
        np.testing.assert_allclose(ep.gripper, 1 - 0.05 * np.arange(n), atol=1e-6)


def test_ee_quat_matches_axis_angle(image_episodes):
    for e, ep in enumerate(image_episodes):
        assert ep.ee_quat.shape == (len(ep), 4)
        np.testing.assert_allclose(np.linalg.norm(ep.ee_quat, axis=1), 1.0, atol=1e-12)
        assert (ep.ee_quat[:, 0] >= 0).all()  # canonical wxyz, w first
        for t in range(len(ep)):
            axis_angle = expected_state(e, t)[3:6].astype(np.float64)
            np.testing.assert_allclose(quat_to_matrix(ep.ee_quat[t]), rodrigues(axis_angle), atol=1e-9)


def test_embedded_images_exact(image_episodes):
    for e, ep in enumerate(image_episodes):
        assert sorted(ep.images) == ["agentview", "wrist"]
        for cam, blue in BLUE.items():
            frames = ep.images[cam]
            assert frames.shape == (len(ep), 32, 32, 3) and frames.dtype == np.uint8
            for t in range(len(ep)):
                np.testing.assert_array_equal(frames[t], expected_image(e, t, blue))


def test_video_frames_approximate_and_upright(video_episodes):
    for e, ep in enumerate(video_episodes):
        assert sorted(ep.images) == ["agentview", "wrist"]
        for cam, blue in BLUE.items():
            frames = ep.images[cam]
            assert frames.shape == (len(ep), 32, 32, 3) and frames.dtype == np.uint8
            for t in range(len(ep)):
                colour = frames[t, 12:, 12:].reshape(-1, 3).mean(axis=0)  # away from the white block's edge
                np.testing.assert_allclose(colour, (60 + 60 * e, 10 * t, blue), atol=8)
                assert frames[t, 1:7, 1:7].mean() > 230  # the white block is top-left: upright, not mirrored
                assert frames[t, 1:7, -7:-1].mean() < 230 and frames[t, -7:-1, 1:7].mean() < 230


def test_rotate_180_and_no_images(image_episodes):
    rotated = read_lerobot_v3(IMAGES, LeRobotMapping(rotate_images_180=True))
    np.testing.assert_array_equal(rotated[0].images["wrist"], image_episodes[0].images["wrist"][:, ::-1, ::-1])
    plain = read_lerobot_v3(VIDEO, LeRobotMapping(load_images=False))
    assert [len(ep) for ep in plain] == LENGTHS and all(ep.images == {} for ep in plain)


def test_explicit_camera_map_and_single_gripper_value():
    mapping = LeRobotMapping(cameras={"front": "observation.images.image"}, gripper=(6, 7), gripper_kind="opening")
    episodes = read_lerobot_v3(IMAGES, mapping)
    assert list(episodes[0].images) == ["front"]
    assert episodes[0].gripper_qpos is None
    np.testing.assert_allclose(episodes[0].gripper, [expected_state(0, t)[6] for t in range(12)])


def test_auto_cameras():
    assert auto_cameras(["observation.images.image", "observation.images.image2"]) == {
        "agentview": "observation.images.image", "wrist": "observation.images.image2"}
    assert auto_cameras(["observation.images.cam_high", "observation.images.cam_left_wrist",
                          "observation.images.cam_low"]) == {
        "agentview": "observation.images.cam_high", "wrist": "observation.images.cam_left_wrist",
        "cam_low": "observation.images.cam_low"}
    assert auto_cameras([]) == {}


def test_is_lerobot_v3_dir(tmp_path):
    assert is_lerobot_v3_dir(IMAGES) and is_lerobot_v3_dir(VIDEO)
    assert not is_lerobot_v3_dir(tmp_path)
    old = _copy(IMAGES, tmp_path)
    _edit_info(old, lambda info: info.update(codebase_version="v2.1"))
    assert not is_lerobot_v3_dir(old)


# ------------------------------------------------------------------------------- bad input


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _edit_info(root: Path, edit) -> None:
    path = root / "meta" / "info.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info))


def _rewrite_data(root: Path, edit) -> None:
    path = root / DATA_FILE
    pq.write_table(edit(pq.read_table(path)), path)


def _expect_error(root: Path, *fragments: str, mapping: LeRobotMapping | None = None) -> str:
    with pytest.raises(R2AInputError) as info:
        read_lerobot_v3(root, mapping)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def test_missing_info_json(tmp_path):
    root = _copy(IMAGES, tmp_path)
    (root / "meta" / "info.json").unlink()
    _expect_error(root, "meta/info.json", "missing", "LeRobot v3")


def test_not_a_directory(tmp_path):
    _expect_error(tmp_path / "nope", "not a directory")


def test_wrong_codebase_version(tmp_path):
    root = _copy(IMAGES, tmp_path)
    _edit_info(root, lambda info: info.update(codebase_version="v2.1"))
    _expect_error(root, "info.json", "codebase_version is 'v2.1'", "expected v3.x", "convert_dataset_v21_to_v30")


def test_missing_feature_in_info(tmp_path):
    root = _copy(IMAGES, tmp_path)
    _edit_info(root, lambda info: info["features"].pop("observation.state"))
    _expect_error(root, "info.json", "no feature 'observation.state'", "state layout")


def test_missing_action_column(tmp_path):
    root = _copy(IMAGES, tmp_path)
    _rewrite_data(root, lambda table: table.drop_columns(["action"]))
    _expect_error(root, "file-000.parquet", "missing column(s) ['action']")


def test_state_too_short_in_data(tmp_path):
    root = _copy(IMAGES, tmp_path)

    def truncate(table):
        state = np.stack(table.column("observation.state").to_pylist())[:, :6].astype(np.float32)
        short = pa.FixedSizeListArray.from_arrays(pa.array(state.ravel()), 6)
        return table.set_column(table.schema.get_field_index("observation.state"), "observation.state", short)

    _rewrite_data(root, truncate)
    _expect_error(root, "file-000.parquet", "'observation.state' has 6 values per frame", "at least 8")


def test_state_too_short_for_layout():
    mapping = LeRobotMapping(gripper=(8, 10))
    _expect_error(IMAGES, "info.json", "'observation.state' has shape [8]", "at least 10", mapping=mapping)


def test_unknown_camera_key():
    mapping = LeRobotMapping(cameras={"agentview": "observation.images.top"})
    _expect_error(IMAGES, "info.json", "'observation.images.top'", "agentview", mapping=mapping)


def test_missing_data_parquet(tmp_path):
    root = _copy(IMAGES, tmp_path)
    (root / DATA_FILE).unlink()
    _expect_error(root, str(root / DATA_FILE), "missing")


def test_missing_tasks_parquet(tmp_path):
    root = _copy(IMAGES, tmp_path)
    (root / "meta" / "tasks.parquet").unlink()
    _expect_error(root, "tasks.parquet", "missing")


def test_missing_episodes_meta(tmp_path):
    root = _copy(IMAGES, tmp_path)
    shutil.rmtree(root / "meta" / "episodes")
    _expect_error(root, "meta/episodes", "no parquet files")


def test_missing_mp4(tmp_path):
    pytest.importorskip("av")
    root = _copy(VIDEO, tmp_path)
    mp4 = root / "videos" / "observation.images.wrist_image" / "chunk-000" / "file-000.mp4"
    mp4.unlink()
    _expect_error(root, str(mp4), "missing")
    assert len(read_lerobot_v3(root, LeRobotMapping(load_images=False))) == 3  # state/actions still readable


def test_truncated_video(tmp_path):
    pytest.importorskip("av")
    root = _copy(VIDEO, tmp_path)
    path = next((root / "meta" / "episodes").glob("*/*.parquet"))
    table = pq.read_table(path)
    col = "videos/observation.images.image/from_timestamp"
    shifted = pa.array([t + 10.0 for t in table.column(col).to_pylist()])
    pq.write_table(table.set_column(table.schema.get_field_index(col), col, shifted), path)
    _expect_error(root, "file-000.mp4", "no frame at 10.0000s", "end of the video")


def test_video_cursor_rewinds(video_episodes):
    from demos.lerobot_v3 import VideoCursor

    cursor = VideoCursor(VIDEO / "videos" / "observation.images.image" / "chunk-000" / "file-000.mp4", 0.05)
    try:
        late = cursor.frames_at(np.array([2.1, 2.2]))  # episode 2, frames 0-1
        early = cursor.frames_at(np.array([0.0]))  # back to episode 0: reopens the file
    finally:
        cursor.close()
    np.testing.assert_array_equal(late[1], video_episodes[2].images["agentview"][1])
    np.testing.assert_array_equal(early[0], video_episodes[0].images["agentview"][0])


def test_corrupt_mp4(tmp_path):
    pytest.importorskip("av")
    root = _copy(VIDEO, tmp_path)
    mp4 = root / "videos" / "observation.images.image" / "chunk-000" / "file-000.mp4"
    mp4.write_bytes(b"not an mp4" * 10)
    _expect_error(root, str(mp4), "cannot decode video")


def test_bad_mapping():
    with pytest.raises(R2AInputError, match="orientation_kind"):
        LeRobotMapping(orientation_kind="euler")
    with pytest.raises(R2AInputError, match=r"orientation is \(3, 6\), expected \(start, start \+ 4\)"):
        LeRobotMapping(orientation_kind="quat_wxyz")


def test_missing_pyav_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(ImportError, match="pip install av"):
        read_lerobot_v3(IMAGES)
