"""``r2a retriever``: train the GNN retriever, inspect a checkpoint, measure whether its reference can help."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from r2a_cli.outputs import add_output
from training.retriever.config import RetrieverTrainConfig


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train the retriever on held-out demonstrations (resumes in --out)",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="config fields (--set SECTION.FIELD=VALUE):\n"
                                  + RetrieverTrainConfig.help_text() + "\n")
    train.add_argument("--config", default=None, metavar="YAML", help="e.g. configs/retriever/default.yaml")
    train.add_argument("--graph", required=True, type=Path, metavar="DIR", help="the motion graph (r2a graph build)")
    train.add_argument("--demos", nargs="+", required=True, metavar="FILE",
                       help="held-out demonstrations with images (not in the graph), clean and re-rendered under "
                            "training-split shifts (r2a demos rerender --shift F:L --seed S)")
    add_output(train, "--out", kind="dir", required=True, type=Path, metavar="DIR", help="checkpoint directory")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                       help="override a config field (value parsed as YAML); repeatable")
    train.add_argument("--wandb", choices=["offline", "online", "disabled"], default="disabled",
                       help="log the losses to Weights & Biases")
    match = sub.add_parser("task-match", help="fit task matching by meaning (task_match.min_similarity, "
                                              "min_margin) on training paraphrases: no paraphrase to a wrong task")
    match.add_argument("--graph", required=True, type=Path, metavar="DIR", help="the motion graph whose tasks match")
    match.add_argument("--paraphrases", default=None, metavar="YAML",
                       help="training paraphrases per task (default: configs/task_match/train_paraphrases.yaml; "
                            "paraphrases of tasks outside the graph must match none)")
    add_output(match, "--out", kind="file", type=Path, default=None, metavar="JSON",
               help="also write the fit and its grid here")
    info = sub.add_parser("info", help="print a retriever checkpoint's manifest summary as JSON")
    info.add_argument("dir", type=Path)
    ev = sub.add_parser("evaluate", help="offline: errors of the base chunk, the GNN and kNN references and "
                                         "constant blends against the expert, per condition",
                        description="Needs no gate: on held-out demo frames (clean or re-rendered under a "
                                    "shift) and on states the base reached driving (r2a policy dagger --beta 0 "
                                    "--lookahead 8 [--shift ...]), compare each chunk with the expert's actions.")
    ev.add_argument("--config", default=None, metavar="YAML", help="R2A config (default configs/r2a/builtin.yaml)")
    ev.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                    help="override an R2A config field; repeatable")
    ev.add_argument("--demos", nargs="*", default=[], metavar="FILE", help="held-out demonstration files")
    ev.add_argument("--dagger", nargs="*", default=[], metavar="FILE", help="DAgger files with lookahead labels")
    ev.add_argument("--frame-stride", type=int, default=2, help="every n-th frame (default 2)")
    add_output(ev, "--out", kind="file", type=Path, required=True, metavar="JSON",
               help="rows as JSON (a .md table beside it)")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.command == "train":
        from training.retriever.train import train_retriever

        config = RetrieverTrainConfig.from_yaml(args.config, args.overrides)
        summary = train_retriever(config, args.graph, args.demos, args.out, wandb_mode=args.wandb)
        print(json.dumps(summary, indent=1))
        return 0
    if args.command == "task-match":
        return _task_match(args)
    if args.command == "info":
        from r2a.retrieval.checkpoint import read_manifest

        m = read_manifest(args.dir)
        print(json.dumps({k: m[k] for k in ("format", "version", "net", "layout", "settings", "executed_steps",
                                             "graph", "thresholds")} | {"final": (m.get("history") or [{}])[-1],
                                                                        "provenance": m.get("provenance")},
                         indent=1))
        return 0
    return _evaluate(args)


def _evaluate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from r2a.wrapper.build import build_r2a
    from r2a_core.files import check_output_path, write_json_atomic, write_text_atomic
    from training.retriever.offline import build_offline, evaluate_episodes, markdown_table, summarize

    table_file = check_output_path(Path(args.out).with_suffix(".md"), "file", "--out's table")
    config, base, gnn, recorded = build_offline(args.config, args.overrides, args.demos, args.dagger)
    knn = build_r2a(replace(config, retrieval=replace(config.retrieval, mode="knn"),
                            recovery=replace(config.recovery, enabled=False)), base)
    episodes = [(kind, ep) for kind, _, ep in recorded]
    errors = evaluate_episodes(episodes, base, gnn.parts.retriever, knn.parts.retriever, gnn.action_space,
                               config.executed_steps, config.conversion, args.frame_stride)
    rows = summarize(errors)
    write_json_atomic(args.out, {"config": config.to_dict(), "demos": [str(p) for p in args.demos],
                                 "dagger": [str(p) for p in args.dagger], "rows": rows})
    table = markdown_table(rows)
    write_text_atomic(table_file, table)
    print(table, end="")
    return 0


def _task_match(args: argparse.Namespace) -> int:
    from graph_builder.storage import load_graph
    from r2a.retrieval.retriever import instruction_tasks
    from r2a_core.config import resolve_path
    from r2a_core.files import write_json_atomic
    from training.task_match import TRAIN_PARAPHRASES, fit_task_match, load_paraphrases

    graph = load_graph(args.graph)
    tasks = {text: graph.tasks[task] for text, task in instruction_tasks(graph).items()}
    result = fit_task_match(tasks, load_paraphrases(resolve_path(args.paraphrases or TRAIN_PARAPHRASES)))
    if args.out is not None:
        write_json_atomic(args.out, {"graph": str(args.graph), **result})
    print(json.dumps({k: v for k, v in result.items() if k != "grid"}, indent=1))
    return 0
