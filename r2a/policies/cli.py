"""``r2a policy``: train the built-in VLA, describe a checkpoint, list policies, serve a policy over websockets."""

from __future__ import annotations

import argparse
import json
import logging
import sys

log = logging.getLogger(__name__)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train the built-in VLA on demonstration files")
    train.add_argument("--config", default=None, help="training YAML (e.g. configs/policy/builtin.yaml)")
    train.add_argument("--demos", nargs="+", required=True, help="HDF5 files or LeRobot v3 directories")
    train.add_argument("--val-demos", nargs="+", default=None,
                       help="files held out for the validation loss instead of every holdout_every-th episode")
    train.add_argument("--out", required=True, help="checkpoint directory to write (atomically)")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a config field (value parsed as YAML); repeatable")
    train.add_argument("--wandb", choices=["offline", "online", "disabled"], default="disabled",
                       help="log to Weights & Biases (offline writes under the output's parent directory)")
    info = sub.add_parser("info", help="describe a built-in VLA checkpoint (JSON)")
    info.add_argument("checkpoint")
    sub.add_parser("list", help="list the registered policy names")
    serve = sub.add_parser("serve", help="serve a policy with the openpi websocket protocol")
    serve.add_argument("--policy", default="builtin", help="policy spec, e.g. builtin or builtin:path/to/ckpt")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=8000)
    return parser


def run(args: argparse.Namespace) -> int:
    return {"train": _train, "info": _info, "list": _list, "serve": _serve}[args.command](args)


def _train(args: argparse.Namespace) -> int:
    from r2a.vla.train import TrainConfig, train_policy

    config = TrainConfig.from_yaml(args.config, args.overrides)
    if args.val_demos:
        config.val_demos = list(args.val_demos)
    summary = train_policy(config, args.demos, args.out, wandb_mode=args.wandb)
    print(json.dumps(summary, indent=1))
    return 0


def _info(args: argparse.Namespace) -> int:
    from pathlib import Path

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
    from r2a.policies.registry import POLICIES

    for name, (_, help_) in sorted(POLICIES.items()):
        print(f"{name:<14} {help_}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from r2a.adapters.openpi_ws import PolicyServer
    from r2a.policies.registry import make_policy

    policy = make_policy(args.policy, sim=None, seed=0)
    metadata = dict(getattr(policy, "metadata", None) or {"policy": args.policy})
    log.info("serving %s on ws://%s:%d", args.policy, args.host, args.port)
    PolicyServer(policy, host=args.host, port=args.port, metadata=metadata).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(run(build_parser("r2a policy").parse_args()))
