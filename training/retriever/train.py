"""Training the GNN retriever, self-supervised from held-out demonstrations (``r2a retriever train``).

The pipeline, one timed stage each: load the graph → fit the controller response → build (or load) the query
set, running the frozen base policy on every query frame → split by episode → fit input normalization → train
→ calibrate the fallback thresholds → save.

Targets are soft: each candidate's anchored future (its first ``executed_steps`` frames of motion) is compared with
the query demo's true future; ``softmax(-error / target_mm)`` over the candidates is the target distribution, and
the loss is its cross-entropy with the softmax of the scores (a listwise ranking loss, ListNet) plus the squared
error of the progress estimate.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.utils import softmax as segment_softmax
from tqdm import tqdm

from graph_builder.storage import load_graph
from r2a.retrieval.checkpoint import RetrieverCheckpoint, load_retriever, load_train_state, save_retriever
from r2a.retrieval.features import EDGE_FEATURE_DIM, NODE_FEATURE_DIM, QueryLayout
from r2a.retrieval.gnn import RetrieverNet, RetrieverNetConfig
from r2a.retrieval.motion import response_for
from r2a.retrieval.retriever import Candidates, Retriever
from r2a_core.errors import R2AInputError
from r2a_core.files import write_json_atomic
from r2a_core.provenance import legacy_source_sha256, policy_artifacts, sha256_path, source_digests
from r2a_core.training import schedule_progress, training_device, training_wandb_run, warmup_cosine_lr
from training.retriever.config import RetrieverTrainConfig
from training.retriever.queries import (
    CHUNK_CACHE_DIR,
    ChunkCache,
    QuerySet,
    base_identity,
    build_query_set,
    load_query_set,
    save_query_set,
)

log = logging.getLogger(__name__)

QUERY_CACHE = "queries.npz"


def train_retriever(config: RetrieverTrainConfig, graph_dir: str | Path, demo_paths: list[str | Path],
                    out: str | Path, progress: bool = True, wandb_mode: str | None = None,
                    chunk_cache: ChunkCache | None = None) -> dict[str, Any]:
    """Run the whole pipeline into ``out``; resumes from a checkpoint already there. Returns a summary.
    ``chunk_cache``: the base's chunks on recorded frames, shared with later steps that ask the same frames
    (``r2a fit`` gives one); without it a private one in ``out``, removed once the query set is saved."""
    timings: dict[str, float] = {}
    out = Path(out)
    torch.manual_seed(config.seed)
    if config.threads:
        torch.set_num_threads(config.threads)
    device = training_device(config.device)

    t0 = time.perf_counter()
    graph = load_graph(graph_dir)
    response = response_for(graph)
    layout = QueryLayout(history=config.history, chunk_steps=config.chunk_steps,
                         action_dim=int(graph.manifest["action_space"]["dim"]))
    # training reads its candidates through the training path (the wrapper's fast path equals it, derived at load)
    retriever = Retriever(graph, response, replace(config.retrieval, inference="training"), layout, net=None,
                          executed_steps=config.executed_steps)
    timings["graph"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    queries = _queries(config, graph, retriever, response, layout, demo_paths, out, progress, chunk_cache)
    timings["queries"] = time.perf_counter() - t0

    train_rows, val_rows = split_by_episode(queries, config.holdout_every)
    rng = np.random.default_rng(config.seed)
    net = RetrieverNet(RetrieverNetConfig(query_dim=layout.dim, node_dim=NODE_FEATURE_DIM, edge_dim=EDGE_FEATURE_DIM,
                                          hidden=config.hidden, layers=config.layers))
    net.set_normalization(_normalization(queries, train_rows, retriever, rng))
    net.to(device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    start_step, history = _resume(out, net, optimizer, config)

    t0 = time.perf_counter()
    run = training_wandb_run("r2a-retriever", out, config.to_dict(), wandb_mode)
    step = start_step
    bar = tqdm(range(start_step, config.steps), desc="retriever", unit="step", disable=not progress,
               initial=start_step, total=config.steps)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = _lr(config, step)
        rows = rng.choice(train_rows, size=min(config.batch_size, len(train_rows)), replace=False)
        batch = make_batch(queries, rows, retriever, config, rng, device)
        loss, parts = losses(net, batch, config.progress_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            row = {"step": step + 1, "lr": _lr(config, step), **parts}
            if len(val_rows):
                row.update({f"val_{k}": v for k, v in evaluate(net, queries, val_rows[:512], retriever, config,
                                                               device).items()})
            history.append(row)
            bar.set_postfix(loss=f"{parts['loss']:.3f}", **({"val_ref_mm": f"{row['val_ref_mm']:.1f}"}
                                                             if "val_ref_mm" in row else {}))
            if run is not None:
                run.log(row, step=step + 1)
        if (step + 1) % config.save_every == 0 and step + 1 < config.steps:
            _save(out, net, optimizer, queries, retriever, config, graph, history, demo_paths, step + 1, train_rows)
    bar.close()
    timings["train"] = time.perf_counter() - t0
    if run is not None:
        run.finish()
    final = _save(out, net, optimizer, queries, retriever, config, graph, history, demo_paths, config.steps,
                  train_rows, final=True)
    summary = {"out": str(out), "queries": len(queries), "train": int(len(train_rows)), "val": int(len(val_rows)),
               "conditions": queries.conditions, "steps": config.steps, "timings_s": timings,
               "final": history[-1] if history else {}, "thresholds": final.thresholds}
    write_json_atomic(out / "train_summary.json", summary)
    return summary


# --------------------------------------------------------------------------------------------- queries

def _queries(config: RetrieverTrainConfig, graph, retriever: Retriever, response, layout: QueryLayout,
             demo_paths: list[str | Path], out: Path, progress: bool,
             chunk_cache: ChunkCache | None = None) -> QuerySet:
    """The query set: from the cache in ``out`` when it was built from the same inputs, else built anew."""
    from demos.dataset import load_episodes
    from r2a.policies import make_policy

    policy = make_policy(config.base, None, config.seed)  # first: what it loaded is part of the cache's key
    base = base_identity(config.base, policy_artifacts(policy))
    fingerprint = _inputs_fingerprint(base, config, graph, [sha256_path(p) for p in demo_paths])
    cache = out / QUERY_CACHE
    if cache.is_file():
        cached = load_query_set(cache)
        key = cached.sources[0].get("fingerprint") if cached.sources else None
        # a cache keyed before issue 47 holds the name-salted source digests (legacy_source_sha256): the same inputs
        if key == fingerprint or key == _inputs_fingerprint(base, config, graph,
                                                            [legacy_source_sha256(p) for p in demo_paths]):
            log.info("reusing %d queries from %s", len(cached), cache)
            return cached
    _refuse_graph_demos(graph, demo_paths)
    sources = [(str(p), load_episodes(p)) for p in demo_paths]
    own = chunk_cache is None  # without a shared cache, a private one: a stopped build resumes at its episode
    asked = ChunkCache(out / CHUNK_CACHE_DIR, base) if own else chunk_cache
    queries = build_query_set(sources, policy, retriever, response, layout, config.executed_steps,
                              config.frame_stride, config.predict_batch, progress, asked)
    queries.sources = [{**queries.sources[0], "fingerprint": fingerprint}, *queries.sources[1:]]
    save_query_set(queries, cache)
    if own and asked.directory.is_dir():
        shutil.rmtree(asked.directory)
    return queries


def _inputs_fingerprint(base: str, config: RetrieverTrainConfig, graph, source_digests: list[str]) -> str:
    """The query cache's key: what the queries depend on — the base by its identity (``base_identity``: the spec and
    the files it loaded), the demo files by their digests."""
    digest = hashlib.sha256()
    for part in (base, config.history, config.chunk_steps, config.executed_steps, config.frame_stride,
                 graph.manifest.get("files", {}).get("arrays/node_key.npy", {}).get("sha256"), *source_digests):
        digest.update(str(part).encode())
    return digest.hexdigest()[:16]


def _refuse_graph_demos(graph, demo_paths: list[str | Path]) -> None:
    """Held-out demos must not be in the graph (a query would find its own future there). A graph built before
    issue 47 recorded its sources' name-salted digests: either digest of a file names it."""
    in_graph = {s.get("sha256") for s in graph.manifest.get("sources", [])} - {None}
    for path in demo_paths:
        if in_graph.intersection(source_digests(path)):
            raise R2AInputError(f"{path}: this file is one of the graph's sources; train the retriever on "
                                "held-out demonstrations (the graph must not contain the query demos)")


def split_by_episode(queries: QuerySet, every: int) -> tuple[np.ndarray, np.ndarray]:
    """Query rows of training and validation episodes (every ``every``-th episode validates)."""
    rows = np.arange(len(queries))
    if every <= 0:
        return rows, rows[:0]
    val = (queries.episode % every) == every - 1
    if val.all() or not val.any():
        return rows, rows[:0]
    return rows[~val], rows[val]


# ----------------------------------------------------------------------------------------------- batches

def candidates_of(queries: QuerySet, row: int, retriever: Retriever, chunk_noise: float = 0.0,
                  rng: np.random.Generator | None = None) -> Candidates:
    query = queries.query[row]
    if chunk_noise > 0 and rng is not None:
        query = query.copy()
        width = retriever.layout.chunk_steps * retriever.layout.action_dim
        query[:width] += rng.normal(0, chunk_noise, width).astype(np.float32)
    return retriever.candidates_for(query, queries.implied[row], queries.now_pos[row], queries.now_quat[row],
                                    float(queries.now_gripper[row]), float(queries.phase[row]),
                                    retriever.task_id(queries.prompt[row]))


def future_errors_mm(arrays: dict[str, np.ndarray], nodes: np.ndarray, future_dpos: np.ndarray,
                     future_gripper: np.ndarray, gripper_mm: float) -> np.ndarray:
    """Each node's future-motion error against the true future, mean over the steps, in millimetres."""
    f = len(future_dpos)
    cand = arrays["future_dpos"][nodes][:, :f].astype(np.float64)
    pos = np.linalg.norm(cand - future_dpos[None], axis=-1).mean(axis=1) * 1000.0
    grip = np.abs(arrays["future_gripper"][nodes][:, :f] - future_gripper[None]).mean(axis=1)
    return pos + gripper_mm * grip


def make_batch(queries: QuerySet, rows: np.ndarray, retriever: Retriever, config: RetrieverTrainConfig,
               rng: np.random.Generator | None, device: torch.device) -> dict[str, Any]:
    xs, edges, attrs, batch, targets, errors, nodes = [], [], [], [], [], [], []
    offset = 0
    for b, row in enumerate(rows):
        cand = candidates_of(queries, int(row), retriever, config.chunk_noise, rng)
        n = len(cand.subgraph.nodes)
        err = future_errors_mm(retriever.arrays, cand.subgraph.nodes, queries.future_dpos[row],
                               queries.future_gripper[row], config.gripper_mm)
        t = np.exp(-(err - err.min()) / config.target_mm)
        xs.append(cand.x)
        edges.append(cand.subgraph.edge_index + offset)
        attrs.append(cand.edge_attr)
        batch.append(np.full(n, b))
        targets.append(t / t.sum())
        errors.append(err)
        nodes.append(cand.subgraph.nodes)
        offset += n
    as_t = lambda a, dt=torch.float32: torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dt)  # noqa: E731
    return {"query": as_t(queries.query[rows]), "x": as_t(np.concatenate(xs)),
            "edge_index": as_t(np.concatenate(edges, axis=1), torch.long), "edge_attr": as_t(np.concatenate(attrs)),
            "batch": as_t(np.concatenate(batch), torch.long), "target": as_t(np.concatenate(targets)),
            "progress": as_t(queries.progress[rows]), "errors": errors, "nodes": nodes, "rows": rows}


def losses(net: RetrieverNet, batch: dict[str, Any], progress_weight: float) -> tuple[torch.Tensor, dict[str, float]]:
    scores, progress = net(batch["query"], batch["x"], batch["edge_index"], batch["edge_attr"], batch["batch"])
    log_p = torch.log(segment_softmax(scores, batch["batch"], num_nodes=len(batch["query"])).clamp_min(1e-12))
    listwise = -(batch["target"] * log_p).sum() / len(batch["query"])
    progress_loss = torch.mean((progress - batch["progress"]) ** 2)
    loss = listwise + progress_weight * progress_loss
    return loss, {"loss": float(loss.detach()), "listwise": float(listwise.detach()),
                  "progress": float(progress_loss.detach())}


@torch.no_grad()
def evaluate(net: RetrieverNet, queries: QuerySet, rows: np.ndarray, retriever: Retriever,
             config: RetrieverTrainConfig, device: torch.device, chunk: int = 64) -> dict[str, float]:
    """Validation: losses, and the fused top-K future's error (mm) for the GNN and for plain kNN ranking."""
    net.eval()
    totals: dict[str, list[float]] = {"loss": [], "ref_mm": [], "knn_mm": [], "oracle_mm": [], "progress_abs": []}
    k = config.retrieval.top_k
    for i in range(0, len(rows), chunk):
        part = rows[i:i + chunk]
        batch = make_batch(queries, part, retriever, config, None, device)
        _, parts = losses(net, batch, config.progress_weight)
        scores, progress = net(batch["query"], batch["x"], batch["edge_index"], batch["edge_attr"], batch["batch"])
        scores = scores.cpu().numpy()
        owner = batch["batch"].cpu().numpy()
        totals["loss"].append(parts["loss"] * len(part))
        totals["progress_abs"].extend(np.abs(progress.cpu().numpy() - queries.progress[part]).tolist())
        for b, row in enumerate(part):
            s = scores[owner == b]
            nodes = batch["nodes"][b]
            key_rank = np.argsort(retriever.candidates_for(  # knn ranks the same candidates by key distance
                queries.query[row], queries.implied[row], queries.now_pos[row], queries.now_quat[row],
                float(queries.now_gripper[row]), float(queries.phase[row]),
                retriever.task_id(queries.prompt[row])).key_distance, kind="stable")[:k]
            top = np.argsort(-s, kind="stable")[:k]
            w = np.exp(s[top] - s[top].max())
            totals["ref_mm"].append(_fused_error(retriever.arrays, nodes[top], w, queries, row))
            totals["knn_mm"].append(_fused_error(retriever.arrays, nodes[key_rank], np.ones(len(key_rank)), queries,
                                                 row))
            best = np.argsort(batch["errors"][b], kind="stable")[:k]
            totals["oracle_mm"].append(_fused_error(retriever.arrays, nodes[best], np.ones(len(best)), queries, row))
    net.train()
    n = max(len(rows), 1)
    return {"loss": float(np.sum(totals["loss"]) / n), "ref_mm": float(np.mean(totals["ref_mm"])),
            "knn_mm": float(np.mean(totals["knn_mm"])), "oracle_mm": float(np.mean(totals["oracle_mm"])),
            "progress_abs": float(np.mean(totals["progress_abs"]))}


def _fused_error(arrays: dict[str, np.ndarray], nodes: np.ndarray, weights: np.ndarray, queries: QuerySet,
                 row: int) -> float:
    true = queries.future_dpos[row]
    w = weights / weights.sum()
    fused = np.einsum("k,kjd->jd", w, arrays["future_dpos"][nodes][:, : len(true)].astype(np.float64))
    return float(np.linalg.norm(fused - true, axis=1).mean() * 1000.0)


def _normalization(queries: QuerySet, rows: np.ndarray, retriever: Retriever,
                   rng: np.random.Generator) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    sample = rng.choice(rows, size=min(len(rows), 256), replace=False)
    cands = [candidates_of(queries, int(r), retriever) for r in sample]
    stats = {}
    for name, values in (("query", queries.query[rows]), ("node", np.concatenate([c.x for c in cands])),
                         ("edge", np.concatenate([c.edge_attr for c in cands]))):
        stats[name] = (torch.from_numpy(values.mean(0).astype(np.float32)),
                       torch.from_numpy(values.std(0).astype(np.float32)))
    return stats


# ----------------------------------------------------------------------------------------- bookkeeping

#: linear learning-rate warm-up, then a cosine decay to 0 over the remaining steps
WARMUP_STEPS = 100


def _lr(config: RetrieverTrainConfig, step: int) -> float:
    return warmup_cosine_lr(config.lr, step, WARMUP_STEPS, schedule_progress(step, WARMUP_STEPS, config.steps))


def _resume(out: Path, net: RetrieverNet, optimizer: torch.optim.Optimizer,
            config: RetrieverTrainConfig) -> tuple[int, list[dict[str, Any]]]:
    if not (out / "manifest.json").is_file():
        return 0, []
    previous = load_retriever(out)
    if previous.train_config and {k: v for k, v in previous.train_config.items() if k != "steps"} != \
            {k: v for k, v in config.to_dict().items() if k != "steps"}:
        raise R2AInputError(f"{out}: holds a retriever trained with another config; use a new --out (only 'steps' "
                            "may change when resuming)")
    net.load_state_dict(previous.net.state_dict())
    state = load_train_state(out, optimizer)
    step = int(state["step"]) if state else int(previous.train_config.get("steps", config.steps))
    log.info("resuming %s at step %d of %d", out, step, config.steps)
    return min(step, config.steps), previous.history


def _save(out: Path, net: RetrieverNet, optimizer: torch.optim.Optimizer, queries: QuerySet, retriever: Retriever,
          config: RetrieverTrainConfig, graph, history: list[dict[str, Any]], demo_paths: list[str | Path],
          step: int, train_rows: np.ndarray, final: bool = False) -> RetrieverCheckpoint:
    ckpt = RetrieverCheckpoint(
        net=net, layout=retriever.layout, settings=dict(config.retrieval.__dict__),
        executed_steps=config.executed_steps,
        graph={"path": str(graph.path), "nodes": graph.num_nodes,
               "node_key_sha256": graph.manifest.get("files", {}).get("arrays/node_key.npy", {}).get("sha256")},
        thresholds=calibrate_thresholds(queries, train_rows, retriever, copy.deepcopy(net).cpu().eval()),
        train_config=config.to_dict(),
        provenance={"demos": [{"path": str(p), "sha256": sha256_path(p)} for p in demo_paths],
                    "conditions": queries.conditions, "sources": queries.sources,
                    "seeds": sorted({int(s) for src in queries.sources for s in src.get("seeds", [])})},
        history=history)
    save_retriever(ckpt, out, None if final else optimizer, None if final else {"step": step})
    return ckpt


def calibrate_thresholds(queries: QuerySet, rows: np.ndarray, retriever: Retriever,
                         net: RetrieverNet | None = None) -> dict[str, float]:
    """Fallback thresholds from the training queries: a seed distance beyond 1.5× the 99th percentile seen in
    training means the execution has left the demonstrated states; with the trained ``net``, a candidate-weight
    entropy above the 99.5th percentile seen in training means retrieval is unusually unsure."""
    rng = np.random.default_rng(0)
    sample = rows if len(rows) <= 2000 else rng.choice(rows, 2000, replace=False)
    dist = [candidates_of(queries, int(r), retriever).seed_distance for r in sample]
    out = {"max_seed_distance": float(1.5 * np.percentile(dist, 99)) if dist else float("inf"),
           "seed_distance_p50": float(np.median(dist)) if dist else 0.0}
    if net is not None and len(rows):
        scorer = Retriever(retriever.graph, retriever.response, retriever.settings, retriever.layout, net=net,
                           executed_steps=retriever.executed_steps)
        entropies = []
        for r in sample[:500]:
            cand = candidates_of(queries, int(r), retriever)
            scores, progress = scorer._score(cand)
            entropies.append(scorer._pick(cand, scores, progress, uniform=False).entropy)
        out["max_entropy"] = float(min(1.0, np.percentile(entropies, 99.5)))
        out["entropy_p50"] = float(np.median(entropies))
    return out


__all__ = ["calibrate_thresholds", "candidates_of", "evaluate", "future_errors_mm", "losses", "make_batch",
           "split_by_episode", "train_retriever"]
