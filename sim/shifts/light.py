"""Lighting shift: intensity (dim or bright), colour temperature, light direction, shadows on/off.

The scene's lights and MuJoCo's headlight are scaled together by ``intensity`` and tinted with the colour of a
black body at ``temperature_k`` (a shift in mired from 6500 K, warm or cool); every light's direction is tilted
by ``tilt_deg`` toward the azimuth ``tilt_azimuth_deg`` (staying above the table) and it is moved so that it
still shines where it did: a directional light (robosuite's arenas) at the table centre, a spot light (LIBERO's
scenes: two spots, one lighting the table obliquely, one aimed off it) at the point of the table plane its axis
met — aiming LIBERO's spots at the table centre would double the light on the table. With ``shadows`` the lights
cast shadows and the offscreen scene renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from r2a_core.rotations import rotation_about
from sim.shifts.base import (
    PROB,
    RANGE,
    ArraySnapshot,
    ShiftFactor,
    Undo,
    band,
    raw_model,
    uniform,
    view_pivot,
)

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

NEUTRAL_K = 6500.0
MIN_MIRED, MAX_MIRED = 1e6 / 25000.0, 1e6 / 1800.0
MIN_DOWNWARD = 0.3  # a tilted light keeps at least this much of its direction pointing down


class LightShift(ShiftFactor):
    name = "light"
    index = 3
    modifies_state = False
    summary = "lighting: dim/bright intensity, colour temperature, direction, shadows"
    level_schema = {"dim": RANGE, "bright": RANGE, "mired_shift": RANGE, "tilt_deg": RANGE, "shadow_prob": PROB}

    def _sample(self, spec: dict[str, Any], rng: np.random.Generator, task: str) -> dict[str, Any]:
        bright = bool(rng.random() < 0.5)
        intensity = uniform(rng, spec["bright" if bright else "dim"])
        mired = 1e6 / NEUTRAL_K + float(rng.choice((-1.0, 1.0))) * uniform(rng, spec["mired_shift"])
        temperature = 1e6 / float(np.clip(mired, MIN_MIRED, MAX_MIRED))
        return {"intensity": intensity, "temperature_k": temperature, "tilt_deg": uniform(rng, spec["tilt_deg"]),
                "tilt_azimuth_deg": uniform(rng, [-180.0, 180.0]),
                "shadows": bool(rng.random() < spec["shadow_prob"])}

    #: severity 1 (no LIBERO-Plus numbers exist): intensity ×0.2 or ×2.5, ±150 mired, key light tilted 55°, shadows
    OUTER = {"dim": 0.2, "bright": 2.5, "mired_shift": 150.0, "tilt_deg": 55.0}
    knobs = ("light",)

    def _params_at(self, knobs: dict[str, float]) -> dict[str, Any]:
        s = knobs.get("light", 0.0)
        dim = band(s, self.OUTER["dim"], clean=1.0)  # falls from 1: [low, high] is [farther, nearer]
        return {"dim": [dim[1], dim[0]], "bright": band(s, self.OUTER["bright"], clean=1.0),
                "mired_shift": band(s, self.OUTER["mired_shift"]), "tilt_deg": band(s, self.OUTER["tilt_deg"]),
                "shadow_prob": s}

    def describe(self, params: dict[str, Any]) -> str:
        return (f"x{params['intensity']:.2f} {params['temperature_k']:.0f}K tilt {params['tilt_deg']:.0f}"
                + (" shadows" if params["shadows"] else ""))

    def apply(self, sim: "SimEnv", params: dict[str, Any]) -> Undo:
        import mujoco

        model = raw_model(sim)
        head = model.vis.headlight
        snapshot = ArraySnapshot()
        for array in (model.light_diffuse, model.light_specular, model.light_ambient, model.light_pos,
                      model.light_dir, model.light_castshadow, head.diffuse, head.ambient, head.specular):
            snapshot.save(array)
        ctx = sim.render_context
        shadow_flag = int(ctx.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW]) if ctx is not None else None

        gain = params["intensity"] * temperature_rgb(params["temperature_k"])
        for array in (model.light_diffuse, model.light_specular, model.light_ambient, head.diffuse, head.ambient,
                      head.specular):
            array[...] = np.maximum(np.asarray(array) * gain, 0.0)
        pivot = view_pivot(sim)
        for i in range(model.nlight):
            new_dir = tilted(np.array(model.light_dir[i]), params["tilt_deg"], params["tilt_azimuth_deg"])
            target = aim_point(np.array(model.light_pos[i]), np.array(model.light_dir[i]), sim.table_height(),
                               pivot) if is_spot(model, i) else pivot
            distance = float(np.linalg.norm(model.light_pos[i] - target))
            model.light_dir[i] = new_dir
            model.light_pos[i] = target - distance * new_dir
        if params["shadows"]:
            model.light_castshadow[:] = 1
            if ctx is not None:
                ctx.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 1
        sim.sim.forward()

        def undo() -> None:
            snapshot.restore()
            if ctx is not None:
                ctx.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = shadow_flag
            sim.sim.forward()

        return undo


def is_spot(model, light: int) -> bool:
    """Whether light ``light`` is a spot (its position and aim matter) rather than a directional light."""
    if hasattr(model, "light_type"):  # MuJoCo >= 3.3: mjLIGHT_SPOT = 0
        return int(model.light_type[light]) == 0
    return not bool(model.light_directional[light])


def aim_point(pos: np.ndarray, direction: np.ndarray, height: float, fallback: np.ndarray) -> np.ndarray:
    """Where a light's axis meets the plane z = ``height`` (``fallback`` if it points level or up)."""
    d = direction / np.linalg.norm(direction)
    if d[2] > -1e-3:
        return fallback
    return pos + d * (pos[2] - height) / -d[2]


def tilted(direction: np.ndarray, tilt_deg: float, azimuth_deg: float) -> np.ndarray:
    """``direction`` rotated by ``tilt_deg`` toward the horizontal azimuth ``azimuth_deg``, still pointing down."""
    d = direction / np.linalg.norm(direction)
    toward = np.array([np.cos(np.deg2rad(azimuth_deg)), np.sin(np.deg2rad(azimuth_deg)), 0.0])
    axis = np.cross(d, toward)
    if np.linalg.norm(axis) < 1e-6:
        axis = np.cross(d, [1.0, 0.0, 0.0])
    out = rotation_about(axis, np.deg2rad(tilt_deg)) @ d
    if out[2] > -MIN_DOWNWARD:  # never light the scene from below the horizon
        out[2] = -MIN_DOWNWARD
        out[:2] *= np.sqrt(1 - MIN_DOWNWARD**2) / max(np.linalg.norm(out[:2]), 1e-9)
    return out / np.linalg.norm(out)


def temperature_rgb(kelvin: float) -> np.ndarray:
    """Relative RGB of a black body at ``kelvin`` (Tanner Helland's fit), normalized to 6500 K ≈ white."""
    def raw(k: float) -> np.ndarray:
        t = k / 100.0
        r = 255.0 if t <= 66 else 329.698727446 * (t - 60) ** -0.1332047592
        g = 99.4708025861 * np.log(t) - 161.1195681661 if t <= 66 else 288.1221695283 * (t - 60) ** -0.0755148492
        b = 255.0 if t >= 66 else (0.0 if t <= 19 else 138.5177312231 * np.log(t - 10) - 305.0447927307)
        return np.clip(np.array([r, g, b]), 1.0, 255.0)

    rgb = raw(kelvin) / raw(NEUTRAL_K)
    return rgb / rgb.max()
