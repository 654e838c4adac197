"""The R2A wrapper's config (``configs/r2a/builtin.yaml``; ``--policy r2a:CONFIG``), torch-free for ``--help``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from r2a.observation.canonicalize import CanonicalizeSettings
from r2a.observation.harmonize import HarmonizeSettings
from r2a.retrieval.config import RetrievalSettings
from r2a.wrapper.task_match import TaskMatchSettings
from r2a_core.config import TypedConfig, resolve_path, shipped_path
from r2a_core.errors import R2AInputError

#: relative asset paths (``r2a/assets/...``) are read from the working directory when there, else from the
#: installed package (:func:`resolve_path`)
DEFAULT_CONFIG = shipped_path("configs/r2a/builtin.yaml")


@dataclass(frozen=True)
class RecoverySettings:
    """Start-pose recovery (measured separately: the ``r2a-norecovery`` ablation switches it off)."""

    enabled: bool = True
    """servo an out-of-distribution start pose to the nearest demo start before the first base query"""
    threshold_scale: float = 1.5
    """recover when the start is farther from every demo start than this × the demos' own start spread"""
    min_position_offset: float = 0.04
    """metres: and only when the nearest demo start is farther than this or ``min_rotation_offset`` away — the floor
    that keeps demos starting close together from servoing a start a few millimetres off (0.04: robosuite's own
    initialization noise, 0.02 rad per joint, moves LIBERO's grip site up to 36.5 mm at its 99th percentile)"""
    min_rotation_offset: float = 0.11
    """radians: the floor's orientation half (that noise's 99th percentile: 0.108 rad)"""
    max_steps: int = 60
    """step budget of the servo"""
    position_tolerance: float = 0.01
    """metres: close enough to the target position"""
    rotation_tolerance: float = 0.1
    """radians: close enough to the target orientation"""
    gain: float = 0.5
    """proportional gain (1 commands the whole remaining error each step)"""


@dataclass(frozen=True)
class GateSettings:
    """Which gate blends the reference into the base chunk."""

    kind: Literal["constant", "replay", "learned", "fixed"] = "constant"
    """constant: S = translation / rotation below; replay: S = 1 on the motion dims (execute the reference, an
    ablation); learned: the trained gate network at ``checkpoint`` (r2a gate train); fixed: the best constant S on
    that gate's training split (the r2a-fixed ablation)"""
    checkpoint: str | None = None
    """the learned gate's checkpoint directory (kind: learned)"""
    image_stats: str | None = None
    """the demos' image statistics the learned gate's image signal scores against (null: the path the checkpoint
    names)"""
    translation: float = 0.25
    """constant gate on dx dy dz (the R2A page's logged gates: 0.15-0.36)"""
    rotation: float = 0.05
    """constant gate on drx dry drz (logged: 0.03-0.09)"""
    max_gate: float = 0.5
    """upper bound of S on every dimension"""
    holding_scale: float = 1.0
    """S is multiplied by this on the steps where the base commands the gripper closed (carrying and placing an
    object, where precision against an object the demos saw elsewhere matters most); 0: the base alone there"""


@dataclass(frozen=True)
class FallbackSettings:
    """When the wrapper returns the base chunk unchanged (and says why in ``result["r2a"]["fallback"]``)."""

    max_seed_distance: float | None = None
    """key distance of the nearest seed beyond which the execution has left the demos (null: the retriever
    checkpoint's calibrated value, or 3x the graph's largest nearest-neighbour distance in knn mode)"""
    max_entropy: float | None = None
    """normalized entropy of the candidate weights above which retrieval is too unsure (null: the retriever
    checkpoint's calibrated value, 1 = never in knn mode)"""


@dataclass
class R2AConfig(TypedConfig):
    """A frozen base policy wrapped by R2A."""

    CONFIG_WHAT: ClassVar[str] = "R2A config"
    SHIPPED_KIND: ClassVar[str] = "r2a"

    base: str = "builtin"
    """the frozen base policy (any policy spec: builtin, openpi:ws://..., lerobot:DIR, callable:...)"""
    graph: str = "r2a/assets/r2a_graph"
    """the motion graph (r2a graph build)"""
    retriever: str | None = "r2a/assets/r2a_retriever"
    """the trained GNN retriever (r2a retriever train); null only with retrieval.mode=knn"""
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)
    retriever_on_other_graph: bool = False
    """use the retriever on a graph it was not trained on (refused by default). The GNN is inductive — node
    features and edges, no per-node parameters — so it runs on a new graph of the same layout (e.g. a graph rebuilt
    from a few demos, as ``make quickstart`` does), but its measured accuracy is the training graph's"""
    executed_steps: int = 8
    """actions executed per chunk: the wrapper returns this many and retrieves again"""
    conversion: Literal["actions", "response"] = "actions"
    """actions: fused recorded demo actions (the graph's action space is the base's); response: the anchored
    trajectory through the fitted controller response"""
    gate: GateSettings = field(default_factory=GateSettings)
    harmonize: HarmonizeSettings = field(default_factory=HarmonizeSettings)
    canonicalize: CanonicalizeSettings = field(default_factory=CanonicalizeSettings)
    recovery: RecoverySettings = field(default_factory=RecoverySettings)
    fallback: FallbackSettings = field(default_factory=FallbackSettings)
    task_match: TaskMatchSettings = field(default_factory=TaskMatchSettings)

    def validate(self) -> None:
        if self.executed_steps < 1:
            raise R2AInputError(f"executed_steps must be >= 1, got {self.executed_steps}")
        if self.retrieval.mode == "gnn" and not self.retriever:
            raise R2AInputError("retrieval.mode is 'gnn' but no retriever checkpoint is given")
        g = self.gate
        if not 0 <= g.translation <= g.max_gate or not 0 <= g.rotation <= g.max_gate or g.max_gate > 1:
            raise R2AInputError(f"gate: need 0 <= translation, rotation <= max_gate <= 1, got {g}")
        if not 0 <= g.holding_scale <= 1:
            raise R2AInputError(f"gate.holding_scale must be in [0, 1], got {g.holding_scale}")
        t = self.task_match
        if not -1 <= t.min_similarity <= 1 or t.min_margin < 0:
            raise R2AInputError(f"task_match: need -1 <= min_similarity <= 1 and min_margin >= 0, got {t}")
        if g.kind in ("learned", "fixed") and not g.checkpoint:
            raise R2AInputError(f"gate.kind is '{g.kind}' but gate.checkpoint names no gate checkpoint")


__all__ = ["DEFAULT_CONFIG", "FallbackSettings", "GateSettings", "R2AConfig", "RecoverySettings", "resolve_path"]
