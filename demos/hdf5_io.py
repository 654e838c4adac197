"""Demonstrations in the robomimic/LIBERO HDF5 layout.

Layout written (and read)::

    data                 attrs: env_args (JSON), problem_info (JSON, with language_instruction), total,
                                r2a_format, r2a_format_version, image_convention
      demo_<i>           attrs: num_samples, task, instruction, success, seed, meta (JSON)
        actions          (T, A) float
        states           (T, S) flattened MuJoCo state            (optional)
        robot_states     (T, 9) finger qpos, EE pos, EE quat wxyz (optional)
        label_chunks     (T, H, A) the labeller's own next H actions per state (optional; DAgger lookahead)
        rewards, dones   (T,)
        obs/agentview_rgb, obs/eye_in_hand_rgb   (T, H, W, 3) uint8
        obs/ee_pos (T,3), obs/ee_ori (T,3) axis-angle (LIBERO), obs/ee_quat (T,4) wxyz (r2a),
        obs/gripper_states (T,2) finger qpos (or (T,1) opening), obs/joint_states (T,7)
    mask/train, mask/valid   demo names

The reader also accepts robomimic's key names (``robot0_eef_pos``, ``robot0_eef_quat`` xyzw,
``agentview_image`` …). Files without ``image_convention = "opencv"`` (LIBERO, robomimic) store images
upside down, as OpenGL renders them; the reader flips those upright.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable

import h5py
import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.files import commit_file, temp_sibling
from r2a_core.rotations import axis_angle_to_quat, quat_to_axis_angle, xyzw_to_wxyz
from r2a_core.types import Episode, gripper_opening

log = logging.getLogger(__name__)

FORMAT = "r2a-hdf5"
FORMAT_VERSION = 1
#: canonical camera → (our/LIBERO key, robomimic key)
CAMERA_KEYS = {"agentview": ("agentview_rgb", "agentview_image"),
               "wrist": ("eye_in_hand_rgb", "robot0_eye_in_hand_image")}


#: ``Episode.meta`` keys that reading adds (where the episode came from); a writer of read episodes drops them
READ_META_KEYS = ("source", "demo", "env_args")


# ------------------------------------------------------------------------------------------------- writing
class HDF5EpisodeWriter:
    """Write episodes one at a time into a temp file; ``close()`` adds masks and renames it into place.

    Used as a context manager: on an exception the temp file is removed and nothing appears at ``path``.
    """

    def __init__(self, path: str | Path, env_args: dict[str, Any], problem_info: dict[str, Any] | None = None,
                 valid_every: int = 10, compression: str | None = "lzf",
                 extra_attrs: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # a unique name created by h5py itself, so the file gets the user's umask (mkstemp's is 0600)
        self._tmp = temp_sibling(self.path)
        self._file = h5py.File(self._tmp, "w-")
        self._data = self._file.create_group("data")
        self._data.attrs.update({"env_args": json.dumps(env_args), "r2a_format": FORMAT,
                                 "r2a_format_version": FORMAT_VERSION, "image_convention": "opencv"})
        self._data.attrs.update(extra_attrs or {})  # e.g. LIBERO's bddl_file_name / bddl_file_content
        self._problem_info = dict(problem_info or {})
        self._names: list[str] = []
        self._valid_every, self._compression = valid_every, compression

    def add(self, episode: Episode, index: int | None = None) -> str:
        """Append one episode as ``demo_<index>`` (default: the next free index)."""
        episode.validate(f"{self.path}: episode {index if index is not None else len(self._names)}")
        name = f"demo_{len(self._names) if index is None else index}"
        group = self._data.create_group(name)
        _write_episode(group, episode, self._compression)
        self._names.append(name)
        if not self._problem_info:
            self._problem_info = {"problem_name": episode.task, "language_instruction": episode.instruction}
        return name

    def close(self) -> Path:
        names = sorted(self._names, key=lambda n: int(n.split("_")[1]))
        valid = [n for i, n in enumerate(names) if self._valid_every and i % self._valid_every == self._valid_every - 1]
        train = [n for n in names if n not in valid]
        mask = self._file.create_group("mask")
        mask.create_dataset("train", data=np.array(train, dtype="S"))
        mask.create_dataset("valid", data=np.array(valid, dtype="S"))
        self._data.attrs["problem_info"] = json.dumps(self._problem_info)
        self._data.attrs["total"] = int(sum(self._data[n].attrs["num_samples"] for n in names))
        self._data.attrs["num_demos"] = len(names)
        self._file.close()
        return commit_file(self._tmp, self.path)

    def abort(self) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "HDF5EpisodeWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _write_episode(group: h5py.Group, ep: Episode, compression: str | None) -> None:
    def put(key: str, value: np.ndarray | None, compress: bool = False) -> None:
        if value is not None:
            group.create_dataset(key, data=value, compression=compression if compress else None)

    n = len(ep)
    group.attrs.update({"num_samples": n, "task": ep.task, "instruction": ep.instruction,
                        "success": bool(ep.success), "meta": json.dumps(ep.meta, default=str)})
    put("actions", ep.actions)
    put("states", ep.sim_states)
    put("robot_states", ep.robot_states)
    put("label_chunks", ep.label_chunks)
    rewards = np.zeros(n, dtype=np.float32)
    rewards[-1] = float(ep.success)
    put("rewards", rewards)
    put("dones", (np.arange(n) == n - 1).astype(np.uint8))
    put("obs/ee_pos", ep.ee_pos)
    put("obs/ee_quat", ep.ee_quat)
    put("obs/ee_ori", quat_to_axis_angle(ep.ee_quat).astype(ep.ee_quat.dtype))
    put("obs/gripper_states", ep.gripper_qpos if ep.gripper_qpos is not None else ep.gripper[:, None])
    put("obs/joint_states", ep.joint_pos)
    for cam, frames in ep.images.items():
        key = CAMERA_KEYS[cam][0] if cam in CAMERA_KEYS else f"{cam}_rgb"
        put(f"obs/{key}", frames, compress=True)


def write_hdf5(path: str | Path, episodes: Iterable[Episode], env_args: dict[str, Any],
               problem_info: dict[str, Any] | None = None) -> Path:
    """Write ``episodes`` atomically to ``path``."""
    with HDF5EpisodeWriter(path, env_args, problem_info) as writer:
        for ep in episodes:
            writer.add(ep)
    return Path(path)


# ------------------------------------------------------------------------------------------------- reading
def open_hdf5(path: str | Path) -> h5py.File:
    """Open a demonstration file, turning every failure into a one-line error naming the file."""
    path = Path(path)
    if not path.is_file():
        raise R2AInputError(f"{path}: no such file (expected a robomimic/LIBERO .hdf5 demonstration file)")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise R2AInputError(f"{path}: not a readable HDF5 file (truncated or corrupted?): {err}") from None
    if "data" not in f:
        f.close()
        raise R2AInputError(f"{path}: no 'data' group; expected the robomimic/LIBERO layout data/demo_<i>/...")
    version = f["data"].attrs.get("r2a_format_version")
    if version is not None and int(version) > FORMAT_VERSION:
        f.close()
        raise R2AInputError(f"{path}: r2a_format_version {int(version)} is newer than this reader "
                            f"(supports ≤ {FORMAT_VERSION}); upgrade r2a")
    return f


def demo_names(f: h5py.File) -> list[str]:
    """Demo groups in numeric order (demo_2 before demo_10)."""
    names = [n for n in f["data"].keys() if n.startswith("demo_")]
    try:
        return sorted(names, key=lambda n: int(n.split("_", 1)[1]))
    except ValueError:
        return sorted(names)


def file_attrs(f: h5py.File) -> dict[str, Any]:
    """``env_args`` and ``problem_info`` as dicts (empty when absent)."""
    out = {}
    for key in ("env_args", "problem_info"):
        raw = f["data"].attrs.get(key)
        try:
            out[key] = json.loads(raw) if raw is not None else {}
        except (TypeError, json.JSONDecodeError):
            raise R2AInputError(f"{f.filename}: data.attrs['{key}'] is not valid JSON") from None
    return out


def read_hdf5(path: str | Path, load_images: bool = True) -> list[Episode]:
    """Read every demo of a robomimic/LIBERO/r2a HDF5 file."""
    with open_hdf5(path) as f:
        attrs = file_attrs(f)
        upright = f["data"].attrs.get("image_convention") == "opencv"
        names = demo_names(f)
        if not names:
            raise R2AInputError(f"{path}: 'data' has no demo_<i> groups")
        return [_read_episode(f["data"][n], f"{path}:data/{n}", attrs, upright, load_images) for n in names]


def _field(group: h5py.Group, where: str, *keys: str, required: bool = True) -> np.ndarray | None:
    for key in keys:
        if key in group:
            return np.asarray(group[key][()])
    if required:
        raise R2AInputError(f"{where}: missing field '{keys[0]}' (expected one of {list(keys)})")
    return None


def _orientation(obs: h5py.Group, where: str) -> np.ndarray:
    quat = _field(obs, where, "ee_quat", required=False)
    if quat is not None:
        return quat
    xyzw = _field(obs, where, "robot0_eef_quat", required=False)
    if xyzw is not None:
        return xyzw_to_wxyz(xyzw)
    axis_angle = _field(obs, where, "ee_ori", required=False)
    if axis_angle is None or axis_angle.ndim != 2 or axis_angle.shape[1] != 3:
        raise R2AInputError(f"{where}/obs: missing EE orientation (expected 'ee_quat' (T,4) wxyz, "
                            f"'ee_ori' (T,3) axis-angle or 'robot0_eef_quat' (T,4) xyzw)")
    return axis_angle_to_quat(axis_angle).astype(axis_angle.dtype)


def _gripper(obs: h5py.Group, where: str) -> tuple[np.ndarray, np.ndarray | None]:
    g = _field(obs, where, "gripper_states", "robot0_gripper_qpos")
    if g.ndim == 2 and g.shape[1] == 2:
        return gripper_opening(g).astype(np.float32), g
    if g.ndim == 2 and g.shape[1] == 1:
        return g[:, 0], None
    raise R2AInputError(f"{where}/obs/gripper_states has shape {g.shape}, expected (T, 2) finger qpos or (T, 1)")


def _images(obs: h5py.Group, upright: bool) -> dict[str, np.ndarray]:
    images = {}
    for cam, keys in CAMERA_KEYS.items():
        for key in keys:
            if key in obs:
                frames = np.asarray(obs[key][()])
                images[cam] = frames if upright else np.ascontiguousarray(frames[:, ::-1, ::-1])
                break
    return images


def _read_episode(g: h5py.Group, where: str, attrs: dict[str, Any], upright: bool, load_images: bool) -> Episode:
    if "obs" not in g:
        raise R2AInputError(f"{where}: missing group 'obs'")
    obs = g["obs"]
    gripper, finger_qpos = _gripper(obs, where)
    problem, env_args = attrs["problem_info"], attrs["env_args"]
    meta = json.loads(g.attrs["meta"]) if "meta" in g.attrs else {}
    meta.update(dict(zip(READ_META_KEYS, (str(g.file.filename), g.name.split("/")[-1], env_args))))
    if "action_space" in env_args:
        meta.setdefault("action_space", env_args["action_space"])
    if not load_images:
        meta["image_shapes"] = {cam: list(obs[k].shape[1:]) for cam, keys in CAMERA_KEYS.items()
                                for k in keys if k in obs}
    episode = Episode(
        task=str(g.attrs.get("task", problem.get("problem_name", env_args.get("env_name", "unknown")))),
        instruction=str(g.attrs.get("instruction", problem.get("language_instruction", ""))),
        actions=_field(g, where, "actions"),
        ee_pos=_field(obs, f"{where}/obs", "ee_pos", "robot0_eef_pos"),
        ee_quat=_orientation(obs, f"{where}"),
        gripper=gripper,
        joint_pos=_field(obs, where, "joint_states", "robot0_joint_pos", required=False),
        gripper_qpos=finger_qpos,
        images=_images(obs, upright) if load_images else {},
        sim_states=_field(g, where, "states", required=False),
        robot_states=_field(g, where, "robot_states", required=False),
        label_chunks=_field(g, where, "label_chunks", required=False),
        success=bool(g.attrs.get("success", True)),
        meta=meta,
    )
    return episode.validate(where)
