"""Demonstrations → motion-primitive graph: segment, describe nodes, connect them, index their keys.

``build_graph`` is deterministic: the same sources (in the same order) and config give byte-identical arrays,
index and manifest (no timestamps or absolute paths are recorded; timings go to ``MotionGraph.timings``).
"""

from __future__ import annotations

import importlib.metadata
import logging
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from graph_builder.config import GraphConfig
from graph_builder.edges import EDGE_TYPES, SPATIAL, TEMPORAL, edge_distances, spatial_edges, temporal_edges
from graph_builder.features import KeySpec, NodeStates, compute_node_states, fit_key_spec
from graph_builder.frames import FrameTable, Source, build_frame_table, source_from_episodes
from graph_builder.future_motion import compute_future_motion
from graph_builder.index import build_index, describe_index, use_gpu
from graph_builder.motion_graph import MotionGraph
from graph_builder.segmentation import Segments, segment_demos
from graph_builder.storage import FORMAT_NAME, FORMAT_VERSION
from r2a_core.timing import StageTimer
from r2a_core.types import Episode

log = logging.getLogger(__name__)


def build_graph(sources: list[Source], cfg: GraphConfig | None = None, progress: bool = False) -> MotionGraph:
    """Build the graph of all successful demos of ``sources`` (in memory; save it with ``save_graph``)."""
    cfg = cfg or GraphConfig()
    timings: dict[str, float] = {}
    with StageTimer(timings, "collect"):
        table = build_frame_table(sources, cfg.inputs)
    with StageTimer(timings, "segmentation"):
        seg = segment_demos(table.gripper, table.demo_ptr, cfg.segmentation, progress=progress)
        first = table.demo_ptr[seg.demo]
        g_start = first + seg.start
        demo_last = table.demo_ptr[seg.demo + 1] - 1
    with StageTimer(timings, "node_features"):
        states = compute_node_states(table.ee_pos, table.ee_quat, table.gripper, g_start, first + seg.end,
                                     first, demo_last)
        spec = fit_key_spec(states.raw(), cfg.features)
        keys = spec.apply(states.raw())
        spatial = _spatial_keys(keys, spec, cfg)
    with StageTimer(timings, "future_motion"):
        future = compute_future_motion(table.ee_pos, table.ee_quat, table.gripper, table.actions, g_start,
                                       demo_last, cfg.segmentation.future_frames)
    with StageTimer(timings, "temporal_edges"):
        t_index, t_offset = temporal_edges(seg.demo_node_ptr, cfg.edges.temporal_offsets)
        t_dist = edge_distances(spatial, t_index)
    with StageTimer(timings, "index"):
        index = build_index(keys, cfg.index)
    with StageTimer(timings, "spatial_edges"):
        s_index, s_dist = spatial_edges(spatial, seg.demo, table.demo_task[seg.demo], cfg.edges, cfg.index,
                                        progress=progress, index=index if spatial is keys else None)
    arrays = {
        **_node_arrays(seg, states, keys, table),
        "future_dpos": future.dpos, "future_drot6d": future.drot6d, "future_gripper": future.gripper,
        "future_actions": future.actions, "future_valid": future.valid,
        **_edge_arrays(t_index, t_offset, t_dist, s_index, s_dist),
        **_demo_arrays(table, seg),
    }
    manifest = _manifest(cfg, table, seg, spec, index, arrays)
    log.info("graph: %d demos, %d nodes, %d temporal + %d spatial edges, %s index (%s)",
             table.num_demos, seg.num_nodes, t_offset.size, s_dist.size, manifest["index"]["type"],
             ", ".join(f"{k} {v:.2f}s" for k, v in timings.items()))
    return MotionGraph(manifest=manifest, arrays=arrays, index=index, timings=timings)


def build_graph_from_paths(paths: list[str | Path], cfg: GraphConfig | None = None,
                           progress: bool = False) -> MotionGraph:
    """Load HDF5 files / LeRobot directories (mixed) via ``demos.dataset`` and build their graph."""
    from graph_builder.sources import load_sources

    return build_graph(load_sources(paths, progress=progress), cfg, progress=progress)


def build_graph_from_episodes(episodes: list[Episode], cfg: GraphConfig | None = None,
                              name: str = "<memory>") -> MotionGraph:
    """Build from in-memory episodes treated as one source (tests, synthetic benchmarks)."""
    return build_graph([source_from_episodes(episodes, name)], cfg)


def _node_arrays(seg: Segments, states: NodeStates, keys: np.ndarray, table: FrameTable) -> dict[str, np.ndarray]:
    return {
        "node_demo": seg.demo, "node_span": np.stack([seg.start, seg.end], axis=1),
        "node_phase": states.phase.astype(np.float32), "node_ee_pos": states.ee_pos.astype(np.float32),
        "node_ee_quat": states.ee_quat.astype(np.float32), "node_ee_rot6d": states.ee_rot6d.astype(np.float32),
        "node_gripper": states.gripper.astype(np.float32), "node_velocity": states.velocity,
        "node_task": table.demo_task[seg.demo], "node_instruction": table.demo_instruction[seg.demo],
        "node_at_gripper_event": seg.at_gripper_event, "node_key": keys,
    }


def _edge_arrays(t_index: np.ndarray, t_offset: np.ndarray, t_dist: np.ndarray, s_index: np.ndarray,
                 s_dist: np.ndarray) -> dict[str, np.ndarray]:
    """Temporal edges first, then spatial; ``edge_index`` is int32 on disk (to_pyg widens it)."""
    return {
        "edge_index": np.concatenate([t_index, s_index], axis=1).astype(np.int32),
        "edge_type": np.concatenate([np.full(t_offset.size, TEMPORAL, np.int8),
                                     np.full(s_dist.size, SPATIAL, np.int8)]),
        "edge_offset": np.concatenate([t_offset, np.zeros(s_dist.size, np.int32)]),
        "edge_dist": np.concatenate([t_dist, s_dist]).astype(np.float32),
    }


def _demo_arrays(table: FrameTable, seg: Segments) -> dict[str, np.ndarray]:
    return {
        "demo_source": table.demo_source, "demo_episode": table.demo_episode, "demo_task": table.demo_task,
        "demo_instruction": table.demo_instruction, "demo_length": np.diff(table.demo_ptr).astype(np.int32),
        "demo_node_ptr": seg.demo_node_ptr,
    }


def _spatial_keys(keys: np.ndarray, spec: KeySpec, cfg: GraphConfig) -> np.ndarray:
    """Keys for spatial edges: the seed key, minus phase unless ``edges.spatial_use_phase``."""
    if cfg.edges.spatial_use_phase or "phase" not in spec.names:
        return keys
    cols = spec.columns(tuple(n for n in spec.names if n != "phase"))
    return np.ascontiguousarray(keys[:, cols])


def _manifest(cfg: GraphConfig, table: FrameTable, seg: Segments, spec: KeySpec, index: faiss.Index,
              arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    edge_type = arrays["edge_type"]
    nodes_per_demo = np.diff(seg.demo_node_ptr)
    spatial_groups = [n for n in spec.names if n != "phase" or cfg.edges.spatial_use_phase]
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "build_config": cfg.to_dict(),
        "features": {
            "key": spec.to_dict(),
            "spatial_key": {"groups": spatial_groups,
                            "note": "the seed key's columns of these groups (same normalization)"},
            "phase": "node start frame / (demo length - 1)",
            "velocity": ["vx", "vy", "vz", "angular_speed", "gripper_rate"],
            "velocity_units": "per frame, mean over [start, min(end, last frame)]",
            "future": {
                "frames": cfg.segmentation.future_frames,
                "entry_j": "frame start+1+j (state after action start+j)",
                "dpos": "world-frame p[t] - p[start]",
                "drot6d": "rot6d (first two columns) of R[t] @ R[start].T (world frame)",
                "actions": "raw demo action start+j",
                "valid": "false past the demo's end (arrays repeat the last frame)",
            },
            "quaternion": "wxyz",
        },
        "edge_types": {str(k): v for k, v in EDGE_TYPES.items()},
        "edge_direction": "edge_index[0] -> edge_index[1]; spatial: neighbour -> node; temporal offset = dst - src",
        "action_space": table.action_space,
        "tasks": table.tasks,
        "instructions": table.instructions,
        "sources": table.source_records,
        "warnings": table.warnings,
        "counts": {
            "sources": len(table.source_records),
            "episodes": sum(r["episodes"] for r in table.source_records),
            "skipped_failed": sum(r["skipped_failed"] for r in table.source_records),
            "demos": table.num_demos,
            "frames": table.num_frames,
            "nodes": seg.num_nodes,
            "gripper_event_nodes": int(seg.at_gripper_event.sum()),
            "nodes_per_demo": {"min": int(nodes_per_demo.min()), "mean": round(float(nodes_per_demo.mean()), 3),
                               "max": int(nodes_per_demo.max())},
            "edges": {"temporal": int(np.count_nonzero(edge_type == TEMPORAL)),
                      "spatial": int(np.count_nonzero(edge_type == SPATIAL)), "total": int(edge_type.size)},
        },
        "per_task": _per_task(table, seg),
        "index": {**describe_index(index), "file": "index.faiss", "built_on_gpu": use_gpu(cfg.index.gpu)},
        "software": {"r2a": _version("r2a"), "numpy": np.__version__, "faiss": faiss.__version__},
    }


def _per_task(table: FrameTable, seg: Segments) -> dict[str, dict[str, Any]]:
    lengths = np.diff(table.demo_ptr)
    nodes = np.diff(seg.demo_node_ptr)
    out = {}
    for t, name in enumerate(table.tasks):
        sel = table.demo_task == t
        out[name] = {
            "demos": int(sel.sum()), "frames": int(lengths[sel].sum()), "nodes": int(nodes[sel].sum()),
            "median_length": float(np.median(lengths[sel])),
            "instructions": sorted({table.instructions[i] for i in table.demo_instruction[sel]}),
            "sources": sorted({table.source_records[s]["path"] for s in table.demo_source[sel]}),
        }
    return out


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
