"""The factor classes by name, in LIBERO-Plus's order; each has a fixed, never reused ``index`` for seeding."""

from __future__ import annotations

from sim.shifts.background import BackgroundShift
from sim.shifts.base import ShiftFactor
from sim.shifts.camera import CameraShift
from sim.shifts.language import LanguageShift
from sim.shifts.layout import LayoutShift
from sim.shifts.light import LightShift
from sim.shifts.noise import NoiseShift
from sim.shifts.robot_init import RobotInitShift

FACTOR_CLASSES: dict[str, type[ShiftFactor]] = {
    cls.name: cls for cls in (CameraShift, RobotInitShift, LanguageShift, LightShift, BackgroundShift, NoiseShift,
                              LayoutShift)}
FACTOR_NAMES: tuple[str, ...] = tuple(FACTOR_CLASSES)
