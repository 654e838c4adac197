"""Scale benchmark of the graph builder: synthetic demos of 10k/100k/1M frames → graph + index on disk.

Each size runs in a fresh process (so peak memory is that size's own) and reports throughput, peak memory,
index and graph size, seed-query latency and index recall. Because absolute times on a shared 2-core machine
are noisy, the table also reports *ratios*: ``cost_ratio`` is the build cost per frame relative to the previous
size (1.0 = perfectly linear) — noise that scales all sizes alike cancels out. Target (issue): 1M frames →
graph + index in ≤ 60 s on 2 cores, cost growing linearly with frames.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import platform
import resource
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
TARGET_1M_S = 60.0
QUERIES = 200


def run_graph_scale_benchmark(sizes: tuple[int, ...] | list[int] = DEFAULT_SIZES, config: dict | None = None,
                              seed: int = 0, isolate: bool = True) -> list[dict[str, Any]]:
    """Measure every size (in a fresh process unless ``isolate=False``) and add the scaling ratios."""
    rows = []
    for frames in sizes:
        log.info("graph scale benchmark: %d frames", frames)
        if isolate:
            with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
                row = pool.submit(measure_graph_build, int(frames), config, seed).result()
        else:
            row = measure_graph_build(int(frames), config, seed)
        rows.append(row)
        log.info("%d frames: %.2fs build+save, %.0f frames/s", frames, row["total_s"], row["frames_per_s"])
    return add_ratios(rows)


def measure_graph_build(frames: int, config: dict | None = None, seed: int = 0) -> dict[str, Any]:
    """Build, save and reload the graph of ``frames`` synthetic frames; time and size every step."""
    from graph_builder.build import build_graph_from_episodes
    from graph_builder.config import GraphConfig
    from graph_builder.storage import load_graph, save_graph
    from graph_builder.synthetic import synthetic_episodes

    cfg = GraphConfig.from_dict(config) if config else GraphConfig()
    t0 = time.perf_counter()
    episodes = synthetic_episodes(frames, seed=seed)
    generate_s = time.perf_counter() - t0
    rss_before = _reset_peak_rss()
    out_root = tempfile.mkdtemp(prefix="r2a-graph-bench-")
    try:
        t0 = time.perf_counter()
        graph = build_graph_from_episodes(episodes, cfg, name=f"synthetic-{frames}")
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        save_graph(graph, os.path.join(out_root, "graph"))
        save_s = time.perf_counter() - t0
        peak = _peak_rss_mb()
        stages = {k: round(v, 3) for k, v in graph.timings.items()}
        del graph
        t0 = time.perf_counter()
        loaded = load_graph(os.path.join(out_root, "graph"), verify=True)
        load_s = time.perf_counter() - t0
        query = _query_stats(loaded, seed)
        files = loaded.manifest["files"]
        counts = loaded.manifest["counts"]
        row = {
            "frames": counts["frames"], "demos": counts["demos"], "nodes": counts["nodes"],
            "edges": counts["edges"]["total"], "index_type": loaded.manifest["index"]["type"],
            "generate_s": generate_s, "build_s": build_s, "save_s": save_s, "total_s": build_s + save_s,
            "load_s": load_s, "frames_per_s": frames / (build_s + save_s),
            "peak_rss_mb": peak, "build_peak_mb": peak - rss_before,
            "index_mb": files["index.faiss"]["bytes"] / 2**20,
            "graph_mb": sum(f["bytes"] for f in files.values()) / 2**20,
            "stages_s": stages,
            **query,
            "seed": seed, "config": cfg.to_dict(),
            "env": _environment(),
        }
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    return row


def _query_stats(graph, seed: int) -> dict[str, float]:
    """Single-query seed latency (k=10, query_threads) and recall@10 of the index against exact search."""
    import faiss

    rng = np.random.default_rng(seed + 1)
    keys = graph.arrays["node_key"]
    picks = rng.choice(keys.shape[0], size=min(QUERIES, keys.shape[0]), replace=False)
    queries = (keys[picks] + rng.normal(0.0, 0.1, (picks.size, keys.shape[1]))).astype(np.float32)
    latencies = []
    for q in queries:
        t0 = time.perf_counter()
        _, ids = graph.search(q, 10)
        latencies.append(time.perf_counter() - t0)
    exact = faiss.IndexFlatL2(keys.shape[1])
    exact.add(np.ascontiguousarray(keys))
    _, truth = exact.search(queries, 10)
    _, got = graph.search(queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth.tolist(), got.tolist())])
    return {"query_ms_p50": 1e3 * float(np.median(latencies)),
            "query_ms_p95": 1e3 * float(np.percentile(latencies, 95)), "recall_at_10": float(recall)}


def _reset_peak_rss() -> float:
    """Reset the kernel's peak-RSS counter (Linux) and return the current RSS in MB."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
    return _status_mb("VmRSS") or 0.0


def _peak_rss_mb() -> float:
    return _status_mb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _environment() -> dict[str, Any]:
    import faiss

    return {"python": platform.python_version(), "numpy": np.__version__, "faiss": faiss.__version__,
            "cpus": os.cpu_count(), "machine": platform.machine(), "load_avg": os.getloadavg()}


def add_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-frame cost and memory of each size relative to the previous one (1.0 = linear growth)."""
    for prev, row in zip([None, *rows[:-1]], rows):
        if prev is None:
            row["cost_ratio"] = row["mem_ratio"] = None
            continue
        row["cost_ratio"] = (row["total_s"] / row["frames"]) / (prev["total_s"] / prev["frames"])
        row["mem_ratio"] = (row["build_peak_mb"] / row["frames"]) / max(prev["build_peak_mb"] / prev["frames"],
                                                                          1e-12)
    return rows


_COLUMNS = (("frames", "frames", "{:,}"), ("nodes", "nodes", "{:,}"), ("edges", "edges", "{:,}"),
            ("index", "index_type", "{}"), ("build+save s", "total_s", "{:.2f}"),
            ("frames/s", "frames_per_s", "{:,.0f}"), ("cost ratio", "cost_ratio", "{:.2f}"),
            ("peak RSS MB", "peak_rss_mb", "{:.0f}"), ("build peak MB", "build_peak_mb", "{:.0f}"),
            ("mem ratio", "mem_ratio", "{:.2f}"), ("index MB", "index_mb", "{:.2f}"),
            ("graph MB", "graph_mb", "{:.1f}"), ("load s", "load_s", "{:.2f}"),
            ("query ms p50", "query_ms_p50", "{:.3f}"), ("recall@10", "recall_at_10", "{:.3f}"))


def format_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the benchmark rows, plus the 1M-frame target check when that size was run."""
    head = "| " + " | ".join(c for c, _, _ in _COLUMNS) + " |"
    sep = "|" + "|".join("---:" for _ in _COLUMNS) + "|"
    lines = [head, sep]
    for row in rows:
        cells = ["—" if row.get(key) is None else fmt.format(row[key]) for _, key, fmt in _COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    for row in rows:
        if row["frames"] >= 1_000_000:
            verdict = "meets" if row["total_s"] <= TARGET_1M_S else "MISSES"
            lines.append(f"\n{row['frames']:,} frames: {row['total_s']:.1f} s build+save — {verdict} the "
                         f"{TARGET_1M_S:.0f} s target")
    return "\n".join(lines)


def format_stages(rows: list[dict[str, Any]]) -> str:
    """Per-stage build seconds for each size (where the time goes)."""
    stages = list(rows[0]["stages_s"]) if rows else []
    lines = ["| frames | " + " | ".join(stages) + " |", "|---:|" + "---:|" * len(stages)]
    for row in rows:
        lines.append(f"| {row['frames']:,} | " + " | ".join(f"{row['stages_s'].get(s, 0):.2f}" for s in stages)
                     + " |")
    return "\n".join(lines)
