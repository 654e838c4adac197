"""``r2a gate``: build gate training data, train the learned gate, inspect a gate checkpoint."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from gating.config import GateTrainConfig
from r2a_cli.outputs import add_output


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("data", help="states where the frozen base may be wrong, with the reference and the expert's "
                                    "chunk (held-out demos, re-rendered under shifts; DAgger rollouts)")
    d.add_argument("--config", default=None, metavar="YAML", help="R2A config (default: configs/r2a/builtin.yaml)")
    d.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help="override an R2A config field")
    d.add_argument("--demos", nargs="*", default=[], type=Path, help="held-out demo files (clean or re-rendered)")
    d.add_argument("--dagger", nargs="*", default=[], type=Path,
                   help="rollouts labelled with the expert's next actions (r2a policy dagger --lookahead 8)")
    d.add_argument("--image-stats", type=Path, default=None,
                   help="the demos' image statistics (r2a demos image-stats) for the image signal")
    d.add_argument("--frame-stride", type=int, default=2, help="every n-th frame (default 2)")
    d.add_argument("--frames-too", action="store_true",
                   help="rollouts with recorded gate rows (--gate-rows) also give rows of every n-th frame")
    add_output(d, "--out", kind="file", type=Path, required=True, metavar="NPZ", help="output file (r2a.gate.data v1)")
    t = sub.add_parser("train", help="train the learned gate (torchrun --nproc_per_node N for data parallel)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="config fields (--set FIELD=VALUE):\n" + GateTrainConfig.help_text() + "\n")
    t.add_argument("--config", default="configs/gate/default.yaml", metavar="YAML")
    t.add_argument("--data", nargs="+", required=True, type=Path, help="gate data files (r2a gate data)")
    add_output(t, "--out", kind="dir", type=Path, required=True, metavar="DIR", help="checkpoint directory (resumes)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE")
    t.add_argument("--wandb", choices=["disabled", "offline", "online"], default="disabled")
    e = sub.add_parser("evaluate", help="offline: base vs reference vs best constant vs learned blend, per shift")
    e.add_argument("--gate", type=Path, required=True, metavar="DIR", help="gate checkpoint")
    e.add_argument("--data", nargs="+", required=True, type=Path, help="gate data of held-out states")
    add_output(e, "--out", kind="file", type=Path, required=True, metavar="JSON",
               help="rows as JSON (a .md table beside it)")
    e.add_argument("--validation-only", action="store_true",
                   help="the data are the gate's training files: score only the episodes its training held out")
    i = sub.add_parser("info", help="print a gate checkpoint's manifest summary as JSON")
    i.add_argument("dir", type=Path)
    return parser


def run(args: argparse.Namespace) -> int:
    if args.command == "data":
        return _data(args)
    if args.command == "train":
        from gating.train import train_gate

        config = GateTrainConfig.from_yaml(args.config, args.overrides)
        summary = train_gate(config, args.data, args.out, wandb_mode=args.wandb)
        if int(os.environ.get("RANK", "0")) == 0:
            print(json.dumps(summary, indent=1))
        return 0
    if args.command == "evaluate":
        from gating.evaluate import evaluate_gate, markdown_table
        from r2a_core.files import check_output_path, write_json_atomic, write_text_atomic

        table_file = check_output_path(Path(args.out).with_suffix(".md"), "file", "--out's table")
        rows = evaluate_gate(args.gate, args.data, validation_only=args.validation_only)
        write_json_atomic(args.out, {"gate": str(args.gate), "data": [str(p) for p in args.data], "rows": rows})
        table = markdown_table(rows)
        write_text_atomic(table_file, table)
        print(table, end="")
        return 0
    from r2a.wrapper.gate_checkpoint import read_gate_manifest

    m = read_gate_manifest(args.dir)
    print(json.dumps({k: m.get(k) for k in ("format", "version", "layout", "action_space", "hidden", "max_gate",
                                             "image_stats")}
                     | {"final": (m.get("history") or [{}])[-1], "provenance": m.get("provenance")}, indent=1))
    return 0


def _data(args: argparse.Namespace) -> int:
    from gating.data import build_gate_data, save_gate_data
    from r2a_core.provenance import sha256_path
    from r2a_core.visual_ood import load_image_stats
    from training.retriever.offline import build_offline

    _, base, wrapper, episodes = build_offline(args.config, args.overrides, args.demos, args.dagger)
    scorer = load_image_stats(args.image_stats) if args.image_stats else None
    data = build_gate_data(episodes, wrapper, base, scorer, frame_stride=args.frame_stride,
                           frames_too=args.frames_too)
    if args.image_stats:
        data["meta"]["image_stats"] = {"path": str(args.image_stats), "sha256": sha256_path(args.image_stats)}
    save_gate_data(data, args.out)
    print(json.dumps({"out": str(args.out), "rows": len(data["arrays"]["base"]), "skipped": data["meta"]["skipped"],
                      "conditions": sorted(set(data["meta"]["condition"]))}))
    return 0
