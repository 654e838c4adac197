"""How precisely does a built-in VLA checkpoint localize the StackThree cubes? Read from its auxiliary head.

The auxiliary head predicts each cube's position relative to the gripper from the same features the action head
uses, so its error bounds what the policy can know about a placement. Two probes, errors in millimetres:

    python experiments/aux_probe.py heldout r2a/assets/builtin_vla demos/StackThree.hdf5   # every 20th episode
    python experiments/aux_probe.py rollout builtin 100000 100005                          # the policy's own states

``heldout`` reports the near-placement phases of recorded frames; ``rollout`` runs the policy on benchmark seeds
and reports the same phases plus, over the last ``--last`` steps, where the cubes are and what the policy thinks.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

CUBES = ("cubeA", "cubeB", "cubeC")  # red, green, blue: red goes on green, blue on red


def _p(values: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1000, 1) if len(values) else None


def phase_errors(pred: np.ndarray, true: np.ndarray) -> dict:
    """``pred``/``true``: (N, 3 cubes, 3) positions relative to the gripper → localization error per phase."""
    out = {}
    for name, held, base in (("red_over_green", 0, 1), ("blue_over_red", 2, 0)):
        rise = true[:, held] - true[:, base]
        near = ((np.linalg.norm(true[:, held], axis=1) < 0.04) & (np.linalg.norm(rise[:, :2], axis=1) < 0.06)
                & (rise[:, 2] > 0.02) & (rise[:, 2] < 0.12))
        offset_error = np.linalg.norm((pred[near, held] - pred[near, base] - rise[near])[:, :2], axis=1)
        out[name] = {"n": int(near.sum()), "true_offset_p50": _p(np.linalg.norm(rise[near, :2], axis=1), 50),
                     "offset_error_p50": _p(offset_error, 50), "offset_error_p90": _p(offset_error, 90)}
    hand_over_blue = -true[:, 2]
    near = ((hand_over_blue[:, 2] > 0.03) & (hand_over_blue[:, 2] < 0.10)
            & (np.linalg.norm(hand_over_blue[:, :2], axis=1) < 0.06))
    error = np.linalg.norm((pred[near, 2] - true[near, 2])[:, :2], axis=1)
    out["hand_3_10cm_over_blue"] = {"n": int(near.sum()), "blue_error_p50": _p(error, 50),
                                    "blue_error_p90": _p(error, 90)}
    return out


def heldout(checkpoint: str, demo_file: str, every: int) -> dict:
    """The aux head on every ``every``-th episode of a demo file (the training hold-out rule)."""
    from r2a.vla.checkpoint import load_checkpoint
    from r2a.vla.features import time_feature
    from r2a.vla.text import PromptEmbedder
    from training.vla.data import load_training_arrays

    ckpt = load_checkpoint(checkpoint)
    cams = ckpt.model.config.cameras
    arrays, _ = load_training_arrays([demo_file], cams, ckpt.model.config.image_size, ckpt.model.config.chunk,
                                     workers=1)
    rows = np.flatnonzero(arrays.episode % every == every - 1)
    text = torch.from_numpy(PromptEmbedder(ckpt.prompts).embed_many(arrays.prompts))
    stats, preds = ckpt.stats, []
    with torch.inference_mode():
        for part in np.array_split(rows, max(1, len(rows) // 256)):
            images = {c: torch.from_numpy(arrays.images[c][part]).permute(0, 3, 1, 2).float() / 255 for c in cams}
            proprio = torch.from_numpy((arrays.proprio[part] - stats["proprio_mean"]) / stats["proprio_std"])
            time = torch.from_numpy(time_feature(arrays.step[part])[:, None])
            preds.append(ckpt.model(images, proprio.float(), time, text[arrays.prompt_index[part]])[1].numpy())
    pred = np.concatenate(preds).reshape(-1, 3, 3) / 10.0  # the aux target is trained in decimetres
    return {"checkpoint": checkpoint, "file": demo_file, "frames": len(rows),
            **phase_errors(pred, arrays.aux[rows].reshape(-1, 3, 3))}


def rollout(policy_spec: str, seed: int, sim, last: int) -> dict:
    """Run the policy on a StackThree benchmark seed, probing its aux head at every control step."""
    from demos.rollout import Step, run_episode
    from r2a.policies.registry import make_policy

    policy = make_policy(policy_spec, sim=sim, seed=seed)
    vla = getattr(policy, "inner", policy)
    pred, true, actions = [], [], []

    def probe(step: Step) -> None:
        pred.append(vla.predict(step.obs)[2])
        true.append(np.array([sim.object_pos(c) for c in CUBES]) - sim.ee_pos())
        actions.append(step.action)

    _, summary = run_episode(sim, policy, seed, record=False, n_action_steps=vla.n_action_steps, observer=probe)
    pred, true, actions = np.array(pred), np.array(true), np.array(actions)
    tail = slice(-last, None)
    return {"seed": seed, "success": bool(summary["success"]), "steps": len(actions), **phase_errors(pred, true),
            "end_true_mm": np.round(np.median(true[tail], axis=0) * 1000).astype(int).tolist(),
            "end_pred_mm": np.round(np.median(pred[tail], axis=0) * 1000).astype(int).tolist(),
            "end_action_mean": [round(float(a), 2) for a in actions[tail].mean(0)],
            "end_action_abs_mean": [round(float(a), 2) for a in np.abs(actions[tail]).mean(0)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="probe", required=True)
    held = sub.add_parser("heldout", help="recorded frames of a demo file")
    held.add_argument("checkpoint")
    held.add_argument("demo_file")
    held.add_argument("--every", type=int, default=20)
    roll = sub.add_parser("rollout", help="the policy's own StackThree episodes")
    roll.add_argument("policy", help="a builtin policy spec, e.g. builtin or builtin:runs/train/stage15")
    roll.add_argument("seeds", nargs="+", type=int)
    roll.add_argument("--last", type=int, default=150, help="control steps summarized at the episode's end")
    args = parser.parse_args()
    if args.probe == "heldout":
        print(json.dumps(heldout(args.checkpoint, args.demo_file, args.every)))
        return
    from sim.envs.robosuite_env import SimConfig, SimEnv

    sim = SimEnv(SimConfig(task="StackThree", image_size=64))
    for seed in args.seeds:
        print(json.dumps(rollout(args.policy, seed, sim, args.last)), flush=True)


if __name__ == "__main__":
    main()
