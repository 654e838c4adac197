"""Build an :class:`~r2a.wrapper.policy.R2APolicy` from an :class:`~r2a.wrapper.config.R2AConfig`.

The graph and the retriever checkpoint are read once per process and path (a benchmark builds a policy per
episode); a retriever trained on another graph is refused, as is a graph whose action space the reference cannot
be converted into.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from r2a.wrapper.config import DEFAULT_CONFIG, R2AConfig, resolve_path
from r2a_core.config import load_config
from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy
from r2a_core.types import OSC_POSE_DELTA, ActionSpace

log = logging.getLogger(__name__)


def load_r2a_config(path: str | Path | None = None, overrides: list[str] | None = None) -> R2AConfig:
    """The config at ``path`` (default ``configs/r2a/builtin.yaml``) with ``section.field=value`` overrides.

    ``path`` may be a directory holding ``r2a.yaml`` (what ``r2a fit`` writes). Part paths that the file itself writes
    ``./NAME`` or ``../NAME`` are relative to the file's folder, so a fitted directory works from anywhere and can
    be moved; an override's paths mean what they say (relative to the working directory)."""
    if path is not None and Path(path).is_dir():
        if not (Path(path) / FITTED_CONFIG).is_file():
            raise R2AInputError(f"{path}: a directory without {FITTED_CONFIG} (give an R2A config file, or a "
                                "directory made by 'r2a fit')")
        path = Path(path) / FITTED_CONFIG
    return load_config(R2AConfig, path if path is not None else DEFAULT_CONFIG, overrides, R2AConfig.CONFIG_WHAT,
                       R2AConfig.SHIPPED_KIND, prepare=_parts_beside)


#: the config file inside a directory made by ``r2a fit``
FITTED_CONFIG = "r2a.yaml"
#: the part paths of an R2A config, as (section, field) (section None: top level)
PART_PATHS = ((None, "graph"), (None, "retriever"), ("gate", "checkpoint"), ("gate", "image_stats"),
              ("harmonize", "image_stats"), ("canonicalize", "reference"), ("canonicalize", "photometric_veto"))


def _parts_beside(raw: dict[str, Any], file: Path) -> None:
    """The file's part paths written ``./NAME`` (or ``../NAME``) made relative to the file's folder, in place."""
    for section, name in PART_PATHS:
        holder = raw if section is None else raw.get(section)
        value = holder.get(name) if isinstance(holder, dict) else None
        if isinstance(value, str) and value.startswith(("./", "../")):
            holder[name] = str(Path(file).parent / value)


def build_r2a(config: R2AConfig, base: Policy, action_space: ActionSpace | None = None) -> Any:
    """The wrapper around ``base`` (already built; the registry builds it from ``config.base``)."""
    from r2a.retrieval.retriever import Retriever
    from r2a.wrapper.policy import R2APolicy, WrapperParts
    from r2a.wrapper.recovery import StartPoseRecovery

    space = action_space or getattr(base, "action_space", None) or OSC_POSE_DELTA
    harmonize_artifacts = {}
    if config.harmonize.enabled:  # the base sees harmonized images; retrieval and the gate see the raw ones
        from r2a.observation.harmonize import HarmonizedPolicy
        from r2a_core.provenance import sha256_path

        stats_path = resolve_path(config.harmonize.image_stats)
        base = HarmonizedPolicy(base, _image_stats(str(stats_path)), config.harmonize)
        harmonize_artifacts = {"harmonize_stats": {"path": str(stats_path), "sha256": sha256_path(stats_path)}}
    if config.canonicalize.enabled:  # the base sees the view warped back to the training camera's; R2A sees raw
        from r2a.observation.canonicalize import CanonicalizedPolicy
        from r2a_core.provenance import sha256_path

        reference_path = resolve_path(config.canonicalize.reference)
        base = CanonicalizedPolicy(base, _canon_reference(str(reference_path)), config.canonicalize)
        harmonize_artifacts["canon_reference"] = {"path": str(reference_path), "sha256": sha256_path(reference_path)}
    graph, response, graph_sha = _graph(str(resolve_path(config.graph)))
    graph_space = graph.manifest["action_space"]
    if config.conversion == "actions" and (graph_space.get("kind") != space.kind
                                           or int(graph_space.get("dim", -1)) != space.dim):
        raise R2AInputError(f"{config.graph}: the graph's demos act in {graph_space.get('kind')} with "
                            f"{graph_space.get('dim')} dims, the base policy in {space.kind} with {space.dim}; "
                            "use conversion: response (or a graph of demos in the base's action space)")
    net, layout, thresholds = None, None, {}
    artifacts = {"graph": {"path": str(graph.path), "sha256": graph_sha}, **harmonize_artifacts}
    if config.retrieval.mode == "gnn":
        ckpt, ckpt_sha = _retriever(str(resolve_path(str(config.retriever))))
        _check_same_graph(ckpt.graph, graph, config)
        if ckpt.executed_steps != config.executed_steps:
            raise R2AInputError(f"{config.retriever}: trained for chunks of {ckpt.executed_steps} executed steps, "
                                f"the config executes {config.executed_steps}; set executed_steps to match")
        if ckpt.layout.action_dim != space.dim:
            raise R2AInputError(f"{config.retriever}: trained for {ckpt.layout.action_dim}-D actions, the base "
                                f"policy acts in {space.dim} dims")
        net, layout, thresholds = ckpt.net, ckpt.layout, ckpt.thresholds
        artifacts["retriever"] = {"path": str(resolve_path(str(config.retriever))), "sha256": ckpt_sha}
    if layout is None:
        from r2a.retrieval.features import QueryLayout

        layout = QueryLayout(action_dim=space.dim)
    retriever = Retriever(graph, response, config.retrieval, layout, net=net, executed_steps=config.executed_steps)
    gate, max_gate = build_gate(config, space, artifacts)
    max_seed = config.fallback.max_seed_distance
    if max_seed is None:
        max_seed = thresholds.get("max_seed_distance") or 3.0 * _largest_neighbour_distance(graph)
    max_entropy = config.fallback.max_entropy
    if max_entropy is None:
        max_entropy = thresholds.get("max_entropy", 1.0) if config.retrieval.mode == "gnn" else 1.0
    recovery = StartPoseRecovery(graph, config.recovery, space, _steady_gains(response)) \
        if config.recovery.enabled else None
    matcher = None
    if config.task_match.mode == "meaning" or config.task_match.unknown == "base":
        from r2a.wrapper.task_match import TaskMatcher

        matcher = TaskMatcher(retriever.instructions, config.task_match)
    parts = WrapperParts(retriever=retriever, response=response, gate=gate, action_space=space,
                         executed_steps=config.executed_steps, conversion=config.conversion,
                         max_seed_distance=float(max_seed), max_entropy=float(max_entropy), recovery=recovery,
                         max_gate=max_gate, holding_scale=config.gate.holding_scale, task_matcher=matcher)
    return R2APolicy(base, parts, metadata={"config": config.to_dict(), "artifacts": artifacts})


def build_gate(config: R2AConfig, space: ActionSpace, artifacts: dict[str, Any]) -> tuple[Any, float]:
    """The config's gate and its S bound; the files it loaded go into ``artifacts``."""
    from r2a.wrapper.gate import ConstantGate, ReplayGate

    if config.gate.kind == "replay":
        return ReplayGate(space), 1.0
    if config.gate.kind == "learned":
        return _learned_gate(config, space, artifacts)
    if config.gate.kind == "fixed":
        return _fixed_gate(config, space, artifacts)
    gate = ConstantGate(space, config.gate.translation, config.gate.rotation, config.gate.max_gate)
    return gate, config.gate.max_gate


def _learned_gate(config: R2AConfig, space: ActionSpace, artifacts: dict[str, Any]) -> tuple[Any, float]:
    """The trained gate (refused when it was trained for another action space) and its S bound."""
    from r2a.wrapper.learned_gate import LearnedGate
    from r2a_core.provenance import sha256_path

    path = resolve_path(str(config.gate.checkpoint))
    ckpt = _gate_checkpoint(str(path))
    if ckpt.action_space.get("kind") != space.kind or int(ckpt.action_space.get("dim", -1)) != space.dim:
        raise R2AInputError(f"{config.gate.checkpoint}: this gate was trained for {ckpt.action_space.get('kind')} "
                            f"actions with {ckpt.action_space.get('dim')} dims; the base policy acts in {space.kind} "
                            f"with {space.dim}")
    if ckpt.layout.steps != config.executed_steps:
        raise R2AInputError(f"{config.gate.checkpoint}: trained on chunks of {ckpt.layout.steps} executed steps, "
                            f"the config executes {config.executed_steps}")
    scorer = None
    if "image_ood" in ckpt.layout.signals:
        stats_path = config.gate.image_stats or (ckpt.image_stats or {}).get("path")
        if not stats_path:
            raise R2AInputError(f"{config.gate.checkpoint}: the gate reads the image signal but no image stats are "
                                "given (gate.image_stats)")
        scorer = _image_stats(str(resolve_path(str(stats_path))))
        artifacts["image_stats"] = {"path": str(resolve_path(str(stats_path))),
                                    "sha256": sha256_path(resolve_path(str(stats_path)))}
    artifacts["gate"] = {"path": str(path), "sha256": sha256_path(path)}
    # the config may bound a trained gate below the bound it was trained with, never above it
    return LearnedGate(ckpt.net, ckpt.layout, space, scorer), min(config.gate.max_gate, ckpt.max_gate)


def _fixed_gate(config: R2AConfig, space: ActionSpace, artifacts: dict[str, Any]) -> tuple[Any, float]:
    """The constant gate at the best constant S of the learned gate's training split (``r2a-fixed``)."""
    from r2a.wrapper.gate import ConstantGate
    from r2a_core.provenance import sha256_path

    path = resolve_path(str(config.gate.checkpoint))
    ckpt = _gate_checkpoint(str(path))
    best = ckpt.provenance.get("best_constant")
    if not best:
        raise R2AInputError(f"{config.gate.checkpoint}: records no best constant gate (retrain it with r2a gate train)")
    artifacts["gate"] = {"path": str(path), "sha256": sha256_path(path)}
    bound = min(config.gate.max_gate, ckpt.max_gate)
    return ConstantGate(space, float(best[0]), float(best[1]), bound), bound


@lru_cache(maxsize=4)
def _gate_checkpoint(path: str) -> Any:
    from r2a.wrapper.gate_checkpoint import load_gate

    return load_gate(path)


@lru_cache(maxsize=4)
def _canon_reference(path: str) -> Any:
    from r2a.observation.canonicalize import load_reference

    return load_reference(path)


@lru_cache(maxsize=4)
def _image_stats(path: str) -> Any:
    from r2a_core.visual_ood import load_image_stats

    return load_image_stats(path)


@lru_cache(maxsize=4)
def _graph(path: str) -> tuple[Any, Any, str]:
    from graph_builder.storage import load_graph
    from r2a.retrieval.motion import response_for
    from r2a_core.provenance import sha256_path

    graph = load_graph(path)
    return graph, response_for(graph), sha256_path(path)


@lru_cache(maxsize=4)
def _retriever(path: str) -> tuple[Any, str]:
    from r2a.retrieval.checkpoint import load_retriever
    from r2a_core.provenance import sha256_path

    return load_retriever(path), sha256_path(path)


def _check_same_graph(trained_on: dict[str, Any], graph: Any, config: R2AConfig) -> None:
    ours = graph.manifest.get("files", {}).get("arrays/node_key.npy", {}).get("sha256")
    theirs = trained_on.get("node_key_sha256")
    if not theirs or not ours or theirs == ours:
        return
    where = f"{config.retriever}: trained on another graph ({trained_on.get('path')}, {trained_on.get('nodes')} nodes)"
    if not config.retriever_on_other_graph:
        raise R2AInputError(f"{where}, not on {config.graph}; train it on this graph, or set "
                            "retriever_on_other_graph: true to run it there as it is")
    if (config.retriever, config.graph) not in _WARNED_OTHER_GRAPH:  # once per process, not per episode
        _WARNED_OTHER_GRAPH.add((config.retriever, config.graph))
        log.warning("%s; running it on %s (retriever_on_other_graph: true)", where, config.graph)


_WARNED_OTHER_GRAPH: set[tuple[str | None, str]] = set()


def _largest_neighbour_distance(graph: Any) -> float:
    """The largest key distance of a spatial edge (the farthest a node lies from its nearest other-demo nodes)."""
    dist = graph.arrays["edge_dist"][graph.arrays["edge_type"] == 1]
    return float(dist.max()) if len(dist) else 1.0


def _steady_gains(response: Any) -> tuple[float, float]:
    """Displacement per unit action at steady state, as a share of the full-scale step (translation, rotation)."""
    out = []
    for axis in (response.translation, response.rotation):
        ar, ex = np.asarray(axis.ar), np.asarray(axis.ex)
        out.append(float(np.mean(ex.sum(axis=1) / np.maximum(1.0 - ar.sum(axis=1), 1e-3))))
    return out[0], out[1]


__all__ = ["build_gate", "build_r2a", "load_r2a_config"]
