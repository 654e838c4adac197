"""``r2a demos``: collect scripted demonstrations, summarize demonstration files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from r2a_cli.outputs import add_output
from r2a_core.types import CAMERAS


def add_expert_argument(parser: argparse.ArgumentParser) -> None:
    """``--expert``: which scripted-expert variant labels the episodes (shared by collect and dagger)."""
    from demos.experts.scripted import EXPERT_VARIANTS

    parser.add_argument("--expert", choices=list(EXPERT_VARIANTS), default="scripted",
                        help="scripted-expert variant: 'scripted' centres a held cube within 8 mm above its base, "
                             "then lowers it (every shipped file); 'scripted-funnel' centres it while lowering")


def add_start_joint_noise_argument(parser: argparse.ArgumentParser) -> None:
    """``--start-joint-noise``: LIBERO training seeds' arm start spread (shared by collect and dagger)."""
    parser.add_argument("--start-joint-noise", type=float, default=0.0, metavar="RAD",
                        help="LIBERO: start each training-seed episode from the default arm pose plus a Gaussian "
                             "offset of this std (rad) on every joint, drawn from the seed (robosuite's default "
                             "initialization noise is 0.02; default 0: one start pose)")


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="record scripted-expert demonstrations into an HDF5 file")
    c.add_argument("--task", required=True, help="a task with a scripted expert: Lift, Stack, PickPlaceCan, "
                   "StackThree, or libero_spatial/N, libero_object/N (N 0-9; the libero extra)")
    c.add_argument("--episodes", type=int, required=True, help="number of episodes to record")
    add_output(c, "--out", kind="file", type=Path, required=True, help="output .hdf5 file (written atomically)")
    c.add_argument("--seed", type=int, default=0, help="seed of episode 0; episode i uses seed + i")
    c.add_argument("--workers", type=int, default=1, help="parallel simulator processes")
    c.add_argument("--image-size", type=int, default=128, help="square camera resolution in pixels")
    c.add_argument("--cameras", nargs="*", default=list(CAMERAS), help="cameras to record (none: state only)")
    c.add_argument("--perturb-noise", type=float, default=0.0,
                   help="DART: std of a correlated offset on the executed position command (1 = 5 cm); "
                        "the expert's action stays the label")
    c.add_argument("--perturb-drop", type=float, default=0.0,
                   help="DART: probability per episode of one forced gripper opening while holding an object")
    add_start_joint_noise_argument(c)
    add_expert_argument(c)
    r = sub.add_parser("rerender", help="render a file's camera images again from its recorded states "
                                        "(after a camera change), copying everything else")
    r.add_argument("source", type=Path, help="input .hdf5 with recorded 'states'")
    add_output(r, "--out", kind="file", type=Path, required=True, help="output .hdf5 file (written atomically)")
    r.add_argument("--cameras", nargs="+", default=None, help="cameras to render again (default: all recorded)")
    r.add_argument("--shift", metavar="FACTOR:LEVEL", default=None,
                   help="render under an observation-only shift factor (camera, light, background, noise, "
                        "language), e.g. camera:2; the states and actions stay the demo's")
    r.add_argument("--seed", type=int, default=0,
                   help="episode i draws the shift's parameters with seed + i (use seeds below 100000 for training)")
    i = sub.add_parser("info", help="print a JSON summary of an HDF5 file or LeRobot v3 dataset")
    i.add_argument("path", type=Path)
    s = sub.add_parser("image-stats", help="the demos' image statistics visual-OOD scores are measured against "
                                           "(the learned gate's image signal, observation harmonization)")
    s.add_argument("files", nargs="+", type=Path, help="demo files (HDF5 or LeRobot v3) recorded with cameras")
    add_output(s, "--out", kind="file", type=Path, required=True,
               help="output JSON (r2a.image-stats v1, written atomically)")
    s.add_argument("--cameras", nargs="+", default=["agentview"], help="cameras to describe (default: agentview)")
    s.add_argument("--stride", type=int, default=5, help="use every n-th frame (default: 5)")
    s.add_argument("--fit-clean", nargs="+", default=[], type=Path, metavar="FILE",
                   help="clean renders (training-split seeds) to fit the visual-OOD detector's threshold on")
    s.add_argument("--fit-shifted", nargs="+", default=[], type=Path, metavar="FILE",
                   help="renders under training-split shifts (r2a demos rerender --shift): the detector fires on light "
                        "and background, not on clean frames or the other factors; ROC-AUC per condition")
    o = sub.add_parser("image-ood", help="score image statistics' visual-OOD detector on renders it was not fitted "
                                         "on: ROC-AUC of clean vs each shift condition, and how often it fires")
    o.add_argument("stats", type=Path, help="image statistics (r2a demos image-stats --out)")
    o.add_argument("--clean", nargs="+", required=True, type=Path, metavar="FILE",
                   help="clean renders (training-split seeds)")
    o.add_argument("--shifted", nargs="+", required=True, type=Path, metavar="FILE",
                   help="the same demos re-rendered under shifts (r2a demos rerender --shift FACTOR:LEVEL)")
    o.add_argument("--stride", type=int, default=5, help="use every n-th frame (default: 5)")
    o.add_argument("--cameras", nargs="+", default=None,
                   help="score only these cameras (default: every camera of the stats; the shifted renders must "
                        "have re-rendered them)")
    add_output(o, "--out", kind="file", type=Path, default=None, help="also write the JSON record here (atomically)")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.command == "info":
        from demos.info import summarize

        print(json.dumps(summarize(args.path), indent=2))
        return 0
    if args.command == "image-stats":
        from demos.image_stats import write_image_stats

        result = write_image_stats(args.files, args.out, args.cameras, args.stride, args.fit_clean, args.fit_shifted)
        print(json.dumps({"out": str(args.out), **result}, indent=1))
        return 0
    if args.command == "image-ood":
        from demos.image_stats import evaluate_detector
        from r2a_core.files import write_json_atomic
        from r2a_core.visual_ood import load_image_stats

        record = evaluate_detector(load_image_stats(args.stats), args.clean, args.shifted, args.stride, args.cameras)
        if args.out is not None:
            write_json_atomic(args.out, record)
        print(json.dumps(record, indent=1))
        return 0
    if args.command == "rerender":
        from demos.rerender import rerender_file

        frames = rerender_file(args.source, args.out, tuple(args.cameras) if args.cameras else None,
                               shift=args.shift, seed=args.seed)
        print(json.dumps({"out": str(args.out), "frames": frames, "shift": args.shift}))
        return 0
    from demos.collect import CollectConfig, collect
    from demos.perturb import PerturbConfig

    perturb = PerturbConfig(noise=args.perturb_noise, drop_prob=args.perturb_drop)
    result = collect(CollectConfig(task=args.task, episodes=args.episodes, out=args.out, seed=args.seed,
                                   workers=args.workers, image_size=args.image_size, cameras=tuple(args.cameras),
                                   perturb=perturb, expert=args.expert,
                                   start_joint_noise=args.start_joint_noise))
    print(json.dumps(result.to_dict()))
    return 0
