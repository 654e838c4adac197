"""Read LeRobot v3 datasets (parquet + ``meta/info.json``, images embedded or mp4) without lerobot installed.

Layout read (LeRobot ``codebase_version`` v3.x)::

    meta/info.json                     fps, features, data_path / video_path templates
    meta/tasks.parquet                 task string ↔ task_index (the string is the pandas index or a "task" column)
    meta/episodes/chunk-*/file-*.parquet   one row per episode: length, data/{chunk,file}_index,
                                       videos/<key>/{chunk_index,file_index,from_timestamp,to_timestamp}
    data/chunk-*/file-*.parquet        one row per frame: episode_index, frame_index, timestamp, task_index,
                                       observation.state, action, embedded images ({bytes, path} structs)
    videos/<key>/chunk-*/file-*.mp4    several episodes concatenated; an episode starts at its from_timestamp

Conventions of the returned :class:`~r2a_core.types.Episode` (see :mod:`r2a_core.types`):

* ``task`` is the slug of the task string (``"lift the red cube"`` → ``"lift_the_red_cube"``), a stable short id
  across datasets; ``instruction`` is the task string itself; ``success`` is ``True`` (LeRobot datasets hold
  demonstrations and record no outcome);
* ``ee_quat`` is wxyz with w ≥ 0, converted from the state's orientation (LIBERO ports store axis-angle);
* ``gripper`` is the normalized opening, from the two finger joint positions via
  :func:`r2a_core.types.gripper_opening` (those are kept in ``gripper_qpos``) or taken as a single value;
* images are ``(T, H, W, 3)`` uint8 under canonical camera names (``agentview``, ``wrist``);
* ``meta`` has ``source`` (the dataset root), ``format``, ``episode_index``, ``fps``, ``robot_type``.

Only pyarrow and numpy are needed for state and actions; decoding images (PNG/JPEG bytes or mp4) imports PyAV
lazily. Every problem with the input raises :class:`~r2a_core.errors.R2AInputError` naming the file or field.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.rotations import axis_angle_to_quat, canonical_quat, xyzw_to_wxyz
from r2a_core.types import Episode, gripper_opening

log = logging.getLogger(__name__)

FORMAT = "lerobot_v3"
INFO_PATH = "meta/info.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"

#: LIBERO ports (HuggingFaceVLA/libero, openpi's conversion): third-person and wrist camera.
DEFAULT_CAMERAS: dict[str, str] = {
    "agentview": "observation.images.image",
    "wrist": "observation.images.wrist_image",
}
#: feature keys tried, in order, when the default keys are absent (lerobot's LiberoEnv uses image/image2).
_AGENTVIEW_KEYS = ("observation.images.image", "observation.images.agentview",
                   "observation.images.agentview_image", "observation.images.front")
_WRIST_KEYS = ("observation.images.wrist_image", "observation.images.image2", "observation.images.wrist",
               "observation.images.eye_in_hand", "observation.images.robot0_eye_in_hand_image")
_ORIENTATION_WIDTH = {"axis_angle": 3, "quat_wxyz": 4, "quat_xyzw": 4}
_GRIPPER_WIDTH = {"finger_qpos": 2, "opening": 1}
_IMAGE_DTYPES = ("image", "video")


@dataclass(frozen=True)
class LeRobotMapping:
    """Which features hold what; the defaults fit LeRobot's LIBERO ports.

    Index ranges are ``(start, stop)`` into the state vector.
    """

    #: canonical camera name → image/video feature key; None = the LIBERO keys if present, else auto-detect
    cameras: dict[str, str] | None = None
    #: feature holding the proprioceptive state vector
    state_key: str = "observation.state"
    #: state indices of the end-effector position (x, y, z)
    ee_pos: tuple[int, int] = (0, 3)
    #: state indices of the end-effector orientation
    orientation: tuple[int, int] = (3, 6)
    #: how the orientation is stored: axis_angle | quat_wxyz | quat_xyzw
    orientation_kind: str = "axis_angle"
    #: state indices of the gripper
    gripper: tuple[int, int] = (6, 8)
    #: finger_qpos (two Panda finger joints) | opening (one value already normalized to [0, 1])
    gripper_kind: str = "finger_qpos"
    #: feature holding the actions
    action_key: str = "action"
    #: decode camera frames (False: state and actions only, no PyAV needed)
    load_images: bool = True
    #: rotate every frame by 180° (for data recorded from raw, upside-down LIBERO renders)
    rotate_images_180: bool = False

    def __post_init__(self) -> None:
        _check_range("ee_pos", self.ee_pos, 3)
        if self.orientation_kind not in _ORIENTATION_WIDTH:
            raise R2AInputError(f"LeRobotMapping.orientation_kind is {self.orientation_kind!r}, "
                                f"expected one of {sorted(_ORIENTATION_WIDTH)}")
        _check_range("orientation", self.orientation, _ORIENTATION_WIDTH[self.orientation_kind])
        if self.gripper_kind not in _GRIPPER_WIDTH:
            raise R2AInputError(f"LeRobotMapping.gripper_kind is {self.gripper_kind!r}, "
                                f"expected one of {sorted(_GRIPPER_WIDTH)}")
        _check_range("gripper", self.gripper, _GRIPPER_WIDTH[self.gripper_kind])

    @property
    def state_width(self) -> int:
        """Smallest state vector length the layout needs."""
        return max(self.ee_pos[1], self.orientation[1], self.gripper[1])

    def describe_layout(self) -> str:
        return (f"ee_pos {self.ee_pos[0]}:{self.ee_pos[1]}, orientation {self.orientation[0]}:"
                f"{self.orientation[1]} {self.orientation_kind}, gripper {self.gripper[0]}:{self.gripper[1]} "
                f"{self.gripper_kind}")


def _check_range(name: str, rng: tuple[int, int], width: int) -> None:
    start, stop = rng
    if start < 0 or stop - start != width:
        raise R2AInputError(f"LeRobotMapping.{name} is {rng}, expected (start, start + {width})")


@dataclass
class _Dataset:
    """What the metadata says: paths, fps, features, tasks and one row per episode."""

    root: Path
    info: dict[str, Any]
    tasks: dict[int, str]
    episodes: dict[str, np.ndarray]
    episodes_file: str
    cameras: dict[str, str] = field(default_factory=dict)

    @property
    def fps(self) -> float:
        return float(self.info["fps"])

    @property
    def features(self) -> dict[str, Any]:
        return self.info["features"]


def is_lerobot_v3_dir(path: str | Path) -> bool:
    """True if ``path`` holds a LeRobot dataset whose ``meta/info.json`` says codebase_version v3.x."""
    try:
        info = json.loads((Path(path) / INFO_PATH).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and _is_v3(info.get("codebase_version"))


def read_lerobot_v3(root: str | Path, mapping: LeRobotMapping | None = None) -> list[Episode]:
    """Read every episode of a LeRobot v3 dataset at ``root``, ordered by episode index."""
    mapping = mapping or LeRobotMapping()
    ds = _open_dataset(Path(root), mapping)
    frames = _read_frames(ds, mapping)
    videos = _VideoFiles(ds, mapping)
    episodes = []
    try:
        for row in range(len(ds.episodes["episode_index"])):
            episodes.append(_build_episode(ds, mapping, frames, videos, row))
    finally:
        videos.close()
    log.info("read %d episodes (%d frames) from %s", len(episodes), sum(map(len, episodes)), ds.root)
    return episodes


# --------------------------------------------------------------------------------------------- metadata


def _is_v3(version: Any) -> bool:
    return isinstance(version, str) and re.fullmatch(r"v?3(\.\d+)*", version) is not None


def _open_dataset(root: Path, mapping: LeRobotMapping) -> _Dataset:
    """Read and check ``meta/``: info, tasks, episodes; resolve the cameras."""
    if not root.is_dir():
        raise R2AInputError(f"{root}: not a directory, expected a LeRobot v3 dataset root")
    info = _read_info(root)
    tasks = _read_tasks(root)
    episodes, episodes_file = _read_episodes_meta(root)
    ds = _Dataset(root, info, tasks, episodes, episodes_file)
    _check_feature(ds, mapping.state_key, mapping.state_width, "the state layout " + mapping.describe_layout())
    _check_feature(ds, mapping.action_key, 1, "actions")
    ds.cameras = _resolve_cameras(ds, mapping)
    return ds


def _read_info(root: Path) -> dict[str, Any]:
    path = root / INFO_PATH
    if not path.is_file():
        raise R2AInputError(f"{path}: missing, expected a LeRobot v3 dataset "
                            f"(meta/info.json, meta/episodes/, data/)")
    try:
        info = json.loads(path.read_text())
    except ValueError as exc:
        raise R2AInputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(info, dict):
        raise R2AInputError(f"{path}: expected a JSON object")
    version = info.get("codebase_version")
    if not _is_v3(version):
        raise R2AInputError(
            f"{path}: codebase_version is {version!r}, expected v3.x (convert v2.1 datasets with lerobot's "
            f"`python -m lerobot.datasets.v30.convert_dataset_v21_to_v30`)")
    for key, kind in (("fps", (int, float)), ("features", dict), ("data_path", str)):
        if not isinstance(info.get(key), kind):
            raise R2AInputError(f"{path}: field {key!r} is missing or not a {kind}")
    return info


def _read_tasks(root: Path) -> dict[int, str]:
    """task_index → task string; lerobot 0.4 stores the string as the (unnamed) pandas index."""
    path = root / TASKS_PATH
    table = _read_parquet(path)
    if "task_index" not in table.column_names:
        raise R2AInputError(f"{path}: no column 'task_index', found {table.column_names}")
    text_col = _task_text_column(table)
    if text_col is None:
        raise R2AInputError(f"{path}: no task string column (expected 'task' or a pandas index), "
                            f"found {table.column_names}")
    indices = table.column("task_index").to_pylist()
    texts = table.column(text_col).to_pylist()
    return {int(i): str(t) for i, t in zip(indices, texts)}


def _task_text_column(table: Any) -> str | None:
    if "task" in table.column_names:
        return "task"
    pandas_meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
    for col in pandas_meta.get("index_columns", []):
        if isinstance(col, str) and col in table.column_names:
            return col
    return "__index_level_0__" if "__index_level_0__" in table.column_names else None


def _read_episodes_meta(root: Path) -> tuple[dict[str, np.ndarray], str]:
    """One row per episode from every ``meta/episodes/*/*.parquet`` (per-episode stats are skipped)."""
    import pyarrow as pa

    files = sorted((root / EPISODES_DIR).glob("*/*.parquet"))
    if not files:
        raise R2AInputError(f"{root / EPISODES_DIR}: no parquet files, expected "
                            f"meta/episodes/chunk-XXX/file-XXX.parquet (LeRobot v3)")
    tables = []
    for path in files:
        names = _parquet_schema(path).names
        tables.append(_read_parquet(path, [n for n in names if not n.startswith("stats/")]))
    table = pa.concat_tables(tables, promote_options="default")
    where = str(files[0].parent.parent)
    for col in ("episode_index", "length"):
        if col not in table.column_names:
            raise R2AInputError(f"{where}: no column {col!r}, found {table.column_names}")
    table = table.sort_by("episode_index")
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}, where


def _check_feature(ds: _Dataset, key: str, min_width: int, what: str) -> None:
    """The feature exists in info.json and is a numeric vector of at least ``min_width`` values."""
    info_path = ds.root / INFO_PATH
    feat = ds.features.get(key)
    if feat is None:
        numeric = [k for k, f in ds.features.items() if f.get("dtype") not in _IMAGE_DTYPES]
        raise R2AInputError(f"{info_path}: no feature {key!r} (needed for {what}), found {numeric}")
    shape = feat.get("shape") or []
    width = int(np.prod(shape)) if shape else 0
    if width < min_width:
        raise R2AInputError(f"{info_path}: feature {key!r} has shape {list(shape)}, "
                            f"expected at least {min_width} values for {what}")


def _resolve_cameras(ds: _Dataset, mapping: LeRobotMapping) -> dict[str, str]:
    """Canonical camera name → feature key, from the mapping or by auto-detection."""
    image_keys = [k for k, f in ds.features.items() if f.get("dtype") in _IMAGE_DTYPES]
    if mapping.cameras is not None:
        for cam, key in mapping.cameras.items():
            if key not in image_keys:
                raise R2AInputError(f"{ds.root / INFO_PATH}: no image/video feature {key!r} for camera "
                                    f"{cam!r}, found {image_keys}")
        return dict(mapping.cameras)
    cameras = auto_cameras(image_keys)
    if not cameras:
        log.warning("%s: no image or video features; episodes will have no images", ds.root)
    return cameras


def auto_cameras(image_keys: list[str]) -> dict[str, str]:
    """Known LIBERO-style keys first, then any ``*wrist*``/``*hand*`` key as wrist, the first other as agentview;
    remaining cameras keep the last part of their key."""
    cameras: dict[str, str] = {}
    for cam, candidates in (("agentview", _AGENTVIEW_KEYS), ("wrist", _WRIST_KEYS)):
        found = next((k for k in candidates if k in image_keys), None)
        if found:
            cameras[cam] = found
    for key in image_keys:
        if key in cameras.values():
            continue
        is_wrist = "wrist" in key or "hand" in key
        cam = "wrist" if is_wrist else "agentview"
        if cam in cameras:
            cam = key.rsplit(".", 1)[-1]
        if cam not in cameras:
            cameras[cam] = key
    return cameras


# --------------------------------------------------------------------------------------------- frames


def _read_parquet(path: Path, columns: list[str] | None = None) -> Any:
    import pyarrow.parquet as pq

    if not path.is_file():
        raise R2AInputError(f"{path}: missing, expected a parquet file of the LeRobot v3 dataset")
    try:
        return pq.read_table(path, columns=columns)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise R2AInputError(f"{path}: cannot read parquet ({type(exc).__name__}: {exc})") from None


def _parquet_schema(path: Path) -> Any:
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path)
    except Exception as exc:
        raise R2AInputError(f"{path}: cannot read parquet ({type(exc).__name__}: {exc})") from None


def _data_files(ds: _Dataset) -> list[Path]:
    """The data parquet files the episodes point at (``data_path`` template of info.json)."""
    ep = ds.episodes
    for col in ("data/chunk_index", "data/file_index"):
        if col not in ep:
            raise R2AInputError(f"{ds.episodes_file}: no column {col!r}, expected LeRobot v3 episode metadata")
    pairs = sorted(set(zip(ep["data/chunk_index"].tolist(), ep["data/file_index"].tolist())))
    return [ds.root / ds.info["data_path"].format(chunk_index=c, file_index=f) for c, f in pairs]


def _read_frames(ds: _Dataset, mapping: LeRobotMapping) -> dict[str, Any]:
    """Concatenate the needed columns of every data file, sorted by (episode_index, frame_index)."""
    import pyarrow as pa

    embedded = [k for k in ds.cameras.values() if ds.features[k]["dtype"] == "image"]
    wanted = ["episode_index", "frame_index", "timestamp", "task_index", mapping.state_key, mapping.action_key]
    wanted += embedded
    tables = []
    files = _data_files(ds)
    for path in files:
        names = _parquet_schema(path).names
        missing = [c for c in wanted if c not in names]
        if missing:
            raise R2AInputError(f"{path}: missing column(s) {missing}, found {names}")
        tables.append(_read_parquet(path, wanted))
    table = pa.concat_tables(tables).sort_by([("episode_index", "ascending"), ("frame_index", "ascending")])
    return {"table": table, "episode_index": table.column("episode_index").to_numpy(),
            "source": ", ".join(str(p) for p in files)}


def _vectors(column: Any, key: str, source: str) -> np.ndarray:
    """A list/fixed-size-list column → float array (N, D)."""
    import pyarrow as pa

    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not (pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type)
            or pa.types.is_large_list(col.type)):
        values = col.to_numpy(zero_copy_only=False).astype(np.float64)
        return values.reshape(-1, 1)
    flat = col.flatten().to_numpy(zero_copy_only=False)
    n = len(col)
    if n and flat.size % n:
        raise R2AInputError(f"{source}: column {key!r} has rows of different lengths, expected fixed-size vectors")
    return flat.reshape(n, -1 if n else 0)


# --------------------------------------------------------------------------------------------- episodes


def _build_episode(ds: _Dataset, mapping: LeRobotMapping, frames: dict[str, Any], videos: "_VideoFiles",
                   row: int) -> Episode:
    """One :class:`Episode` from the frames of episode ``ds.episodes[...][row]``."""
    ep_index = int(ds.episodes["episode_index"][row])
    lo, hi = np.searchsorted(frames["episode_index"], [ep_index, ep_index + 1])
    table = frames["table"].slice(lo, hi - lo)
    source = frames["source"]
    expected = int(ds.episodes["length"][row])
    if hi - lo != expected:
        raise R2AInputError(f"{source}: episode {ep_index} has {hi - lo} frames, "
                            f"expected {expected} ({ds.episodes_file} says so)")
    state = _vectors(table.column(mapping.state_key), mapping.state_key, source)
    if state.shape[1] < mapping.state_width:
        raise R2AInputError(f"{source}: {mapping.state_key!r} has {state.shape[1]} values per frame, expected at "
                            f"least {mapping.state_width} ({mapping.describe_layout()})")
    actions = _vectors(table.column(mapping.action_key), mapping.action_key, source).astype(np.float32)
    instruction = _episode_task(ds, table, ep_index)
    images = {cam: _episode_images(ds, mapping, table, videos, key, row) for cam, key in ds.cameras.items()
              if mapping.load_images}
    ee_pos, ee_quat, gripper, gripper_qpos = _split_state(state.astype(np.float64), mapping)
    episode = Episode(
        task=slugify(instruction), instruction=instruction, actions=actions, ee_pos=ee_pos, ee_quat=ee_quat,
        gripper=gripper, gripper_qpos=gripper_qpos, images=images, success=True,
        meta={"source": str(ds.root.resolve()), "format": FORMAT, "episode_index": ep_index, "fps": ds.fps,
              "robot_type": ds.info.get("robot_type"), "codebase_version": ds.info["codebase_version"],
              "image_shapes": {cam: list(ds.features[key].get("shape", [])) for cam, key in ds.cameras.items()}},
    )
    return episode.validate(f"{ds.root} episode {ep_index}")


def _split_state(state: np.ndarray, mapping: LeRobotMapping
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """State vectors → ee_pos, wxyz ee_quat, normalized gripper opening, finger qpos (or None)."""
    ee_pos = state[:, slice(*mapping.ee_pos)].copy()
    ori = state[:, slice(*mapping.orientation)]
    if mapping.orientation_kind == "axis_angle":
        ee_quat = axis_angle_to_quat(ori)
    elif mapping.orientation_kind == "quat_xyzw":
        ee_quat = canonical_quat(xyzw_to_wxyz(ori))
    else:
        ee_quat = canonical_quat(ori)
    grip = state[:, slice(*mapping.gripper)]
    if mapping.gripper_kind == "finger_qpos":
        return ee_pos, ee_quat, gripper_opening(grip), grip.copy()
    return ee_pos, ee_quat, np.clip(grip[:, 0], 0.0, 1.0), None


def _episode_task(ds: _Dataset, table: Any, ep_index: int) -> str:
    """The episode's task string (its first frame's task_index; LIBERO episodes have one task)."""
    indices = np.unique(table.column("task_index").to_numpy())
    if len(indices) > 1:
        log.warning("%s: episode %d has %d task indices; using the first frame's", ds.root, ep_index, len(indices))
    first = int(table.column("task_index")[0].as_py())
    if first not in ds.tasks:
        raise R2AInputError(f"{ds.root / TASKS_PATH}: no task with task_index {first} "
                            f"(used by episode {ep_index}), found {sorted(ds.tasks)}")
    return ds.tasks[first]


def slugify(text: str) -> str:
    """Short task id from a task string: lower case, runs of non-alphanumerics → ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "task"


# --------------------------------------------------------------------------------------------- images


def _import_av() -> Any:
    try:
        import av
    except ImportError:
        raise ImportError("decoding LeRobot images/videos needs PyAV: `pip install av` (or `pip install "
                          "'r2a[sim]'`), or read without images: LeRobotMapping(load_images=False)") from None
    return av


def _episode_images(ds: _Dataset, mapping: LeRobotMapping, table: Any, videos: "_VideoFiles", key: str,
                    row: int) -> np.ndarray:
    """(T, H, W, 3) uint8 frames of one camera: embedded bytes or decoded from its mp4."""
    if ds.features[key]["dtype"] == "image":
        frames = np.stack([_decode_embedded(ds.root, cell, key) for cell in table.column(key).to_pylist()])
    else:
        timestamps = table.column("timestamp").to_numpy().astype(np.float64)
        frames = videos.episode_frames(key, row, timestamps)
    return frames[:, ::-1, ::-1].copy() if mapping.rotate_images_180 else frames


def _decode_embedded(root: Path, cell: Any, key: str) -> np.ndarray:
    """One embedded image (a ``{bytes, path}`` struct of PNG/JPEG bytes) → (H, W, 3) uint8."""
    data = cell.get("bytes") if isinstance(cell, dict) else None
    if data is None:
        rel = cell.get("path") if isinstance(cell, dict) else None
        path = root / rel if rel else None
        if path is None or not path.is_file():
            raise R2AInputError(f"{root}: image {key!r} has no embedded bytes and no file {path}")
        data = path.read_bytes()
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        codec = "png"
    elif data[:2] == b"\xff\xd8":
        codec = "mjpeg"
    else:
        raise R2AInputError(f"{root}: image {key!r} is neither PNG nor JPEG (starts {data[:8]!r})")
    av = _import_av()
    ctx = av.CodecContext.create(codec, "r")  # a fresh context each time: reusing one corrupts PNG frames
    decoded = ctx.decode(av.Packet(data))
    if not decoded:
        raise R2AInputError(f"{root}: image {key!r}: could not decode {codec} bytes")
    return decoded[0].to_ndarray(format="rgb24")


class _VideoFiles:
    """Decodes episodes from the dataset's mp4 files, reading each file forward once when episodes come in order."""

    def __init__(self, ds: _Dataset, mapping: LeRobotMapping) -> None:
        self.ds = ds
        self.video_keys = [k for k in ds.cameras.values() if ds.features[k]["dtype"] == "video"]
        self.cursors: dict[Path, VideoCursor] = {}
        if self.video_keys and not isinstance(ds.info.get("video_path"), str):
            raise R2AInputError(f"{ds.root / INFO_PATH}: field 'video_path' is missing, expected the mp4 path "
                                f"template for video features {self.video_keys}")

    def episode_frames(self, key: str, row: int, timestamps: np.ndarray) -> np.ndarray:
        """Frames of video ``key`` at ``from_timestamp + timestamps`` for the episode in ``row``."""
        ep = self.ds.episodes
        cols = [f"videos/{key}/{name}" for name in ("chunk_index", "file_index", "from_timestamp")]
        for col in cols:
            if col not in ep:
                raise R2AInputError(f"{self.ds.episodes_file}: no column {col!r}, expected it for video {key!r}")
        chunk, file, start = (ep[c][row] for c in cols)
        path = self.ds.root / self.ds.info["video_path"].format(video_key=key, chunk_index=int(chunk),
                                                              file_index=int(file))
        cursor = self.cursors.get(path)
        if cursor is None:
            cursor = self.cursors[path] = VideoCursor(path, tolerance=0.5 / self.ds.fps)
        return np.stack(cursor.frames_at(float(start) + timestamps))

    def close(self) -> None:
        for cursor in self.cursors.values():
            cursor.close()
        self.cursors.clear()


class VideoCursor:
    """Forward-only decoder of one mp4 that returns the frames nearest requested times (reopens to go back)."""

    def __init__(self, path: Path, tolerance: float) -> None:
        if not path.is_file():
            raise R2AInputError(f"{path}: missing, expected an mp4 file of the LeRobot v3 dataset")
        self.path = path
        self.tolerance = tolerance
        self.container: Any = None
        self.frames: Iterator[Any] = iter(())
        self.pending: Any = None
        self.last_time = np.inf

    def _open(self) -> None:
        av = _import_av()
        self.close()
        try:
            self.container = av.open(str(self.path))
            stream = self.container.streams.video[0]
        except (av.error.FFmpegError, IndexError) as exc:
            raise R2AInputError(f"{self.path}: cannot decode video ({exc})") from None
        self.frames = self.container.decode(stream)
        self.pending = None
        self.last_time = -np.inf

    def _next(self) -> Any:
        if self.pending is None:
            av = _import_av()
            try:
                self.pending = next(self.frames, None)
            except av.error.FFmpegError as exc:
                raise R2AInputError(f"{self.path}: cannot decode video ({exc})") from None
        return self.pending

    def frames_at(self, times: np.ndarray) -> list[np.ndarray]:
        """Decoded (H, W, 3) uint8 frames whose presentation time is within tolerance of each of ``times``."""
        if len(times) and times[0] < self.last_time - self.tolerance:
            self._open()
        out = []
        for t in times:
            frame = self._next()
            while frame is not None and frame.time is not None and frame.time < t - self.tolerance:
                self.pending = None
                frame = self._next()
            if frame is None or frame.time is None or abs(frame.time - t) > self.tolerance:
                found = "the end of the video" if frame is None else f"a frame at {frame.time}s"
                raise R2AInputError(f"{self.path}: no frame at {t:.4f}s (found {found}), expected one every "
                                    f"{2 * self.tolerance:g}s as meta/episodes' timestamps say")
            out.append(frame.to_ndarray(format="rgb24"))
            self.last_time = float(frame.time)
        return out

    def close(self) -> None:
        if self.container is not None:
            self.container.close()
            self.container = None
