"""Typed configuration of a graph build, loadable from YAML and overridable with ``section.field=value``.

The defaults here are the defaults of ``configs/graph/default.yaml`` (a test keeps them equal), so the CLI works
from any directory without the YAML. The full config is written into every graph's manifest. Loading, type
checks and the ``--help`` text come from the project's one config loader (:mod:`r2a_core.config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from r2a_core.config import TypedConfig, apply_override
from r2a_core.config import field_docs as _field_docs
from r2a_core.errors import R2AInputError


@dataclass(frozen=True)
class SegmentationConfig:
    """How a demonstration is cut into motion primitives (graph nodes)."""

    stride: int = 5
    """frames per fixed-stride window (R2A page: 5, ~38 nodes per LIBERO demo)"""
    gripper_hysteresis: float = 0.05
    """a gripper open/close event is a reversal of the normalized opening by at least this much"""
    min_segment: int = 2
    """a stride boundary closer than this many frames to a gripper event or the demo end is dropped"""
    future_frames: int = 20
    """frames of future motion stored per node (the node plus ~3 successors)"""


@dataclass(frozen=True)
class FeatureConfig:
    """The kinematic key: per-group z-scored EE position, rot6d, gripper opening and phase, each weighted.

    A group shares one scale (std pooled over its dims) so distances stay isotropic inside the group; ``*_min_std``
    floors the scale so a nearly constant group (e.g. top-down grasps only) is not blown up into noise.
    """

    pos_weight: float = 1.0
    """weight of the EE position (3 dims)"""
    pos_min_std: float = 0.01
    """floor of the position scale, metres"""
    rot_weight: float = 0.5
    """weight of the EE orientation as rot6d (6 dims)"""
    rot_min_std: float = 0.1
    """floor of the rot6d scale (0.1 ≈ 6 degrees)"""
    gripper_weight: float = 1.0
    """weight of the normalized gripper opening"""
    gripper_min_std: float = 0.05
    """floor of the gripper scale"""
    phase_weight: float = 0.5
    """weight of the normalized phase t/(T-1) in the seed key; 0 leaves phase out of the key"""


@dataclass(frozen=True)
class EdgeConfig:
    """Temporal edges inside a demo and spatial edges between demos."""

    temporal_offsets: tuple[int, ...] = (1, 2, 4, 8, 16)
    """node offsets Δ of temporal edges; each is used forward (+Δ) and backward (−Δ)"""
    spatial_k: int = 12
    """spatial edges per node: its k nearest nodes of other demos (R2A page: ~10–15)"""
    spatial_cross_task: bool = True
    """let spatial edges connect demos of different tasks"""
    spatial_use_phase: bool = False
    """include phase in the space of spatial edges (default: EE state only)"""


@dataclass(frozen=True)
class IndexConfig:
    """FAISS index for seed retrieval and for building spatial edges."""

    type: Literal["auto", "flat", "ivf", "hnsw"] = "auto"
    """auto | flat | ivf | hnsw; auto = flat up to exact_max_nodes, IVF above"""
    exact_max_nodes: int = 100_000
    """largest node count that gets an exact (flat) index under type=auto"""
    nlist: int = 0
    """IVF lists; 0 = 4·sqrt(N) rounded to a power of two"""
    nprobe: int = 32
    """IVF lists probed per seed query"""
    edge_exact_max_nodes: int = 5_000
    """largest node count whose spatial edges come from an exact search; IVF above (exact search is O(N²))"""
    edge_nprobe: int = 16
    """IVF lists probed when building spatial edges (candidates are re-ranked exactly)"""
    hnsw_m: int = 32
    """HNSW graph degree"""
    hnsw_ef_search: int = 128
    """HNSW search breadth"""
    gpu: Literal["auto", "on", "off"] = "auto"
    """auto | on | off: use faiss-gpu when it is installed and a GPU is present"""
    build_threads: int = 0
    """OpenMP threads while building (0 = all cores)"""
    query_threads: int = 1
    """OpenMP threads for small query batches (one thread is ~4x faster for single queries on 2 vCPUs)"""
    seed: int = 1234
    """seed of the IVF k-means"""


@dataclass(frozen=True)
class InputConfig:
    """Which demonstrations enter the graph and how mismatched inputs are treated."""

    skip_failed: bool = True
    """drop demos whose success flag is false (they are counted in the manifest)"""
    allow_instruction_mismatch: bool = False
    """accept sources that give the same task different instructions (otherwise an error)"""


@dataclass(frozen=True)
class GraphConfig(TypedConfig):
    """Everything a graph build depends on besides its inputs."""

    CONFIG_WHAT: ClassVar[str] = "graph config"
    SHIPPED_KIND: ClassVar[str] = "graph"

    segmentation: SegmentationConfig = field(default_factory=SegmentationConfig)
    features: FeatureConfig = field(default_factory=FeatureConfig)
    edges: EdgeConfig = field(default_factory=EdgeConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    inputs: InputConfig = field(default_factory=InputConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        _validate(self)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> GraphConfig:
    """Defaults, then the YAML file (if any), then ``section.field=value`` overrides (values parsed as YAML)."""
    return GraphConfig.from_yaml(path, overrides)


def _validate(cfg: GraphConfig) -> None:
    """Reject values that would build a meaningless graph, naming the field."""
    s, e, i, f = cfg.segmentation, cfg.edges, cfg.index, cfg.features
    checks = [
        (s.stride >= 1, "segmentation.stride must be >= 1"),
        (s.gripper_hysteresis > 0, "segmentation.gripper_hysteresis must be > 0"),
        (s.min_segment >= 1, "segmentation.min_segment must be >= 1"),
        (s.future_frames >= 1, "segmentation.future_frames must be >= 1"),
        (all(o >= 1 for o in e.temporal_offsets), "edges.temporal_offsets must be positive integers"),
        (len(set(e.temporal_offsets)) == len(e.temporal_offsets), "edges.temporal_offsets has duplicates"),
        (e.spatial_k >= 0, "edges.spatial_k must be >= 0"),
        (i.type in ("auto", "flat", "ivf", "hnsw"), f"index.type is '{i.type}', expected auto|flat|ivf|hnsw"),
        (i.gpu in ("auto", "on", "off"), f"index.gpu is '{i.gpu}', expected auto|on|off"),
        (i.nlist >= 0 and i.nprobe >= 1 and i.edge_nprobe >= 1, "index.nlist/nprobe/edge_nprobe out of range"),
        (i.hnsw_m >= 4 and i.hnsw_ef_search >= 1, "index.hnsw_m must be >= 4 and hnsw_ef_search >= 1"),
        (i.build_threads >= 0 and i.query_threads >= 1, "index.build_threads >= 0 and query_threads >= 1"),
        (i.exact_max_nodes >= 0 and i.edge_exact_max_nodes >= 0, "index.*exact_max_nodes must be >= 0"),
        (min(f.pos_weight, f.rot_weight, f.gripper_weight, f.phase_weight) >= 0, "features.*_weight must be >= 0"),
        (min(f.pos_min_std, f.rot_min_std, f.gripper_min_std) > 0, "features.*_min_std must be > 0"),
        (f.pos_weight + f.rot_weight + f.gripper_weight > 0, "features: pos/rot/gripper weights are all zero"),
    ]
    for ok, message in checks:
        if not ok:
            raise R2AInputError(f"graph config: {message}")


def field_docs() -> dict[str, tuple[Any, str]]:
    """``section.field`` → (default, the field's one-line docstring) (the CLI help)."""
    return _field_docs(GraphConfig)


def config_help() -> str:
    """The config fields as help text: one line per ``section.field=default``."""
    return GraphConfig.help_text()


__all__ = ["EdgeConfig", "FeatureConfig", "GraphConfig", "IndexConfig", "InputConfig", "SegmentationConfig",
           "apply_override", "config_help", "field_docs", "load_config"]
