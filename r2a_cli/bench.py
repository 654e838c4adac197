"""``r2a bench``: the shift benchmark (run, compare, report) and performance benchmarks.

``r2a bench compare A_DIR B_DIR`` — two results directories paired episode by episode (:mod:`eval.compare`).
``r2a bench merge OUT A_DIR B_DIR ...`` — runs made separately (the frozen base once, each wrapper later) joined into
one results directory and its full report (:mod:`eval.merge`).

``r2a bench view RUN_DIR --out DIR [--frames changed|all|none]`` — a static HTML page of a results directory: the
headline and uplift tables and the paired episodes, filtered, side by side (:mod:`eval.view`).
``r2a bench publish DIR [--frames changed|all|none]`` — a finished results directory, in place, in the form
docs/results/ stores: gzipped records, WebP strips named by the records, a slim summary (:mod:`eval.publish`).

``r2a bench choose SCREEN_DIR [--candidate P ...] [--max-clean-drop 1]`` — which wrapper variant runs on test seeds,
from a screen on training seeds, by the rule fixed in advance (:mod:`eval.choose`).

``r2a bench calibrate --factor F --policy builtin [--seeds 80000:80010]`` — sweep a factor's severity knob on
calibration seeds, fit success against severity and write the chosen L1–L3 into ``configs/bench/factors.yaml``
(:mod:`eval.calibration`).

``r2a bench perf graph [--sizes 10000 100000 1000000]`` — graph-builder scale benchmark
(:mod:`eval.perf.graph_scale`).
``r2a bench perf policy --policy SPEC [--task Lift] [--image-size 64] [--queries 200] [--warmup 10] [--threads 1]``
— a policy's inference latency next to the simulator step (:mod:`eval.perf.policy_latency`).
``r2a bench perf sim [--tasks Lift libero_spatial/0 libero_object/0] [--sizes 0 64 128] [--steps 200]`` — simulator
steps/s per task and image size (:mod:`eval.perf.sim_speed`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from eval.bench_config import BenchConfig
from eval.episode_job import SAVE_FRAMES
from eval.schema import RESULTS
from r2a_cli.outputs import add_output
from r2a_core.config import shipped_path
from r2a_core.errors import R2AInputError
from r2a_core.files import write_json_atomic

DEFAULT_CALIBRATION = shipped_path("configs/bench/calibration.yaml")
DEFAULT_LEVELS = shipped_path("configs/bench/factors.yaml")


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Benchmarks.")
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="{run,calibrate,compare,merge,report,view,publish,export,choose,liberoplus,"
                                       "perf}")
    run_p = sub.add_parser("run", help="run (or resume) the shift benchmark",
                           description="Run every (policy, task, factor, level, episode) job; results are "
                                       "appended to OUT/results.jsonl as they finish, and a rerun resumes.",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="config fields (--set FIELD=VALUE):\n" + BenchConfig.help_text() + "\n")
    run_p.add_argument("--config", required=True, metavar="YAML",
                       help="benchmark config: a shipped name (smoke, quick, standard: configs/bench/NAME.yaml) "
                            "or a YAML path")
    run_p.add_argument("--policy", action="append", required=True, metavar="NAME[:ARG]",
                       help="policy to evaluate (repeat to compare, e.g. --policy base --policy r2a)")
    add_output(run_p, "--out", kind="dir", required=True, type=Path, metavar="DIR", help="results directory")
    run_p.add_argument("--workers", type=int, default=1,
                       help="parallel worker processes (with --executor ray and no cluster: the local CPUs)")
    run_p.add_argument("--executor", default="local", choices=["local", "ray"], help="where jobs run")
    run_p.add_argument("--ray-address", metavar="ADDR",
                       help="join this Ray cluster (e.g. HEAD_IP:6379 of 'ray start --head'); default: "
                            "$RAY_ADDRESS, else a local Ray instance")
    run_p.add_argument("--retry-errors", action=argparse.BooleanOptionalAction, default=True,
                       help="on a resume, run jobs that ended with an error again (default; finished "
                            "episodes, successful or not, are kept either way)")
    run_p.add_argument("--save-frames", choices=SAVE_FRAMES, default="none",
                       help="'failures': a strip of 8 agentview frames (WebP; PNG where Pillow lacks it) of every "
                            "failed episode and of every clean run (its twin) under OUT/frames/, linked from the "
                            "report")
    run_p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a config field, value parsed as YAML (repeatable), e.g. --set episodes=5 "
                            "or --set factors.camera=[1,3]")
    run_p.add_argument("--wandb", choices=["offline", "online", "disabled"], default="disabled",
                       help="log the summary to Weights & Biases (offline by default when enabled)")
    _add_calibrate_parser(sub)
    compare = sub.add_parser("compare", help="pair two results directories episode by episode (McNemar per cell)",
                             description="Join A/results.jsonl and B/results.jsonl on (task, factor, level, "
                                         "episode) where seed and initial state agree; print success rates, "
                                         "discordant pairs and exact McNemar p per cell and pooled.")
    compare.add_argument("a", type=Path, metavar="A_DIR")
    compare.add_argument("b", type=Path, metavar="B_DIR")
    compare.add_argument("--policy-a", help="policy of A to compare (needed when A holds several)")
    compare.add_argument("--policy-b", help="policy of B to compare (needed when B holds several)")
    add_output(compare, "--json", kind="file", type=Path, metavar="PATH", help="also write the comparison as JSON")
    merge = sub.add_parser("merge", help="join runs made separately into one results directory and report",
                           description="Write OUT/results.jsonl and OUT/run.json from several 'r2a bench run' "
                                       "directories of the same episodes (the frozen base run once, each wrapper "
                                       "later) and build the full report; refuses runs of other episodes, a policy "
                                       "in two runs, or shared episodes whose seeds, start state or shift differ.")
    add_output(merge, "out", kind="dir", type=Path, metavar="OUT")
    merge.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR")
    merge.add_argument("--base-policy", metavar="NAME",
                       help="baseline of the uplift and headline tables (default: the first run's config)")
    _add_liberoplus_parser(sub)
    report_p = sub.add_parser("report", help="regenerate summary.json, report.md and figures from results.jsonl")
    report_p.add_argument("dir", type=Path, metavar="DIR")
    _add_view_parser(sub)
    _add_publish_parser(sub)
    _add_export_parser(sub)
    _add_choose_parser(sub)
    perf = sub.add_parser("perf", help="performance benchmarks")
    perf_sub = perf.add_subparsers(dest="perf_command", required=True, metavar="{graph,policy,retrieval,harmonize,sim}")
    graph = perf_sub.add_parser("graph", help="graph build scale benchmark on synthetic demonstrations",
                                description="Build graphs from synthetic demos of each size (fresh process per "
                                            "size) and print frames/s, peak memory, index size and ratios.")
    graph.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], metavar="FRAMES",
                       help="frame counts to build (default: 10000 100000 1000000)")
    graph.add_argument("--seed", type=int, default=0, help="seed of the synthetic demonstrations")
    graph.add_argument("--config", metavar="YAML", help="graph config (default: built-in defaults; fields: "
                                                        "'r2a graph build --help')")
    graph.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                       help="override one graph config value (repeatable)")
    add_output(graph, "--json", kind="file", metavar="PATH",
               help="also write the rows (with config and versions) as JSON")
    graph.add_argument("--no-isolate", action="store_true", help="run all sizes in this process")
    _add_perf_policy_parser(perf_sub)
    _add_perf_harmonize_parser(perf_sub)
    _add_perf_sim_parser(perf_sub)
    retrieval = perf_sub.add_parser("retrieval", help="the R2A wrapper's added cost per query, by graph size",
                                    description="Time the R2A wrapper (history, query, FAISS seeds, subgraph, "
                                                "features, GNN, synthesis, gate) on one thread around an instant "
                                                "base, on synthetic graphs of each size, beside the built-in VLA's "
                                                "own query time; p50/p99 per query and per control step.")
    retrieval.add_argument("--nodes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], metavar="N",
                           help="graph sizes in nodes (default: 10000 100000 1000000)")
    retrieval.add_argument("--queries", type=int, default=300, help="timed queries per size (default: 300)")
    retrieval.add_argument("--warmup", type=int, default=30, help="untimed queries first (default: 30)")
    retrieval.add_argument("--retriever", metavar="DIR", help="retriever checkpoint whose GNN is timed "
                                                              "(default: the shipped one)")
    retrieval.add_argument("--no-isolate", action="store_true", help="build all sizes in this process")
    retrieval.add_argument("--proxy", action=argparse.BooleanOptionalAction, default=True,
                           help="also time the client's round trip with and without the R2A proxy (r2a serve "
                                "--upstream) in the path, on loopback, on the smallest graph (default: on)")
    add_output(retrieval, "--json", kind="file", metavar="PATH", help="also write the measurement as JSON")
    return parser


def _add_view_parser(sub: Any) -> None:
    from eval.view import FRAME_CHOICES

    view = sub.add_parser("view", help="a static HTML page of a results directory: tables and paired episodes",
                          description="Write DIR/index.html, which opens from disk (no server): the headline and "
                                      "uplift tables, and every episode the base policy and another policy both ran, "
                                      "filtered by task, factor, level and outcome, side by side with its saved "
                                      "frames, stage timeline and what the wrapper did.")
    view.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                      help="a results directory of 'r2a bench run' or 'r2a bench merge'")
    add_output(view, "--out", kind="dir", required=True, type=Path, metavar="DIR",
               help="the viewer's directory (new, or an earlier viewer, which is replaced)")
    view.add_argument("--frames", choices=FRAME_CHOICES, default="changed",
                      help="which saved frame strips to copy beside the page: of the pairs whose outcome differs "
                           "(default), of every pair, or none")


def _add_publish_parser(sub: Any) -> None:
    from eval.publish import FRAME_CHOICES

    publish = sub.add_parser("publish", help="a finished results directory, in place, in the form docs/results/ "
                                             "stores: gzipped records, WebP strips, a slim summary",
                             description="Turn DIR into its published form in place (eval/publish.py): results.jsonl "
                                         "→ results.jsonl.gz, frame strips → DIR/frames/*.webp with the records "
                                         "naming them, summary.json without what the records and run.json hold. "
                                         "Nothing DIR holds is lost; every reader reads either form; publishing "
                                         "again changes nothing.")
    publish.add_argument("dir", type=Path, metavar="DIR", help="a results directory of 'r2a bench run' or 'merge'")
    publish.add_argument("--frames", choices=FRAME_CHOICES, default="changed",
                         help="which strips from outside DIR (a merge's runs) to copy in: those of the pairs whose "
                              "outcome differs (default, as 'r2a bench view'), every one, or none; strips inside "
                              "DIR are always kept")


def _add_export_parser(sub: Any) -> None:
    from eval.export import columns_help

    export = sub.add_parser("export", help="a results directory as flat tables: one row per episode, one per "
                                           "(policy, factor, level) cell and per factor (CSV and/or JSON)",
                            formatter_class=argparse.RawDescriptionHelpFormatter, epilog=columns_help())
    export.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="a results directory of 'r2a bench run' or 'r2a bench merge'")
    add_output(export, "--csv", kind="dir", type=Path, default=None, metavar="DIR",
               help="write DIR/episodes.csv and DIR/cells.csv")
    add_output(export, "--json", kind="file", type=Path, default=None, metavar="FILE",
               help="write both tables and their column docs as one JSON file (r2a.bench.export v1)")


def _add_choose_parser(sub: Any) -> None:
    from eval.choose import DEFAULT_MAX_CLEAN_DROP_POINTS

    choose = sub.add_parser("choose", help="which wrapper variant to run on test seeds, from a screen on training "
                                           "seeds, by the rule fixed in advance",
                            description="Among the candidates whose clean SR is no more than --max-clean-drop points "
                                        "below the baseline's on the same episodes, the one with the highest pooled "
                                        "shifted uplift (ties: the first listed). Refuses a run with any test-seed "
                                        "episode. Exit status 1 when no candidate is eligible.")
    choose.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="the screen: a results directory of 'r2a bench run' on training seeds (< 100000)")
    choose.add_argument("--baseline", metavar="POLICY", help="the base policy (default: the run's base_policy)")
    choose.add_argument("--candidate", action="append", default=[], metavar="POLICY",
                        help="a variant to choose among, as the run names it (repeat; simplest first; default: "
                             "every policy besides the baseline, in the run's order)")
    choose.add_argument("--max-clean-drop", type=float, default=DEFAULT_MAX_CLEAN_DROP_POINTS, metavar="POINTS",
                        help=f"the clean SR points a candidate may lose (default {DEFAULT_MAX_CLEAN_DROP_POINTS:g})")
    add_output(choose, "--json", kind="file", type=Path, metavar="FILE",
               help="also write the choice as JSON (r2a.bench.choice v1)")


def _add_perf_harmonize_parser(perf_sub: argparse._SubParsersAction) -> None:
    harm = perf_sub.add_parser("harmonize", help="observation harmonization's cost per frame beside the base's query",
                               description="Time the photometric detector and the normalizers per agentview frame "
                                           "on one thread, beside the built-in VLA's query on the same images.")
    harm.add_argument("--sizes", type=int, nargs="+", default=[64, 128], help="image sizes (default: 64 128)")
    harm.add_argument("--frames", type=int, default=300, help="timed frames per case (default: 300)")
    add_output(harm, "--json", kind="file", metavar="PATH", help="also write the measurement as JSON")


def _add_perf_sim_parser(perf_sub: argparse._SubParsersAction) -> None:
    from eval.perf.sim_speed import DEFAULT_SIZES, DEFAULT_TASKS

    sim = perf_sub.add_parser("sim", help="simulator steps/s per task and image size (one task per suite)",
                              description="Drive each task with its scripted expert and time sim.step at each image "
                                          "size (two cameras; 0 = no cameras), one simulator at a time; also the "
                                          "build and reset times.")
    sim.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS),
                     help=f"tasks (default: {' '.join(DEFAULT_TASKS)}; LIBERO's need the libero extra)")
    sim.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES),
                     help=f"image sides in pixels, 0 for no cameras (default: {' '.join(map(str, DEFAULT_SIZES))})")
    sim.add_argument("--steps", type=int, default=200, help="timed control steps per row (default: 200)")
    sim.add_argument("--seed", type=int, default=0, help="seed of the first episode (default: 0, a training seed)")
    sim.add_argument("--culling", choices=["on", "off", "both"], default="on",
                     help="frustum culling of the camera rows (the same pixels, sim/envs/rendering.py); 'both' "
                          "measures each with and without, side by side (default: on, as every run renders)")
    sim.add_argument("--render-every", type=int, nargs="+", default=[1], metavar="N",
                     help="render the cameras every N-th step (between them the images are not rendered, as a "
                          "benchmark episode of a policy executing N-step chunks runs); several N side by side "
                          "(default: 1; e.g. 1 8)")
    add_output(sim, "--json", kind="file", metavar="PATH",
               help="also write the measurement (with machine info) as JSON")


def _add_perf_policy_parser(perf_sub: argparse._SubParsersAction) -> None:
    policy = perf_sub.add_parser("policy", help="policy inference latency next to the simulator step",
                                 description="Step the simulator with the policy's own actions and time "
                                             "policy.infer and sim.step side by side in one process; print "
                                             "latency per query and per control step and its ratio to the "
                                             "simulator step.")
    policy.add_argument("--policy", required=True, metavar="NAME[:ARG]",
                        help="policy to time, e.g. builtin, builtin:DIR, expert, openpi:ws://HOST:PORT")
    policy.add_argument("--task", default="Lift", help="simulator task (default: Lift)")
    policy.add_argument("--image-size", type=int, default=64, metavar="PX", help="camera image side (default: 64)")
    policy.add_argument("--queries", type=int, default=200, help="timed policy queries (default: 200)")
    policy.add_argument("--warmup", type=int, default=10, help="untimed queries first (default: 10)")
    policy.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: 1; 0 = leave)")
    policy.add_argument("--seed", type=int, default=0, help="seed of the first episode and of the policy")
    add_output(policy, "--json", kind="file", metavar="PATH",
               help="also write the measurement (with machine info) as JSON")


def _add_calibrate_parser(sub: Any) -> None:
    from eval.calibration.config import CalibrationConfig

    cal = sub.add_parser(
        "calibrate", help="calibrate the shift levels on a policy (calibration seeds only)",
        description="Sweep each factor's severity knob (0 clean … 1 the outer bound) on calibration seeds, coarse "
                    "to fine; fit success against severity (logistic, tasks pooled, each task's clean rate its "
                    "ceiling); pick L1–L3 where the fit is the targets' fraction of clean and write them into the "
                    "levels file with a calibration record. Resumable: OUT/results.jsonl keeps every episode.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="config fields (--set FIELD=VALUE):\n" + CalibrationConfig.help_text() + "\n")
    cal.add_argument("--factor", action="append", required=True, metavar="NAME",
                     help="factor to calibrate (repeatable; 'all' for every factor)")
    cal.add_argument("--knob", action="append", metavar="NAME",
                     help="only these knobs of the factor (noise: gaussian_noise, gaussian_blur, motion_blur, fog)")
    cal.add_argument("--policy", default="builtin", metavar="SPEC", help="the policy the levels are calibrated on")
    cal.add_argument("--config", default=str(DEFAULT_CALIBRATION), metavar="YAML", help="calibration config")
    cal.add_argument("--seeds", metavar="START:STOP",
                     help="calibration seeds START…STOP-1 (sets seed and episodes); below 100000")
    cal.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="override a config field, e.g. --set 'severities=[0.3,1.0]' --set refine=1")
    add_output(cal, "--out", kind="dir", type=Path, default=Path("runs/calibration"), metavar="DIR",
               help="results directory, shared by every factor (default: runs/calibration)")
    cal.add_argument("--workers", type=int, default=1, help="parallel worker processes")
    add_output(cal, "--write", kind="file", type=Path, default=DEFAULT_LEVELS, metavar="YAML",
               help="levels file to update (default: configs/bench/factors.yaml)")
    cal.add_argument("--no-write", action="store_true", help="fit and report only; leave the levels file alone")
    add_output(cal, "--figure", kind="file", type=Path, metavar="PNG",
               help="figure path (default: OUT/calibration.png)")


def _add_liberoplus_parser(sub: Any) -> None:
    lp = sub.add_parser("liberoplus", help="LIBERO-Plus's perturbed tasks: families, counts, a config's sample",
                        description="List LIBERO-Plus's perturbation families with their task counts per suite, "
                                    "which run here and why the others cannot (docs/experiments/liberoplus.md); "
                                    "with --sample, print the liberoplus_tasks of a benchmark config.")
    lp.add_argument("--sample", type=int, metavar="N", help="draw N tasks per runnable family of --suite")
    lp.add_argument("--suite", default="libero_spatial", help="suite to sample (default: libero_spatial)")
    lp.add_argument("--sample-seed", type=int, default=7, help="sampling seed (below 100000; default 7)")
    lp.add_argument("--family", action="append", metavar="NAME", help="only these families (repeatable)")


def _bench_liberoplus(args: argparse.Namespace) -> int:
    from sim.envs.liberoplus_tasks import INSTALL_HINT, family_table, load_index, package_root, sample_tasks

    if args.sample is None:
        root = package_root(required=False)
        print(family_table(load_index(root) if root is not None else None))
        if root is None:
            print(f"(counts need LIBERO-Plus's task data: {INSTALL_HINT})")
        return 0
    if not 0 <= args.sample_seed < 100_000:
        raise R2AInputError(f"--sample-seed {args.sample_seed}: sampling seeds are below 100000")
    names = sample_tasks(load_index(), args.suite, args.sample, args.sample_seed, args.family)
    print(f"# r2a bench liberoplus --sample {args.sample} --suite {args.suite} --sample-seed {args.sample_seed}")
    print("liberoplus_tasks:")
    for name in names:
        print(f"  - {name}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.command == "run":
        return _bench_run(args)
    if args.command == "calibrate":
        return _bench_calibrate(args)
    if args.command == "report":
        return _bench_report(args)
    if args.command == "liberoplus":
        return _bench_liberoplus(args)
    if args.command == "compare":
        return _bench_compare(args)
    if args.command == "merge":
        from eval.merge import merge_runs

        _print_headline(merge_runs(args.out, args.runs, args.base_policy), args.out)
        return 0
    if args.command == "export":
        from eval.export import export_run

        print(json.dumps(export_run(args.run_dir, args.csv, args.json)))
        return 0
    if args.command == "choose":
        from eval.choose import choose_variant, format_choice

        choice = choose_variant(args.run_dir, args.baseline, args.candidate, args.max_clean_drop, args.json)
        print(format_choice(choice), end="")
        return 0 if choice["chosen"] else 1
    if args.command == "publish":
        from eval.publish import publish_run

        print(json.dumps(publish_run(args.dir, args.frames)))
        return 0
    if args.command == "view":
        from eval.view import write_view

        print(json.dumps(write_view(args.run_dir, args.out, args.frames)))
        return 0
    if args.command == "perf" and args.perf_command == "graph":
        return _perf_graph(args)
    if args.command == "perf" and args.perf_command == "retrieval":
        return _perf_retrieval(args)
    if args.command == "perf" and args.perf_command == "policy":
        return _perf_policy(args)
    if args.command == "perf" and args.perf_command == "sim":
        return _perf_sim(args)
    if args.command == "perf" and args.perf_command == "harmonize":
        from eval.perf.harmonize_latency import format_table, measure_harmonize_latency

        result = measure_harmonize_latency(tuple(args.sizes), args.frames)
        print(format_table(result), end="")
        if args.json:
            write_json_atomic(args.json, result)
        return 0
    raise AssertionError((args.command, getattr(args, "perf_command", None)))


def _perf_graph(args: argparse.Namespace) -> int:
    from eval.perf.graph_scale import format_stages, format_table, run_graph_scale_benchmark
    from graph_builder.config import load_config

    cfg = load_config(args.config, args.set).to_dict()
    rows = run_graph_scale_benchmark(args.sizes, config=cfg, seed=args.seed, isolate=not args.no_isolate)
    print(format_table(rows))
    print()
    print(format_stages(rows))
    if args.json:
        write_json_atomic(args.json, rows)
    return 0


def _perf_retrieval(args: argparse.Namespace) -> int:
    from eval.perf.retrieval_latency import format_table, run_retrieval_benchmark

    result = run_retrieval_benchmark(args.nodes, args.queries, args.warmup, args.retriever,
                                     isolate=not args.no_isolate, proxy=args.proxy)
    print(format_table(result), end="")
    if args.json:
        write_json_atomic(args.json, result)
    return 0


def _perf_policy(args: argparse.Namespace) -> int:
    from eval.perf.policy_latency import format_table, measure_policy_latency

    row = measure_policy_latency(args.policy, task=args.task, image_size=args.image_size, queries=args.queries,
                                 warmup=args.warmup, seed=args.seed, threads=args.threads or None)
    print(format_table(row))
    if args.json:
        write_json_atomic(Path(args.json), row)
    return 0


def _perf_sim(args: argparse.Namespace) -> int:
    from eval.perf.sim_speed import format_table, measure_sim_speed

    culling = {"on": (True,), "off": (False,), "both": (True, False)}[args.culling]
    result = measure_sim_speed(tuple(args.tasks), tuple(args.sizes), steps=args.steps, seed=args.seed,
                               culling=culling, render_every=tuple(args.render_every))
    print(format_table(result))
    if args.json:
        write_json_atomic(Path(args.json), result)
    return 0


def _bench_run(args: argparse.Namespace) -> int:
    from eval.runner import run_benchmark

    config = BenchConfig.from_yaml(args.config, args.set)
    if args.wandb != "disabled":
        from eval.preflight import require_module

        require_module("wandb")  # before the first episode, not after the last
    summary = run_benchmark(config, args.policy, args.out, workers=args.workers, executor=args.executor,
                            retry_errors=args.retry_errors, save_frames=args.save_frames,
                            ray_address=args.ray_address)
    if args.wandb != "disabled":
        from eval.wandb_log import log_summary

        log_summary(summary, config, mode=args.wandb, out_dir=args.out)
    _print_headline(summary, args.out)
    return _exit_status(summary, args.out)


def _exit_status(summary: dict, out: Path) -> int:
    """1 when fewer valid episodes than expected were recorded, with a last line saying which and where."""
    integrity = summary.get("integrity", {})
    expected, valid = integrity.get("expected_jobs"), integrity.get("valid") or 0
    if expected is None or valid >= expected:
        return 0
    errors, missing = integrity.get("errors") or 0, integrity.get("missing") or 0
    print(f"r2a bench run: {valid} of {expected} episodes valid — {errors} errored (tracebacks: the 'traceback' "
          f"field of their records in {Path(out) / RESULTS}; listed in {Path(out) / 'report.md'}), "
          f"{missing} missing; run the same command again to retry them", file=sys.stderr)
    return 1


def _bench_calibrate(args: argparse.Namespace) -> int:
    from eval.calibration.config import CalibrationConfig
    from eval.calibration.figure import plot_calibration
    from eval.calibration.levels_file import write_calibrated_levels
    from eval.calibration.run import calibrate
    from sim.shifts.registry import FACTOR_NAMES

    overrides = list(args.set)
    if args.seeds:
        start, stop = _seed_range(args.seeds)
        overrides += [f"seed={start}", f"episodes={stop - start}"]
    config = CalibrationConfig.from_yaml(args.config, overrides)
    factors = list(FACTOR_NAMES) if "all" in args.factor else list(dict.fromkeys(args.factor))
    if args.workers < 1:
        raise R2AInputError(f"--workers must be >= 1, got {args.workers}")
    result = calibrate(factors, args.policy, config, args.out, workers=args.workers, knobs=args.knob)
    figure = plot_calibration(result, args.figure or args.out / "calibration.png")
    if not args.no_write:
        write_calibrated_levels(args.write, result)
    print(calibration_table(result), end="")
    print(json.dumps({"out": str(args.out), "calibration": str(args.out / "calibration.json"),
                      "figure": None if figure is None else str(figure),
                      "levels": None if args.no_write else str(args.write)}))
    return 0


def _seed_range(text: str) -> tuple[int, int]:
    try:
        start, stop = (int(x) for x in text.split(":"))
    except ValueError:
        raise R2AInputError(f"--seeds expects START:STOP (e.g. 80000:80010), got {text!r}") from None
    if stop <= start:
        raise R2AInputError(f"--seeds {text}: STOP must be greater than START")
    return start, stop


def calibration_table(result: dict) -> str:
    """Markdown: per factor knob the chosen severities, the fitted success at each, the episodes and status."""
    lines = ["| task | clean [Wilson 95 %] |", "|---|---|"]
    for task, entry in result["clean"].items():
        lo, hi = entry["wilson95"]
        lines.append(f"| {task} | {entry['successes']}/{entry['episodes']} [{lo:.2f}, {hi:.2f}] |")
    lines += ["", "| factor | knob | L1 / L2 / L3 severity | fitted success / clean | episodes | status |",
              "|---|---|---|---|---|---|"]
    for factor, knobs in result["factors"].items():
        for knob, entry in knobs.items():
            sev = " / ".join(f"{s:.3g}" for s in entry["severities"])
            rel = " / ".join(f"{r:.2f}" for r in entry["fitted_relative"])
            n = sum(p["episodes"] for p in entry["points"])
            lines.append(f"| {factor} | {knob} | {sev} | {rel} | {n} | {entry['status']} |")
    return "\n".join(lines) + "\n"


def _bench_compare(args: argparse.Namespace) -> int:
    from eval.compare import compare_runs, comparison_markdown

    result = compare_runs(args.a, args.b, args.policy_a, args.policy_b)
    if args.json:
        write_json_atomic(args.json, result)
    print(comparison_markdown(result), end="")
    return 0


def _bench_report(args: argparse.Namespace) -> int:
    from eval.runner import report_from_dir

    _print_headline(report_from_dir(args.dir), args.dir)
    return 0


def _print_headline(summary: dict, out: Path) -> None:
    integrity = summary.get("integrity", {})
    print(json.dumps({"out": str(out), "report": str(Path(out) / "report.md"),
                      "records": integrity.get("valid"), "expected": integrity.get("expected_jobs"),
                      "hash_mismatch": integrity.get("hash_mismatch"),
                      "seed_mismatch": integrity.get("seed_mismatch")}))
    for h in summary.get("headline") or []:
        print(_headline_line(h))


def _headline_line(h: dict) -> str:
    """The uplift of one pair in one line, for people (the JSON line above is for scripts)."""
    def pts(x: Any) -> str:
        return "n/a" if x is None else f"{100 * x:+.1f}"

    def sr(x: Any) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    lo, hi = h["pooled_ci"]
    clean = h["clean"]
    return (f"uplift {h['candidate']} vs {h['baseline']}: {pts(h['pooled_uplift'])} SR points pooled over "
            f"{h['n_pairs']} shifted pairs [95% CI {pts(lo)}, {pts(hi)}], mean {pts(h['mean_uplift'])} over "
            f"{h['n_conditions']} conditions; CI above 0 on {len(h['factors_ci_above_zero'])} of {len(h['factors'])} "
            f"factor(s); clean SR {sr(clean['baseline_sr'])} → {sr(clean['candidate_sr'])} "
            f"({pts(clean['uplift'])} points)")
