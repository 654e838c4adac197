"""Camera shift: move and turn the third-person ``agentview`` camera (the wrist camera is untouched).

Five parts, all drawn per episode and applied in this order to the clean pose (LIBERO-Plus's camera factor plus
the lateral translation the pilot showed is needed, docs/architecture.md, "The shift benchmark"):

* ``distance_scale`` — move along the line of sight, away from the *pivot* (where the optical axis meets the
  table plane), keeping the pivot in the image centre;
* ``elevation_deg`` — rotate about the horizontal axis through the pivot (positive: higher, more top-down);
* ``orbit_deg`` — rotate about the world z-axis through the pivot;
* ``shift_m`` — translate the camera in its own image plane (direction ``shift_dir_deg``), so the scene slides
  in the image instead of staying centred;
* ``look_away_deg`` — rotate the view direction in place about an axis in the image plane (``look_dir_deg``).

The composition is ``r2a_core/camera.py: displaced_pose``, which view canonicalization inverts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from r2a_core.camera import AGENTVIEW, displaced_pose
from r2a_core.errors import R2AInputError
from r2a_core.rotations import matrix_to_quat
from r2a_core.rotations import quat_to_matrix as quat_to_mat
from sim.shifts.base import (
    RANGE,
    ArraySnapshot,
    ShiftFactor,
    Undo,
    band,
    raw_model,
    signed_uniform,
    uniform,
    view_pivot,
)

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

CAMERA = AGENTVIEW


class CameraShift(ShiftFactor):
    name = "camera"
    index = 0
    modifies_state = False
    summary = "third-person camera: distance, elevation, orbit about the table centre, lateral shift, look-away"
    level_schema = {"orbit_deg": RANGE, "elevation_deg": RANGE, "distance_scale": RANGE, "shift_m": RANGE,
                    "look_away_deg": RANGE}

    def _sample(self, spec: dict[str, Any], rng: np.random.Generator, task: str) -> dict[str, Any]:
        return {
            "camera": CAMERA,
            "orbit_deg": signed_uniform(rng, spec["orbit_deg"]),
            "elevation_deg": signed_uniform(rng, spec["elevation_deg"]),
            "distance_scale": uniform(rng, spec["distance_scale"]),
            "shift_m": uniform(rng, spec["shift_m"]),
            "shift_dir_deg": uniform(rng, [-180.0, 180.0]),
            "look_away_deg": uniform(rng, spec["look_away_deg"]),
            "look_dir_deg": uniform(rng, [-180.0, 180.0]),
        }

    #: severity 1: LIBERO-Plus's outer camera ranges (orbit up to 75°, distance up to ×2)
    OUTER = {"orbit_deg": 75.0, "elevation_deg": 15.0, "distance_scale": 2.0, "shift_m": 0.10, "look_away_deg": 10.0}
    knobs = ("camera",)

    def _params_at(self, knobs: dict[str, float]) -> dict[str, Any]:
        s = knobs.get("camera", 0.0)
        return {name: band(s, bound, clean=1.0 if name == "distance_scale" else 0.0)
                for name, bound in self.OUTER.items()}

    def describe(self, params: dict[str, Any]) -> str:
        return (f"orb {params['orbit_deg']:+.0f} el {params['elevation_deg']:+.0f} x{params['distance_scale']:.2f} "
                f"sh {100 * params['shift_m']:.0f}cm la {params['look_away_deg']:.0f}")

    def apply(self, sim: "SimEnv", params: dict[str, Any]) -> Undo:
        model = raw_model(sim)
        cam = sim.sim.model.camera_name2id(params["camera"])
        if model.cam_bodyid[cam] != 0:
            raise R2AInputError(f"camera '{params['camera']}' is attached to a moving body; only world-fixed "
                                "cameras can be shifted")
        snapshot = ArraySnapshot()
        snapshot.save(model.cam_pos, cam)
        snapshot.save(model.cam_quat, cam)
        pos, rot = shifted_pose(np.array(model.cam_pos[cam]), quat_to_mat(model.cam_quat[cam]),
                                view_pivot(sim, params["camera"]), params)
        model.cam_pos[cam] = pos
        model.cam_quat[cam] = matrix_to_quat(rot)
        sim.sim.forward()
        return snapshot.undo_for(sim)


def shifted_pose(pos: np.ndarray, rot: np.ndarray, pivot: np.ndarray,
                 params: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The camera pose after the shift ``params`` describe (:func:`r2a_core.camera.displaced_pose`); ``rot``'s
    columns are the camera's x (right), y (up), z (backward)."""
    shift_dir, look_dir = np.deg2rad(params["shift_dir_deg"]), np.deg2rad(params["look_dir_deg"])
    return displaced_pose(pos, rot, pivot, distance_scale=params["distance_scale"],
                          elevation_deg=params["elevation_deg"], orbit_deg=params["orbit_deg"],
                          shift_m=params["shift_m"], shift_dir=(np.cos(shift_dir), np.sin(shift_dir)),
                          look_away_deg=params["look_away_deg"], look_dir=(np.cos(look_dir), np.sin(look_dir)))
