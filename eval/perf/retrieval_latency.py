"""What R2A adds to every query: ``r2a bench perf retrieval``.

For each graph size (synthetic demonstrations, built in a fresh process so one size's memory does not colour the
next) the R2A wrapper answers queries on one thread around a base that returns a precomputed chunk, so only the
wrapper's own cost is timed: history, query encoding, FAISS seeds, the bounded subgraph, node features, the GNN,
reference synthesis and the gate (wall time, and the query's CPU time: on a shared machine the gap between the
two is the time it waited for a core). Two implementations of the same wrapper answer the same queries,
interleaved (alternating which goes first, so the machine's noise falls on both alike): ``training`` — the code
the retriever is trained with (torch_geometric network, features from the graph arrays, the gate's torch module)
— and ``fast``, the default (:mod:`r2a.retrieval.gnn_fast`, the per-graph node table, the gate as arrays). Reported
per path: p50/p99 per query and per control step (a query serves ``executed_steps`` steps), per stage (query
encoding, seeds, subgraph, features, GNN, synthesis, gate, the rest: history, blend, diagnostics), and the
ratio to the base policy's own query (the built-in VLA on 64-px images, timed in the same process); and, as the
known-answer check, whether both paths chose the same nodes with the same weights on every query.

The GNN's weights come from the shipped retriever checkpoint (its cost does not depend on what it learned); the
graph-specific pieces (seeds, neighbourhoods, features) are built on each synthetic graph.

Through the proxy (``proxy=True``, :func:`measure_proxy_latency`): what a robot client sees on loopback, in one
process — its round trip straight to a server of a cheap base (a precomputed chunk per query) and through
``r2a serve --upstream`` in front of that same server, queries interleaved, two camera images per request as a
VLA client sends them. The difference is the proxy's hop (decode, re-encode, one more round trip) plus R2A.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_NODES = (10_000, 100_000, 1_000_000)
#: synthetic demos have ~0.2 nodes per frame (stride 5 plus gripper events)
FRAMES_PER_NODE = 4.9
TARGET_P99_MS = 2.0
#: the timed stages of a query; ``rest`` is what the others leave (history, the base call, top-K, blend, diagnostics)
STAGES = ("query", "seeds", "subgraph", "features", "gnn", "synthesis", "gate", "rest")
#: the implementations timed side by side (``retrieval.inference``); the last is the default
PATHS = ("training", "fast")


def run_retrieval_benchmark(nodes: tuple[int, ...] | list[int] = DEFAULT_NODES, queries: int = 300,
                            warmup: int = 30, retriever: str | None = None, isolate: bool = True,
                            seed: int = 0, proxy: bool = True) -> dict[str, Any]:
    """Every size, plus the base policy's own query time, measured side by side on one thread; with ``proxy``
    also the client's round trip with and without the R2A proxy in the path (on the smallest graph)."""
    rows = []
    for size in nodes:
        log.info("retrieval latency: graph of ~%d nodes", size)
        args = (int(size), queries, warmup, retriever, seed)
        if isolate:
            with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
                rows.append(pool.submit(measure_wrapper_latency, *args).result())
        else:
            rows.append(measure_wrapper_latency(*args))
    base = measure_base_latency(queries, warmup, seed)
    for row in rows:
        row["ratio_to_base_query_p50"] = row["query_ms_p50"] / base["query_ms_p50"]
    through_proxy = None
    if proxy:
        args = (int(min(nodes)), queries, warmup, retriever, seed)
        log.info("round trip through the R2A proxy: graph of ~%d nodes", args[0])
        if isolate:
            with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
                through_proxy = pool.submit(measure_proxy_latency, *args).result()
        else:
            through_proxy = measure_proxy_latency(*args)
    return {"rows": rows, "base": base, "proxy": through_proxy, "target_p99_ms_at_100k": TARGET_P99_MS,
            "machine": _machine()}


def measure_wrapper_latency(nodes: int, queries: int = 300, warmup: int = 30, retriever: str | None = None,
                            seed: int = 0) -> dict[str, Any]:
    """The wrapper's added cost per query on a synthetic graph of about ``nodes`` nodes (one thread), for each of
    :data:`PATHS` on the same queries; the row's top-level numbers are the default (fast) path's."""
    import faiss
    import torch

    from graph_builder.build import build_graph_from_episodes
    from graph_builder.synthetic import synthetic_episodes

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    t0 = time.perf_counter()
    episodes = synthetic_episodes(int(nodes * FRAMES_PER_NODE), seed=seed)
    graph = build_graph_from_episodes(episodes)
    build_s = time.perf_counter() - t0
    policies, chunks = _wrappers_on(graph, retriever, episodes, seed)
    observations = _observations(episodes, seed, warmup + queries)
    times: dict[str, list[dict[str, float]]] = {name: [] for name in PATHS}
    agree, weight_diff, candidates = 0, 0.0, []
    for i, (obs, chunk) in enumerate(zip(observations, chunks)):
        order = PATHS if i % 2 == 0 else PATHS[::-1]
        found = {name: _timed_query(policies[name], obs, chunk) for name in order}
        if i < warmup:
            continue
        for name in PATHS:
            times[name].append(found[name][0])
        diag = {name: found[name][1] for name in PATHS}
        a, b = diag["training"], diag["fast"]
        agree += a.get("nodes") == b.get("nodes") and a.get("fallback") == b.get("fallback")
        if a.get("weights") and len(a["weights"]) == len(b.get("weights") or []):
            weight_diff = max(weight_diff, float(np.max(np.abs(np.subtract(a["weights"], b["weights"])))))
        candidates.append(int(b.get("candidates", 0)))
    steps = policies["fast"].parts.executed_steps
    paths = {name: _latency(times[name], steps) for name in PATHS}
    return {"nodes": graph.num_nodes, "frames": int(sum(len(e) for e in episodes)), "build_s": round(build_s, 2),
            "index": graph.manifest["index"]["type"], "queries": len(times["fast"]), "executed_steps": steps,
            **{k: v for k, v in paths["fast"].items() if not k.startswith("stages")}, "paths": paths,
            "speedup_p50": paths["training"]["query_ms_p50"] / paths["fast"]["query_ms_p50"],
            "paths_agree": agree / max(len(times["fast"]), 1), "max_weight_diff": weight_diff,
            "candidates_mean": float(np.mean(candidates)) if candidates else 0.0}


def _timed_query(policy: Any, obs: dict[str, Any], chunk: np.ndarray) -> tuple[dict[str, float], dict[str, Any]]:
    """One query of ``policy`` as a fresh episode at the frame's step: seconds per stage (and ``total``), and the
    wrapper's diagnostics."""
    policy.base.reply = {"actions": chunk}
    policy.history.reset()  # each query stands alone (untimed)
    policy._started = True
    stages: dict[str, float] = {}
    policy.stage_times = policy.parts.retriever.stage_times = stages
    start, start_cpu = time.perf_counter(), time.thread_time()
    out = policy.infer(obs)
    total, cpu = time.perf_counter() - start, time.thread_time() - start_cpu
    policy.stage_times = policy.parts.retriever.stage_times = None
    if out["r2a"].get("fallback"):
        log.debug("query fell back: %s", out["r2a"]["fallback"])
    stages["rest"] = max(total - sum(stages.values()), 0.0)
    stages["total"], stages["cpu"] = total, cpu
    return stages, out["r2a"]


def _latency(times: list[dict[str, float]], steps: int) -> dict[str, Any]:
    """p50/p99 (ms) per query, per control step and per stage; and the query's CPU time (its thread's), which on
    a shared machine leaves out the time the query waited for a core — what the code costs, beside what a
    neighbour-free machine would see at best."""
    ms = 1e3 * np.asarray([t["total"] for t in times])
    cpu = 1e3 * np.asarray([t.get("cpu", np.nan) for t in times])
    stage = {name: 1e3 * np.asarray([t.get(name, 0.0) for t in times]) for name in STAGES}
    return {"query_ms_p50": float(np.median(ms)), "query_ms_p99": float(np.percentile(ms, 99)),
            "query_cpu_ms_p50": float(np.median(cpu)), "query_cpu_ms_p99": float(np.percentile(cpu, 99)),
            "query_ms_mean": float(ms.mean()), "per_step_ms_p50": float(np.median(ms)) / steps,
            "per_step_ms_p99": float(np.percentile(ms, 99)) / steps,
            "stages_ms_p50": {k: round(float(np.median(v)), 4) for k, v in stage.items()},
            "stages_ms_p99": {k: round(float(np.percentile(v, 99)), 4) for k, v in stage.items()}}


def retriever_for_graph(checkpoint: Path, graph: Any, out: Path) -> Path:
    """A copy of ``checkpoint`` whose manifest names ``graph`` (weights unchanged), so a wrapper on a synthetic
    graph runs the shipped network: latency does not depend on what the network learned, only on its shape."""
    from dataclasses import replace

    from r2a.retrieval.checkpoint import load_retriever, save_retriever

    ckpt = load_retriever(checkpoint)
    digest = graph.manifest.get("files", {}).get("arrays/node_key.npy", {}).get("sha256")
    save_retriever(replace(ckpt, graph={"path": str(graph.path), "nodes": graph.num_nodes,
                                        "node_key_sha256": digest}), out)
    return out


class _PrecomputedBase:
    """A base that answers instantly with the chunk the benchmark set (so only the wrapper is timed)."""

    def __init__(self) -> None:
        self.reply: dict[str, Any] = {"actions": np.zeros((16, 7), np.float32)}

    def reset(self) -> None:
        return None

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        return self.reply


def _wrappers_on(graph: Any, retriever: str | None, episodes: list,
                 seed: int) -> tuple[dict[str, Any], list[np.ndarray]]:
    """The shipped config's wrapper on ``graph`` (its GNN weights from the retriever checkpoint), once per path
    of :data:`PATHS` (sharing the graph structures), and the base chunks to answer with."""
    from dataclasses import replace

    from r2a.retrieval.checkpoint import load_retriever
    from r2a.retrieval.motion import response_for
    from r2a.retrieval.retriever import Retriever
    from r2a.wrapper.build import build_gate, load_r2a_config
    from r2a.wrapper.config import resolve_path
    from r2a.wrapper.policy import R2APolicy, WrapperParts
    from r2a_core.types import OSC_POSE_DELTA

    config = load_r2a_config()
    ckpt = load_retriever(resolve_path(retriever or str(config.retriever)))
    response = response_for(graph)
    fast = Retriever(graph, response, replace(config.retrieval, inference="fast"), ckpt.layout, net=ckpt.net,
                     executed_steps=config.executed_steps)
    policies = {}
    for name in PATHS:
        gate, max_gate = build_gate(config, OSC_POSE_DELTA, {})  # the shipped gate (the learned one, image signal on)
        if hasattr(gate, "fast"):  # the learned gate: the training path runs its torch module
            gate = replace(gate, fast=name == "fast")
        parts = WrapperParts(retriever=fast if name == "fast" else fast.with_inference(name), response=response,
                             action_space=OSC_POSE_DELTA, gate=gate, executed_steps=config.executed_steps,
                             conversion=config.conversion, max_seed_distance=float("inf"), max_entropy=1.0,
                             recovery=None, max_gate=max_gate)
        policies[name] = R2APolicy(_PrecomputedBase(), parts)
    rng = np.random.default_rng(seed)
    chunks = []
    for _ in range(10_000):
        ep = episodes[rng.integers(len(episodes))]
        t = int(rng.integers(0, max(len(ep) - 16, 1)))
        chunks.append(np.asarray(ep.actions[t:t + 16], np.float32))
        if len(chunks) >= 1000:
            break
    return policies, chunks


def _observations(episodes: list, seed: int, count: int) -> list[dict[str, Any]]:
    """Observations of random demo frames (pose, gripper, instruction, step), as the wrapper sees them."""
    rng = np.random.default_rng(seed + 1)
    out = []
    for _ in range(count):
        ep = episodes[rng.integers(len(episodes))]
        t = int(rng.integers(0, len(ep)))
        out.append({"state/ee_pos": ep.ee_pos[t], "state/ee_quat": ep.ee_quat[t], "state/gripper": ep.gripper[t],
                    "prompt": ep.instruction, "state/step": t,  # a 64-px agentview image for the gate's image signal
                    "images/agentview": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)})
    return out


def measure_base_latency(queries: int = 300, warmup: int = 30, seed: int = 0) -> dict[str, Any]:
    """The built-in VLA's own query on 64-px images, one thread (what R2A's cost is compared with)."""
    import torch

    from r2a.vla.policy import BuiltinVLAPolicy

    torch.set_num_threads(1)
    policy = BuiltinVLAPolicy(threads=1)
    rng = np.random.default_rng(seed)
    size = policy.config.image_size
    obs = {f"images/{cam}": rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for cam in policy.config.cameras}
    obs.update({"state/ee_pos": np.array([0.0, 0.0, 1.0]), "state/ee_quat": np.array([0.0, 1.0, 0.0, 0.0]),
                "state/gripper": np.float32(1.0), "prompt": "pick up the red cube", "state/step": 0})
    times = []
    for i in range(warmup + queries):
        start = time.perf_counter()
        policy.infer(obs)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    ms = 1e3 * np.asarray(times)
    return {"policy": "builtin", "query_ms_p50": float(np.median(ms)), "query_ms_p99": float(np.percentile(ms, 99)),
            "per_step_ms_p50": float(np.median(ms)) / policy.n_action_steps}


class _CyclingBase:
    """The upstream of the proxy measurement: answers each query with the next precomputed chunk."""

    def __init__(self, chunks: list[np.ndarray]) -> None:
        self.chunks, self.calls = chunks, 0

    def reset(self) -> None:
        return None

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return {"actions": self.chunks[self.calls % len(self.chunks)]}


def measure_proxy_latency(nodes: int = 10_000, queries: int = 300, warmup: int = 30, retriever: str | None = None,
                          seed: int = 0, image_size: int = 224) -> dict[str, Any]:
    """The client's round trip (p50/p99 ms) to a PolicyServer of a cheap base, and through the R2A proxy in front
    of it, on a synthetic graph of about ``nodes`` nodes (module docstring). The GNN of ``retriever`` (default:
    the shipped one) when it exists, else plain nearest neighbours (``retrieval.mode=knn``)."""
    import tempfile

    import faiss

    from graph_builder.build import build_graph_from_episodes
    from graph_builder.storage import save_graph
    from graph_builder.synthetic import synthetic_episodes
    from r2a.adapters.openpi_policy import OpenPIWebsocketPolicy
    from r2a.serve.policy_server import PolicyServer
    from r2a.serve.proxy import build_proxy
    from r2a.wrapper.build import load_r2a_config
    from r2a.wrapper.config import resolve_path

    faiss.omp_set_num_threads(1)
    episodes = synthetic_episodes(int(nodes * FRAMES_PER_NODE), seed=seed)
    graph = build_graph_from_episodes(episodes)
    ckpt = retriever or load_r2a_config().retriever
    mode = "gnn" if ckpt and resolve_path(str(ckpt)).exists() else "knn"
    if mode == "gnn":
        import torch

        torch.set_num_threads(1)
    else:
        log.warning("no retriever checkpoint at %s: timing the proxy with retrieval.mode=knn", ckpt)
    rng = np.random.default_rng(seed)
    chunks = [np.asarray(ep.actions[t:t + 16], np.float32) for ep in episodes[:50]
              for t in range(0, max(len(ep) - 16, 1), 8)]
    chunks = [c for c in chunks if len(c) == 16] or [np.zeros((16, 7), np.float32)]
    images = {f"images/{cam}": rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8)
              for cam in ("agentview", "wrist")}
    with tempfile.TemporaryDirectory() as tmp:
        graph_dir = save_graph(graph, Path(tmp) / "graph")
        overrides = [f"graph={graph_dir}", "recovery.enabled=false", "fallback.max_seed_distance=1000000"]
        if mode == "gnn":
            overrides.append(f"retriever={retriever_for_graph(resolve_path(str(ckpt)), graph, Path(tmp) / 'gnn')}")
        else:
            overrides += ["retriever=null", "retrieval.mode=knn"]
        with PolicyServer(_CyclingBase(chunks), port=0, metadata={"policy": "perf-upstream"}) as upstream:
            proxy_policy = build_proxy("r2a:?" + "&".join(overrides), f"ws://127.0.0.1:{upstream.port}",
                                       connect_timeout=10)
            steps = proxy_policy.n_action_steps
            with PolicyServer(proxy_policy, port=0, metadata=proxy_policy.metadata) as proxy, \
                    OpenPIWebsocketPolicy(f"ws://127.0.0.1:{upstream.port}") as direct, \
                    OpenPIWebsocketPolicy(f"ws://127.0.0.1:{proxy.port}") as proxied:
                times: dict[str, list[float]] = {"direct": [], "proxy": []}
                server_ms, fallbacks, done = [], 0, 0
                while done < warmup + queries:
                    ep = episodes[rng.integers(len(episodes))]
                    direct.reset()
                    proxied.reset()  # a new episode: the proxy's wrapper starts over (untimed)
                    for t in range(0, len(ep), steps):
                        if done >= warmup + queries:
                            break
                        obs = {**images, "state/ee_pos": ep.ee_pos[t], "state/ee_quat": ep.ee_quat[t],
                               "state/gripper": np.float32(ep.gripper[t]), "prompt": ep.instruction,
                               "state/step": t}
                        order = (("direct", direct), ("proxy", proxied))
                        for name, client in order if done % 2 == 0 else order[::-1]:
                            start = time.perf_counter()
                            reply = client.infer(obs)
                            elapsed = time.perf_counter() - start
                            if done >= warmup:
                                times[name].append(elapsed)
                                if name == "proxy":
                                    server_ms.append(reply["server_timing"]["infer_ms"])
                                    fallbacks += bool(reply["r2a"].get("fallback"))
                        done += 1
            proxy_policy.close()
    direct_ms, proxy_ms = 1e3 * np.asarray(times["direct"]), 1e3 * np.asarray(times["proxy"])
    return {"nodes": graph.num_nodes, "mode": mode, "image_size": image_size, "queries": len(proxy_ms),
            "direct_ms_p50": float(np.median(direct_ms)), "direct_ms_p99": float(np.percentile(direct_ms, 99)),
            "proxy_ms_p50": float(np.median(proxy_ms)), "proxy_ms_p99": float(np.percentile(proxy_ms, 99)),
            "added_ms_p50": float(np.median(proxy_ms) - np.median(direct_ms)),
            "proxy_server_ms_p50": float(np.median(server_ms)), "fallback_share": fallbacks / max(len(proxy_ms), 1)}


def _machine() -> dict[str, Any]:
    from r2a_core.provenance import cpu_model

    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "load_avg": list(os.getloadavg())}


def format_table(result: dict[str, Any]) -> str:
    """Markdown: per graph size both paths' query latency, then their stages side by side, then the base policy
    beside them (and the proxy's round trip when measured)."""
    base = result["base"]
    lines = [f"R2A wrapper's added cost, one thread — {result['machine']['cpu']}, load "
             f"{result['machine']['load_avg'][0]:.2f}; target p99 ≤ {result['target_p99_ms_at_100k']} ms per query "
             "at 100k nodes", "",
             "| nodes | index | path | query p50 ms | query p99 ms | query CPU p50 ms | query CPU p99 ms "
             "| per step p50 ms | per step p99 ms | vs base query |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        for name, path in _paths(r).items():
            lines.append(f"| {r['nodes']:,} | {r['index']} | {name} | {path['query_ms_p50']:.3f} | "
                         f"{path['query_ms_p99']:.3f} | {path.get('query_cpu_ms_p50', float('nan')):.3f} | "
                         f"{path.get('query_cpu_ms_p99', float('nan')):.3f} | {path['per_step_ms_p50']:.3f} | "
                         f"{path['per_step_ms_p99']:.3f} | {100 * path['query_ms_p50'] / base['query_ms_p50']:.1f} % |")
    for r in result["rows"]:
        paths = _paths(r)
        lines += ["", _stages_heading(r), "",
                  "| stage | " + " | ".join(f"{n} p50 | {n} p99" for n in paths) + " |",
                  "|---" * (1 + 2 * len(paths)) + "|"]
        for stage in STAGES:
            cells = [f"{p['stages_ms_p50'].get(stage, 0.0):.3f} | {p['stages_ms_p99'].get(stage, 0.0):.3f}"
                     for p in paths.values()]
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
        lines.append("| **query** | " + " | ".join(f"**{p['query_ms_p50']:.3f}** | **{p['query_ms_p99']:.3f}**"
                                                  for p in paths.values()) + " |")
    lines += ["", f"base policy (built-in VLA, 64 px, one thread): query p50 {base['query_ms_p50']:.2f} ms, "
              f"p99 {base['query_ms_p99']:.2f} ms, {base['per_step_ms_p50']:.2f} ms per control step"]
    proxy = result.get("proxy")
    if proxy:
        lines += ["", f"client round trip on loopback, two {proxy['image_size']}-px images per request "
                      f"({proxy['nodes']:,} nodes, {proxy['mode']}, {proxy['queries']} queries; R2A fell back on "
                      f"{100 * proxy['fallback_share']:.0f} %):", "",
                  "| path | p50 ms | p99 ms |", "|---|---|---|",
                  f"| client → base server | {proxy['direct_ms_p50']:.3f} | {proxy['direct_ms_p99']:.3f} |",
                  f"| client → R2A proxy → base server | {proxy['proxy_ms_p50']:.3f} | {proxy['proxy_ms_p99']:.3f} |",
                  "", f"the proxy adds {proxy['added_ms_p50']:.3f} ms at p50 (its own server time, upstream "
                      f"round trip included: {proxy['proxy_server_ms_p50']:.3f} ms)"]
    return "\n".join(lines) + "\n"


def _stages_heading(row: dict[str, Any]) -> str:
    heading = (f"{row['nodes']:,} nodes, per stage (ms), {row['queries']} queries, {row['candidates_mean']:.0f} "
               "candidates on average")
    if "paths_agree" not in row:
        return heading
    return (f"{heading}; both paths chose the same nodes on {100 * row['paths_agree']:.0f} % of queries, their "
            f"weights (4 decimals) within {row['max_weight_diff']:.1e}")


def _paths(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A row's per-path numbers (a row written before both paths were timed holds one, the default's)."""
    return row.get("paths") or {"fast": row}


__all__ = ["DEFAULT_NODES", "format_table", "measure_base_latency", "measure_proxy_latency",
           "measure_wrapper_latency", "run_retrieval_benchmark"]
