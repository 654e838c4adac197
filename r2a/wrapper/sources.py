"""Sources: hooks that replace one part of an R2A query — the reference, or the gate's S — with another's.

The wrapper runs as always (retrieval, its fallbacks, the gate, the holding rule, the blend); a source only
swaps what it names, so a measurement with a source differs from the published wrapper in exactly that part.
The diagnostic oracles (``eval/oracles.py``, registered by the benchmark: the scripted expert's own next actions
as the reference, the per-query best S) are the sources this project has; they read the simulator's privileged
state and are not deployable.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from r2a.wrapper.gate import GateInputs


class ReferenceSource(Protocol):
    def __call__(self, obs: dict[str, Any], retrieved: np.ndarray) -> np.ndarray:
        """The reference ``(n, A)`` to blend toward instead of ``retrieved`` (the fused retrieved motion)."""
        ...


class GateSource(Protocol):
    def __call__(self, inputs: GateInputs, gate: np.ndarray,
                 scale: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """The S ``(n, A)`` to blend with instead of ``gate`` (the gate's own, bounded), and diagnostics for the
        query's trace. ``scale`` ``(n,)`` is what the wrapper multiplies each step's S by afterwards (the holding
        rule: ``holding_scale`` where the base commands the gripper closed, else 1); the returned S is bounded to
        the gate's range again."""
        ...


__all__ = ["GateSource", "ReferenceSource"]
