"""Camera geometry: a MuJoCo pinhole camera, the homography between two views of a plane, and the camera shift's
displacement of a camera.

One implementation for the two sides of one question: the camera shift factor (``sim/shifts/camera.py``) moves the
third-person camera with :func:`displaced_pose`, and view canonicalization (``r2a/observation/canonicalize/``)
estimates that displacement (:class:`Displacement`) and warps the image back by :func:`plane_homography`. ``sim``
and ``r2a`` may not import each other; both import this leaf.

MuJoCo's camera convention throughout: a rotation's columns are the camera's x (right), y (up) and z (backward)
axes in the world; the camera looks along −z.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from r2a_core.rotations import quat_to_matrix, rotation_about

#: the third-person camera the camera factor moves and canonicalization warps
AGENTVIEW = "agentview"


def optical_axis_pivot(pos: np.ndarray, rot: np.ndarray, height: float) -> np.ndarray:
    """Where a camera's optical axis meets the plane ``z = height`` (the scene centre it looks at, the camera
    factor's pivot); a camera looking level or up gets the point 1 m ahead instead."""
    forward = -rot[:, 2]
    if forward[2] > -1e-3:
        return pos + forward
    return pos + forward * (pos[2] - height) / -forward[2]


@dataclass(frozen=True)
class CameraView:
    """A pinhole camera as MuJoCo defines it: ``rot``'s columns are the camera's x (right), y (up) and z
    (backward) axes in the world; ``fovy_deg`` is the vertical field of view."""

    pos: np.ndarray
    rot: np.ndarray
    fovy_deg: float

    def intrinsics(self, size: tuple[int, int]) -> np.ndarray:
        """``K`` mapping camera coordinates to upright (OpenCV row order) pixel coordinates, pixel centres at
        ``index + 0.5``; the camera looks along −z and its y is up, hence the signs."""
        h, w = size
        f = 0.5 * h / np.tan(np.deg2rad(self.fovy_deg) / 2)
        return np.array([[f, 0.0, -w / 2], [0.0, -f, -h / 2], [0.0, 0.0, -1.0]])

    def plane_to_pixel(self, height: float, size: tuple[int, int]) -> np.ndarray:
        """``(3, 3)``: homogeneous ``(x, y, 1)`` on the plane ``z = height`` → homogeneous pixel ``(u, v, 1)``
        scaled by the point's depth (positive in front of the camera)."""
        rt = self.rot.T
        g = np.column_stack([rt[:, 0], rt[:, 1], rt @ (np.array([0.0, 0.0, height]) - self.pos)])
        return self.intrinsics(size) @ g

    def pivot(self, height: float) -> np.ndarray:
        """Where the optical axis meets the plane ``z = height`` (:func:`optical_axis_pivot`)."""
        return optical_axis_pivot(self.pos, self.rot, height)


def camera_view_of(sim: Any, camera: str = AGENTVIEW) -> CameraView:
    """The camera's current pose in a simulator (duck-typed ``SimEnv``: ``mj_model`` and robosuite's name lookup)."""
    model = sim.mj_model
    cam = sim.sim.model.camera_name2id(camera)
    return CameraView(np.array(model.cam_pos[cam], np.float64), quat_to_matrix(np.array(model.cam_quat[cam])),
                      float(model.cam_fovy[cam]))


def plane_homography(src: CameraView, dst: CameraView, height: float, size: tuple[int, int]) -> np.ndarray:
    """``(3, 3)`` homography taking a pixel of ``src``'s image to the pixel of ``dst``'s image that sees the same
    point of the table plane ``z = height``."""
    return dst.plane_to_pixel(height, size) @ np.linalg.inv(src.plane_to_pixel(height, size))


def pixel_displacement(homography: np.ndarray, size: tuple[int, int]) -> float:
    """Mean distance in pixels that ``homography`` moves the points of the central image grid (0: identity); inf
    where a point maps behind the camera."""
    h, w = size
    u, v = np.meshgrid(np.linspace(0.1 * w, 0.9 * w, 8), np.linspace(0.1 * h, 0.9 * h, 8))
    p = np.stack([u.ravel(), v.ravel(), np.ones(u.size)])
    q = homography @ p
    if np.any(q[2] <= 1e-9):
        return float("inf")
    return float(np.linalg.norm(q[:2] / q[2] - p[:2], axis=0).mean())


def displaced_pose(pos: np.ndarray, rot: np.ndarray, pivot: np.ndarray, *, distance_scale: float = 1.0,
                   elevation_deg: float = 0.0, orbit_deg: float = 0.0, shift_m: float = 0.0,
                   shift_dir: tuple[float, float] = (1.0, 0.0), look_away_deg: float = 0.0,
                   look_dir: tuple[float, float] = (1.0, 0.0)) -> tuple[np.ndarray, np.ndarray]:
    """The camera pose after the camera factor's displacement, its five parts applied in this order:

    * ``distance_scale`` — along the line of sight, away from ``pivot`` (which stays in the image centre);
    * ``elevation_deg`` — about the horizontal axis through the pivot (positive: higher, more top-down);
    * ``orbit_deg`` — about the world z-axis through the pivot;
    * ``shift_m`` — a translation in the camera's image plane, along ``shift_dir`` (a unit vector in the camera's
      right/up axes), so the scene slides in the image;
    * ``look_away_deg`` — the view direction turned in place about ``look_dir`` (a unit vector in the image plane).
    """
    pos = pivot + distance_scale * (pos - pivot)

    axis = np.cross(pos - pivot, [0.0, 0.0, 1.0])  # horizontal; rotating about it by +θ raises the camera
    if np.linalg.norm(axis) > 1e-6:
        tilt = rotation_about(axis, np.deg2rad(elevation_deg))
        pos, rot = pivot + tilt @ (pos - pivot), tilt @ rot

    orbit = rotation_about(np.array([0.0, 0.0, 1.0]), np.deg2rad(orbit_deg))
    pos, rot = pivot + orbit @ (pos - pivot), orbit @ rot

    pos = pos + shift_m * (shift_dir[0] * rot[:, 0] + shift_dir[1] * rot[:, 1])

    if look_away_deg != 0.0:  # a turn by 0 is the identity: skipped
        axis_in_camera = np.array([look_dir[0], look_dir[1], 0.0])
        rot = rot @ rotation_about(axis_in_camera, np.deg2rad(look_away_deg))
    return pos, rot


@dataclass(frozen=True)
class Displacement:
    """A camera displacement in the camera factor's terms, as a point of a search space: the shift and the
    look-away are 2-D vectors (along the camera's right and up axes) so that small displacements have no singular
    direction."""

    orbit_deg: float = 0.0
    elevation_deg: float = 0.0
    distance_scale: float = 1.0
    shift_x_m: float = 0.0
    shift_y_m: float = 0.0
    look_x_deg: float = 0.0
    look_y_deg: float = 0.0

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> "Displacement":
        """From the camera factor's sampled parameters (``sim/shifts/camera.py``)."""
        s, sd = float(p["shift_m"]), np.deg2rad(float(p["shift_dir_deg"]))
        la, ld = float(p["look_away_deg"]), np.deg2rad(float(p["look_dir_deg"]))
        return cls(float(p["orbit_deg"]), float(p["elevation_deg"]), float(p["distance_scale"]),
                   s * np.cos(sd), s * np.sin(sd), la * np.cos(ld), la * np.sin(ld))

    @classmethod
    def from_vector(cls, v: np.ndarray) -> "Displacement":
        return cls(*(float(x) for x in v))

    def vector(self) -> np.ndarray:
        return np.array([self.orbit_deg, self.elevation_deg, self.distance_scale, self.shift_x_m, self.shift_y_m,
                         self.look_x_deg, self.look_y_deg])

    def as_dict(self) -> dict[str, float]:
        return {"orbit_deg": round(self.orbit_deg, 2), "elevation_deg": round(self.elevation_deg, 2),
                "distance_scale": round(self.distance_scale, 3),
                "shift_m": round(float(np.hypot(self.shift_x_m, self.shift_y_m)), 4),
                "look_away_deg": round(float(np.hypot(self.look_x_deg, self.look_y_deg)), 2)}

    def apply(self, clean: CameraView, height: float) -> CameraView:
        """The displaced camera (:func:`displaced_pose` about ``clean``'s pivot on the plane ``z = height``)."""
        shift = float(np.hypot(self.shift_x_m, self.shift_y_m))
        look = float(np.hypot(self.look_x_deg, self.look_y_deg))
        shift_dir = (self.shift_x_m / shift, self.shift_y_m / shift) if shift > 0 else (1.0, 0.0)
        look_dir = (self.look_x_deg / look, self.look_y_deg / look) if look > 1e-9 else (1.0, 0.0)
        pos, rot = displaced_pose(clean.pos, clean.rot, clean.pivot(height), distance_scale=self.distance_scale,
                                  elevation_deg=self.elevation_deg, orbit_deg=self.orbit_deg, shift_m=shift,
                                  shift_dir=shift_dir, look_away_deg=look if look > 1e-9 else 0.0, look_dir=look_dir)
        return CameraView(pos, rot, clean.fovy_deg)


__all__ = ["AGENTVIEW", "CameraView", "Displacement", "camera_view_of", "displaced_pose", "optical_axis_pivot",
           "pixel_displacement", "plane_homography"]
