"""Check that r2a's LeRobot adapter feeds a trained checkpoint what lerobot's own pipeline feeds it (issue 48).

Run it with the lerobot venv's Python, on the dataset the checkpoint was trained on and the demonstration files it
was exported from (the same files, in the same order)::

    HF_HUB_OFFLINE=1 .venv-lerobot/bin/python scripts/lerobot/check_adapter.py runs/lerobot/act \\
        DEMOS_SPATIAL.hdf5 DEMOS_OBJECT.hdf5 --dataset data/lerobot/libero_r2a

For ``--frames`` frames spread over the dataset it compares, frame by frame:

* the dataset's ``observation.state`` and images with what the adapter builds from our observation of the same
  recorded frame (must be equal, bit for bit);
* the action chunk of lerobot's own path, built here independently of the adapter (``LeRobotDataset[i]`` → the
  checkpoint's saved preprocessor from ``make_pre_post_processors`` → ``predict_action_chunk`` → its postprocessor)
  with the adapter's (``LeRobotPolicy.infer`` on our observation), within ``--atol``.

Prints one JSON line; exits 1 on a mismatch. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from export_dataset import CAMERAS, observation  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="lerobot checkpoint (pretrained_model) or lerobot-train output directory")
    parser.add_argument("sources", nargs="+", metavar="DEMOS.hdf5", help="the files the dataset was exported from")
    parser.add_argument("--dataset", required=True, type=Path, help="the exported LeRobot dataset root")
    parser.add_argument("--repo-id", default="r2a/libero_demos")
    parser.add_argument("--frames", type=int, default=8, help="frames compared, evenly spread (default: 8)")
    parser.add_argument("--atol", type=float, default=1e-4, help="largest |difference| of the chunks (default: 1e-4)")
    args = parser.parse_args(argv)

    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    from demos.dataset import load_episodes
    from r2a.adapters.lerobot_policy import LeRobotPolicy

    adapter = LeRobotPolicy(args.checkpoint)
    policy = get_policy_class(adapter.type).from_pretrained(str(adapter.path), local_files_only=True).eval()
    preprocess, postprocess = make_pre_post_processors(policy.config, pretrained_path=str(adapter.path))
    dataset = LeRobotDataset(args.repo_id, root=args.dataset)
    recorded = [(ep, t) for path in args.sources for ep in load_episodes(path) if ep.success for t in range(len(ep))]
    if len(recorded) != len(dataset):
        error = (f"{len(recorded)} successful frames in the sources, {len(dataset)} in {args.dataset}: not the files "
                 f"it was exported from (the same files in the same order)")
        print(json.dumps({"ok": False, "error": error}))
        return 1
    state_equal, images_equal, chunk_diff = True, True, 0.0
    for index in np.linspace(0, len(dataset) - 1, min(args.frames, len(dataset))).round().astype(int):
        item, (episode, t) = dataset[int(index)], recorded[int(index)]
        obs = observation(episode, t)
        mapped = adapter.keymap.map_obs(obs)
        state_equal &= np.array_equal(item["observation.state"].numpy(), mapped["observation.state"])
        for cam, key in CAMERAS.items():
            pixels = (item[key].numpy() * 255).round().astype(np.uint8).transpose(1, 2, 0)
            images_equal &= np.array_equal(pixels, episode.images[cam][t])
        batch = {k: v[None] if isinstance(v, torch.Tensor) else [v] for k, v in item.items()
                 if k.startswith("observation.") or k == "task"}
        policy.reset()
        adapter.reset()
        with torch.inference_mode():
            reference = postprocess(policy.predict_action_chunk(preprocess(batch)))[0].float().numpy()
        ours = adapter.infer(obs)["actions"]
        chunk_diff = max(chunk_diff, float(np.abs(ours - reference[:, :ours.shape[1]]).max()))
    ok = bool(state_equal and images_equal and chunk_diff <= args.atol)
    print(json.dumps({"ok": ok, "frames": int(min(args.frames, len(dataset))), "state_equal": bool(state_equal),
                      "images_equal": bool(images_equal), "chunk_max_abs_diff": chunk_diff,
                      "chunk_shape": list(ours.shape), "checkpoint": str(adapter.path)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
