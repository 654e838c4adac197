"""One waypoint of a scripted expert's plan (:class:`demos.experts.scripted.ScriptedExpert` walks a list of them).

Its own module so that the plans of every scene family (the built-in tasks in :mod:`demos.experts.scripted`,
LIBERO's in :mod:`demos.experts.libero`) share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

#: gripper commands
OPEN, CLOSED = -1.0, 1.0


@dataclass
class Phase:
    """One waypoint: where the grip site should go, the gripper command, and when the phase is over."""

    name: str
    target: Callable[["SimEnv"], np.ndarray]
    gripper: float
    tolerance: float = 0.01
    hold_steps: int = 0
    yaw_object: str | None = None
    max_steps: int = 120
    #: the object that must stay in the hand; if it slips, the expert starts that pick again
    holding: str | None = None
    #: a waypoint approached from above: in relabel mode, a hand below it within tolerance horizontally passed it
    from_above: bool = False
    #: lowers the held object onto its place: in relabel mode, an object let go there was placed, not dropped
    places: bool = False
    #: the hand's yaw (rad, the grip frame's x axis in the world) this phase turns to; None keeps the last
    #: target (``yaw_object`` picks one from the object instead)
    yaw: Callable[["SimEnv"], float] | None = None
    #: a world-frame axis-angle turn (rad) applied on top of "pointing down at the yaw": a hand pitched so that
    #: its finger pads lie along a slanted wall (a bowl's rim); None keeps the last tilt (none at first)
    tilt: Callable[["SimEnv"], np.ndarray] | None = None
