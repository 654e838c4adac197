"""``r2a policy``: train the built-in VLA, collect DAgger data for it, describe a checkpoint, list policies, serve a
policy over websockets, check observation harmonization offline."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from r2a.observation.harmonize import HarmonizeSettings
from r2a_cli.demos import add_expert_argument, add_start_joint_noise_argument
from r2a_cli.outputs import add_output
from r2a_cli.serve import add_serve_arguments, serve
from r2a_core.types import CAMERAS
from training.vla.config import TrainConfig

HARMONIZE_STATS = HarmonizeSettings().image_stats

log = logging.getLogger(__name__)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train the built-in VLA on demonstration files",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="config fields (--set FIELD=VALUE):\n" + TrainConfig.help_text() + "\n")
    train.add_argument("--config", default=None, help="training YAML (e.g. configs/policy/builtin.yaml)")
    train.add_argument("--demos", nargs="+", required=True, help="HDF5 files or LeRobot v3 directories")
    train.add_argument("--val-demos", nargs="+", default=None,
                       help="files held out for the validation loss instead of every holdout_every-th episode")
    add_output(train, "--out", kind="dir", required=True,
               help="checkpoint directory to write (atomically; a run stopped before its last step resumes from it, "
                    "same config and demos)")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a config field (value parsed as YAML); repeatable")
    train.add_argument("--wandb", choices=["offline", "online", "disabled"], default="disabled",
                       help="log to Weights & Biases (offline writes under the output's parent directory)")
    dagger = sub.add_parser("dagger", help="record on-policy data: a policy drives, the scripted expert labels "
                                           "every state it reaches (DAgger); train on the file with the demos")
    dagger.add_argument("--policy", required=True, help="the learner, e.g. builtin:path/to/ckpt")
    dagger.add_argument("--task", required=True, help="built-in task with a scripted expert")
    dagger.add_argument("--episodes", type=int, required=True)
    add_output(dagger, "--out", kind="file", type=Path, required=True, help="output .hdf5 file (written atomically)")
    dagger.add_argument("--beta", type=float, default=0.0,
                        help="probability per learner chunk that the expert executes it instead (0: learner only)")
    dagger.add_argument("--seed", type=int, default=0, help="seed of episode 0; episode i uses seed + i")
    dagger.add_argument("--workers", type=int, default=1, help="parallel simulator processes")
    dagger.add_argument("--image-size", type=int, default=64, help="square camera resolution in pixels")
    dagger.add_argument("--cameras", nargs="*", default=list(CAMERAS), help="cameras to record")
    dagger.add_argument("--lookahead", type=int, default=8,
                        help="also record the expert's own next N actions from every state, the chunk labels "
                             "(a camera-less simulator copy rolls the expert out; ~3x the collection time at 8; "
                             "0: off, train on the recorded future, which overshoots)")
    dagger.add_argument("--shift", metavar="FACTOR:LEVEL", default=None,
                        help="run every episode under a shift factor (e.g. background:2; episode i samples it with "
                             "its own seed, so keep --seed below 100000 for training data): the learner sees the "
                             "shifted scene, the expert labels from the simulator state")
    dagger.add_argument("--gate-rows", action="store_true",
                        help="the learner is an R2A wrapper with a learned gate: also record what its gate read at "
                             "each gated query (closed-loop rows for r2a gate data; use with --lookahead 8)")
    add_start_joint_noise_argument(dagger)
    add_expert_argument(dagger)
    average = sub.add_parser("average", help="average the weights of built-in VLA checkpoints continued from one "
                                             "start (a model soup)")
    average.add_argument("checkpoints", nargs="+")
    add_output(average, "--out", kind="dir", required=True, help="checkpoint directory to write (atomically)")
    info = sub.add_parser("info", help="describe a built-in VLA checkpoint (JSON)")
    info.add_argument("checkpoint")
    listing = sub.add_parser("list", help="list the policy names a deployment uses (--all: the diagnostics too)")
    listing.add_argument("--all", action="store_true",
                         help="also list the diagnostics, apart: the scripted experts, the oracles, the ablations "
                              "and the earlier R2A variants the published runs name (not deployable / measurement "
                              "only)")
    check = sub.add_parser("harmonize-check", help="offline: how far harmonization brings the policy's chunk on "
                                                   "shifted renders back to its chunk on the clean render, per "
                                                   "shift condition and normalizer")
    check.add_argument("--policy", default="builtin", help="the base policy (default: builtin)")
    check.add_argument("--stats", default=HARMONIZE_STATS, help=f"image statistics (default: {HARMONIZE_STATS})")
    check.add_argument("--clean", required=True, type=Path, help="a demo file with camera images (training seeds)")
    check.add_argument("--shifted", nargs="+", required=True, type=Path, metavar="FILE",
                       help="re-renders of --clean under shifts (r2a demos rerender CLEAN --shift FACTOR:LEVEL)")
    check.add_argument("--episodes", type=int, default=12, help="first N episodes of each file (default: 12)")
    check.add_argument("--stride", type=int, default=4, help="compare every n-th frame's chunk (default: 4)")
    add_output(check, "--out", kind="file", type=Path, default=None, help="also write the rows here (JSON, atomically)")
    serve = sub.add_parser("serve", help="serve a policy with the openpi websocket protocol (the same command as "
                                         "'r2a serve', proxy mode included)")
    add_serve_arguments(serve)
    return parser


def run(args: argparse.Namespace) -> int:
    return {"train": _train, "dagger": _dagger, "average": _average, "info": _info, "list": _list,
            "serve": _serve, "harmonize-check": _harmonize_check}[args.command](args)


def _harmonize_check(args: argparse.Namespace) -> int:
    from eval.diagnostics import register_diagnostics
    from r2a.wrapper.config import resolve_path
    from r2a_core.files import write_json_atomic
    from training.harmonize_check import harmonize_check, markdown_table

    register_diagnostics()
    rows = harmonize_check(args.policy, resolve_path(args.stats), args.clean, args.shifted, args.episodes, args.stride)
    if args.out is not None:
        write_json_atomic(args.out, {"policy": args.policy, "stats": str(args.stats), "clean": str(args.clean),
                                     "shifted": [str(p) for p in args.shifted], "rows": rows})
    print(markdown_table(rows))
    return 0


def _train(args: argparse.Namespace) -> int:
    from training.vla.train import train_policy

    config = TrainConfig.from_yaml(args.config, args.overrides)
    if args.val_demos:
        config.val_demos = list(args.val_demos)
    summary = train_policy(config, args.demos, args.out, wandb_mode=args.wandb)
    print(json.dumps(summary, indent=1))
    return 0


def _dagger(args: argparse.Namespace) -> int:
    from demos.collect import CollectConfig, collect
    from eval.diagnostics import register_diagnostics
    from training.dagger import LearnerExecutor

    # a diagnostic learner (e.g. r2a-harmonize-hold, whose closed-loop rows trained a gate) builds in the workers too
    executor = LearnerExecutor(args.policy, args.beta, gate_rows=args.gate_rows, prepare=register_diagnostics)
    result = collect(CollectConfig(task=args.task, episodes=args.episodes, out=args.out, seed=args.seed,
                                   workers=args.workers, image_size=args.image_size, cameras=tuple(args.cameras),
                                   executor=executor, lookahead=args.lookahead, expert=args.expert,
                                   shift=args.shift, start_joint_noise=args.start_joint_noise))
    print(json.dumps(result.to_dict()))
    return 0


def _average(args: argparse.Namespace) -> int:
    from r2a.vla.checkpoint import average_checkpoints

    print(json.dumps({"out": str(average_checkpoints(args.checkpoints, args.out))}))
    return 0


def _info(args: argparse.Namespace) -> int:
    from r2a.vla.checkpoint import WEIGHTS, read_manifest

    manifest = read_manifest(args.checkpoint)
    history = manifest.get("provenance", {}).get("history", [])
    described = {k: manifest[k] for k in ("format", "version", "model", "n_action_steps", "train_config")}
    described["prompts"] = sorted(manifest["prompts"])
    described["weights_bytes"] = (Path(args.checkpoint) / WEIGHTS).stat().st_size
    described["sources"] = manifest.get("provenance", {}).get("sources", [])
    described["final"] = history[-1] if history else None
    print(json.dumps(described, indent=1))
    return 0


def _list(args: argparse.Namespace) -> int:
    from eval.diagnostics import register_diagnostics
    from r2a.policies.registry import DIAGNOSTICS_HEADING, POLICIES, policy_names

    register_diagnostics()
    names, diagnostics = policy_names(), policy_names(diagnostic=True)
    width = max(map(len, names + diagnostics if args.all else names)) + 1
    for name in names:
        print(f"{name:<{width}} {POLICIES[name].help}")
    if args.all:
        print(f"\n{DIAGNOSTICS_HEADING}:")
        for name in diagnostics:
            print(f"{name:<{width}} {POLICIES[name].help}")
    else:
        print(f"\n(and {len(diagnostics)} {DIAGNOSTICS_HEADING}: the scripted experts, the oracles, the ablations "
              "and the earlier R2A variants the published runs name; r2a policy list --all)")
    return 0


def _serve(args: argparse.Namespace) -> int:
    return serve(args)  # r2a serve: one implementation


if __name__ == "__main__":
    sys.exit(run(build_parser("r2a policy").parse_args()))
