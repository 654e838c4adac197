"""Write r2a demonstration files as one LeRobot v3 dataset, with lerobot's own dataset writer (issue 48).

Run it with the lerobot venv's Python (``make lerobot-venv``; r2a is installed there too)::

    HF_HUB_OFFLINE=1 .venv-lerobot/bin/python scripts/lerobot/export_dataset.py \\
        data/libero/libero_spatial_*.hdf5 data/libero/libero_object_*.hdf5 --out data/lerobot/libero_r2a

Every *successful* episode of the files (read with ``demos.dataset.load_episodes``, files in the order given, episodes
in file order) becomes one LeRobot episode, written by ``LeRobotDataset.create`` + ``add_frame`` + ``save_episode`` +
``finalize``. The features are named as LeRobot's LIBERO ports name them:

* ``observation.images.image`` — the agentview camera, ``observation.images.wrist_image`` — the wrist camera, both
  uint8 at the recorded size (128 px for our LIBERO demos) or ``--image-size``'s, upright as our simulator gives
  them at run time — written through the key map the adapter derives from the trained checkpoint
  (:func:`run_time_keymap`), so a resize is the adapter's own (area) and the policy trains on its run-time pixels;
* ``observation.state`` float32 (8) = ``[ee_pos, ee axis-angle, gripper finger qpos (2)]``, computed from each frame's
  observation by the LeRobot adapter's own key map (``r2a.adapters.lerobot_policy.STATE_LAYOUTS[8]``): the same
  numbers, bit for bit, that ``lerobot:`` / a served checkpoint feeds the policy at run time (the grip site's
  axis-angle; the two finger positions reconstructed from the normalized opening, as at run time);
* ``action`` float32 (7): the recorded OSC_POSE delta actions (gripper -1 open, +1 closed);
* the task string: the episode's instruction; ``fps`` 20 (LIBERO's control rate); ``robot_type`` ``panda``.

Images are embedded PNG (``use_videos=False``) unless ``--videos``: lossless, so the policy trains on the pixels it
will see at run time (mp4 is lossy), and a training batch decodes each frame from its own PNG in well under a
millisecond, where random access into a video decodes from the previous keyframe — slower on a CPU. The price is
size (measure with ``du``; a 128-px frame pair is tens of kB as PNG).

Deterministic: the same files in the same order give the same frames, states, actions, tasks and statistics, and
written to the same ``--out`` path the same bytes (the script runs itself under ``PYTHONHASHSEED=0``: lerobot writes
``meta/stats.json`` in a set's order; the datasets library's fingerprint in the parquet metadata hashes the image
paths under ``--out``). ``--out`` is replaced only with ``--overwrite``, and only once the new dataset is complete:
it is written to ``--out`` + ``.partial`` and renamed. No network is used.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # lerobot must never reach the hub from here

log = logging.getLogger("export_dataset")

FPS = 20
ROBOT_TYPE = "panda"
#: our camera → LeRobot's LIBERO feature key
CAMERAS = {"agentview": "observation.images.image", "wrist": "observation.images.wrist_image"}
STATE_NAMES = ["x", "y", "z", "axis_angle1", "axis_angle2", "axis_angle3", "gripper_left", "gripper_right"]
ACTION_NAMES = ["dx", "dy", "dz", "drx", "dry", "drz", "gripper"]


def features(image_size: tuple[int, int], use_videos: bool) -> dict[str, dict[str, Any]]:
    """LeRobot features of the export (LIBERO-port names; images (H, W, 3))."""
    kind = "video" if use_videos else "image"
    feats = {key: {"dtype": kind, "shape": (*image_size, 3), "names": ["height", "width", "channels"]}
             for key in CAMERAS.values()}
    feats["observation.state"] = {"dtype": "float32", "shape": (8,), "names": STATE_NAMES}
    feats["action"] = {"dtype": "float32", "shape": (7,), "names": ACTION_NAMES}
    return feats


def observation(episode: Any, t: int) -> dict[str, Any]:
    """Frame ``t`` of a recorded episode as the simulator's observation dict gives it to a policy at run time
    (state float32, images uint8 (H, W, 3), the instruction as the prompt)."""
    from r2a_core.types import PROMPT, STATE_EE_POS, STATE_EE_QUAT, STATE_GRIPPER, image_key

    obs: dict[str, Any] = {image_key(cam): frames[t] for cam, frames in episode.images.items()}
    obs.update({STATE_EE_POS: episode.ee_pos[t].astype(np.float32),
                STATE_EE_QUAT: episode.ee_quat[t].astype(np.float32),
                STATE_GRIPPER: np.float32(episode.gripper[t]), PROMPT: episode.instruction})
    return obs


def run_time_keymap(image_size: tuple[int, int]) -> Any:
    """The key map the LeRobot adapter derives from a checkpoint trained on this export
    (``default_lerobot_keymap`` of its features): the export writes what it returns, so training sees the pixels
    and the state the adapter feeds the policy at run time, resizing (area) included."""
    from r2a.adapters.lerobot_policy import default_lerobot_keymap

    visual = {key: {"type": "VISUAL", "shape": [3, *image_size]} for key in CAMERAS.values()}
    return default_lerobot_keymap({"input_features": {**visual, "observation.state": {"type": "STATE", "shape": [8]}},
                                   "output_features": {"action": {"type": "ACTION", "shape": [7]}}},
                                  where="LeRobot export")


def recorded_size(episode: Any) -> tuple[int, int]:
    return tuple(int(s) for s in episode.images["agentview"].shape[1:3])


def frames(episode: Any, image_size: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """The ``add_frame`` dicts of one episode, its images at ``image_size`` (None: as recorded)."""
    missing = [cam for cam in CAMERAS if cam not in episode.images]
    if missing:
        from r2a_core.errors import R2AInputError

        raise R2AInputError(f"episode of task {episode.task} has no {' or '.join(missing)} images (collect with "
                            f"cameras: r2a demos collect --image-size 128)")
    keymap = run_time_keymap(image_size or recorded_size(episode))
    actions = np.asarray(episode.actions, np.float32)
    mapped = (keymap.map_obs(observation(episode, t)) for t in range(len(episode)))
    return [{**{key: m[key] for key in CAMERAS.values()}, "observation.state": m["observation.state"],
             "action": actions[t], "task": episode.instruction} for t, m in enumerate(mapped)]


def export(sources: list[Path], out: Path, use_videos: bool = False, repo_id: str = "r2a/libero_demos",
           image_size: tuple[int, int] | None = None) -> dict:
    """Write every successful episode of ``sources`` to a LeRobot v3 dataset at ``out``, images at ``image_size``
    (None: as recorded); returns a summary."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from demos.dataset import load_episodes

    dataset, counts = None, {"episodes": 0, "frames": 0, "skipped_failed": 0}
    for path in sources:
        episodes = load_episodes(path)
        kept = [ep for ep in episodes if ep.success]
        counts["skipped_failed"] += len(episodes) - len(kept)
        log.info("%s: %d episodes, %d successful", path, len(episodes), len(kept))
        for ep in kept:
            if dataset is None:
                dataset = LeRobotDataset.create(repo_id=repo_id, fps=FPS, root=out, robot_type=ROBOT_TYPE,
                                                features=features(image_size or recorded_size(ep), use_videos),
                                                use_videos=use_videos)
            for frame in frames(ep, image_size):
                dataset.add_frame(frame)
            dataset.save_episode(parallel_encoding=False)
            counts["episodes"] += 1
            counts["frames"] += len(ep)
    if dataset is None:
        from r2a_core.errors import R2AInputError

        raise R2AInputError(f"no successful episode in {', '.join(map(str, sources))}: nothing to export")
    dataset.finalize()
    for path in out.rglob("*"):  # lerobot moves files out of mkdtemp() folders, leaving them mode 0600
        path.chmod(0o755 if path.is_dir() else 0o644)
    return counts


def main(argv: list[str] | None = None) -> int:
    if argv is None and os.environ.get("PYTHONHASHSEED") != "0":  # see the module docstring, "Deterministic"
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", type=Path, metavar="DEMOS.hdf5",
                        help="r2a demonstration files (or LeRobot datasets) in the order to write them")
    parser.add_argument("--out", required=True, type=Path, help="dataset root to create")
    parser.add_argument("--repo-id", default="r2a/libero_demos", help="the dataset's name in its metadata (local only)")
    parser.add_argument("--videos", action="store_true", help="mp4 (lossy, smaller) instead of embedded PNG")
    parser.add_argument("--image-size", type=int, default=None, metavar="PX",
                        help="square images of PX pixels, area-resized as the LeRobot adapter resizes them at run "
                             "time (default: as recorded)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    if args.out.exists() and not args.overwrite:
        parser.error(f"{args.out} exists (give --overwrite to replace it)")
    if args.image_size is not None and args.image_size <= 0:
        parser.error(f"--image-size must be a positive number of pixels, got {args.image_size}")
    size = None if args.image_size is None else (args.image_size, args.image_size)
    # written beside --out and moved there whole once finalized: an interrupted export leaves no dataset that looks
    # complete (the next run starts the partial one again); a fixed name keeps the bytes deterministic
    partial = args.out.with_name(args.out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    start = time.perf_counter()
    counts = export(args.sources, partial, use_videos=args.videos, repo_id=args.repo_id, image_size=size)
    if args.out.exists():
        shutil.rmtree(args.out)
    partial.rename(args.out)
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    log.info("wrote %s: %d episodes, %d frames (%d failed episodes skipped), %.1f MB, %.0f s", args.out,
             counts["episodes"], counts["frames"], counts["skipped_failed"], size / 1e6, time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
