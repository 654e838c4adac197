"""Where a StackThree episode ends up: cube offsets, hand and gripper over its last steps.

Diagnostic for failed clean-benchmark episodes (run it on the seeds a bench run lists as failures):
    python experiments/trace_stackthree.py --policy builtin 100000 100005
Cubes: red (cubeA) goes on green (cubeB), then blue (cubeC) on red. Distances are printed in millimetres as
p10/p50/p90 over the last ``--last`` control steps.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from demos.rollout import Step, run_episode
from eval.diagnostics import register_diagnostics
from r2a.policies.registry import make_policy
from sim.envs.robosuite_env import SimConfig, SimEnv


def _mm(values: np.ndarray) -> list[float]:
    return np.round(np.percentile(values, [10, 50, 90]) * 1000, 1).tolist()


def trace(sim: SimEnv, policy_spec: str, seed: int, last: int, n_action_steps: int) -> dict:
    """Roll the policy out from ``seed`` and summarize the cube/hand geometry of its final ``last`` steps."""
    rows = []

    def record(step: Step) -> None:
        rows.append(np.concatenate([sim.object_pos(c) for c in ("cubeA", "cubeB", "cubeC")] +
                                   [sim.ee_pos(), [step.action[6]]]))

    policy = make_policy(policy_spec, sim=sim, seed=seed)
    _, summary = run_episode(sim, policy, seed, record=False, n_action_steps=n_action_steps, observer=record)
    t = np.array(rows)[-last:]
    red, green, blue, hand = t[:, 0:3], t[:, 3:6], t[:, 6:9], t[:, 9:12]
    return {"seed": seed, "success": bool(summary["success"]), "steps": len(rows),
            "red_over_green_xy_mm": _mm(np.linalg.norm(red[:, :2] - green[:, :2], axis=1)),
            "red_above_green_mm": _mm(red[:, 2] - green[:, 2]),
            "blue_over_red_xy_mm": _mm(np.linalg.norm(blue[:, :2] - red[:, :2], axis=1)),
            "blue_above_red_mm": _mm(blue[:, 2] - red[:, 2]),
            "hand_to_blue_xy_mm": _mm(np.linalg.norm(hand[:, :2] - blue[:, :2], axis=1)),
            "hand_above_blue_mm": _mm(hand[:, 2] - blue[:, 2]),
            "gripper_command_mean": round(float(t[:, 12].mean()), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seeds", nargs="+", type=int)
    parser.add_argument("--policy", default="builtin")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--n-action-steps", type=int, default=8)
    parser.add_argument("--last", type=int, default=150, help="control steps summarized at the episode's end")
    args = parser.parse_args()
    register_diagnostics()  # --policy expert, or an earlier variant, traces too
    sim = SimEnv(SimConfig(task="StackThree", image_size=args.image_size))
    for seed in args.seeds:
        print(json.dumps(trace(sim, args.policy, seed, args.last, args.n_action_steps)), flush=True)


if __name__ == "__main__":
    main()
