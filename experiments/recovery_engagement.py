"""How often start-pose recovery engages at a graph's starts (issue 46): for each task and seed, the episode's first
pose (after the shift, if any) judged by `StartPoseRecovery.needed` with the absolute floor (the shipped settings)
and without it (`min_position_offset` = `min_rotation_offset` = 0, as before 2026-12-04). Reads start poses only:
no policy runs, nothing is fitted.

    MUJOCO_GL=egl .venv/bin/python experiments/recovery_engagement.py GRAPH_DIR \
        --tasks libero_spatial/0 libero_object/0 --seeds 100000:100050 [--shift robot_init:2]
"""
from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np


def main() -> None:
    from graph_builder.storage import load_graph
    from r2a.wrapper.config import RecoverySettings
    from r2a.wrapper.recovery import StartPoseRecovery
    from r2a_core.types import STATE_EE_POS, STATE_EE_QUAT, STATE_GRIPPER
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig
    from sim.shifts import ShiftHooks

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph")
    parser.add_argument("--tasks", nargs="+", required=True)
    parser.add_argument("--seeds", default="100000:100050", help="FIRST:END (end excluded)")
    parser.add_argument("--shift", default=None, help="FACTOR:LEVEL applied after reset (e.g. robot_init:2)")
    args = parser.parse_args()
    first, end = (int(x) for x in args.seeds.split(":"))
    graph = load_graph(args.graph)
    with_floor = RecoverySettings()
    no_floor = dataclasses.replace(with_floor, min_position_offset=0.0, min_rotation_offset=0.0)
    factor, _, level = (args.shift or "").partition(":")
    table = {}
    for task in args.tasks:
        sim = make_sim(SimConfig(task=task, cameras=(), image_size=64))
        space = sim.action_space
        judges = {"floor": StartPoseRecovery(graph, with_floor, space), "no_floor": StartPoseRecovery(graph, no_floor,
                                                                                                       space)}
        counts, offsets = {k: 0 for k in judges}, []
        for seed in range(first, end):
            obs = sim.reset(seed)
            hooks = ShiftHooks(factor or None, int(level) if level else 0)
            obs = hooks.after_reset(sim) or obs
            pose = (np.asarray(obs[STATE_EE_POS], np.float64), np.asarray(obs[STATE_EE_QUAT], np.float64),
                    float(obs[STATE_GRIPPER]))
            for name, judge in judges.items():
                counts[name] += bool(judge.needed(*pose)[0])
            _, target = judges["floor"].distance(*pose)
            pos_err, rot_err = judges["floor"].errors(pose[0], pose[1], target)
            offsets.append((float(np.linalg.norm(pos_err)), float(np.linalg.norm(rot_err))))
            hooks.close()
        sim.close()
        offsets_arr = np.asarray(offsets)
        table[task] = {"episodes": end - first, "engaged_with_floor": counts["floor"],
                       "engaged_without_floor": counts["no_floor"],
                       "nearest_start_offset_p50_mm_rad": [round(1000 * float(np.median(offsets_arr[:, 0])), 1),
                                                           round(float(np.median(offsets_arr[:, 1])), 3)],
                       "threshold": round(judges["floor"].threshold, 4)}
        print(task, table[task], flush=True)
    print(json.dumps({"graph": args.graph, "shift": args.shift, "seeds": args.seeds, "tasks": table}, indent=1))


if __name__ == "__main__":
    main()
