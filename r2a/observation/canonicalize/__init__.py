"""View canonicalization: warp a moved third-person camera's image back toward the training view before the base
policy sees it (docs/experiments/canonicalize.md).

Under the benchmark's camera shift no action-side blend helps (docs/experiments/headroom.md): the base's chunks go
wrong because what it sees is not what it was trained on. The table is a plane, so the part of the scene on it
maps between two views of it by a homography; objects above it (the arm, the top of a cube) carry a parallax
error that grows with their height and with how far the camera moved.

* the camera geometry — :class:`~r2a_core.camera.CameraView`, :func:`~r2a_core.camera.plane_homography`,
  :class:`~r2a_core.camera.Displacement` — is ``r2a_core/camera.py``, the one the camera shift factor moves the
  camera with;
* :mod:`~r2a.observation.canonicalize.warp` — :class:`WarpMap`, a precomputed bilinear remap (well under 1 ms a
  frame at 64 px), and :func:`canonical_warp`;
* :mod:`~r2a.observation.canonicalize.reference` — the clean training scenes (:class:`CanonReference`, the file
  format of ``r2a/assets/r2a_canon_reference/``);
* :mod:`~r2a.observation.canonicalize.estimator` — :class:`DisplacementEstimator`: the displacement of a frame,
  by direct alignment against the reference;
* :mod:`~r2a.observation.canonicalize.policies` — :class:`CanonicalizedPolicy`, deployable
  (``canonicalize:BASE``): the displacement estimated from the episode's first frame, gated so that clean views
  pass unchanged (docs/experiments/canonicalize.md); :class:`OracleCanonicalizedPolicy`, NOT deployable, a
  headroom diagnostic: the homography from the TRUE shifted and clean poses read from the simulator handed to the
  policy (``oracle-canonicalize:BASE``).
"""

from r2a.observation.canonicalize.estimator import DisplacementEstimator, Estimate
from r2a.observation.canonicalize.policies import (
    CAMERA,
    CanonicalizedPolicy,
    CanonicalizeSettings,
    OracleCanonicalizedPolicy,
)
from r2a.observation.canonicalize.reference import (
    CanonReference,
    SceneReference,
    load_reference,
    save_reference,
    scene_reference,
)
from r2a.observation.canonicalize.warp import WarpMap, canonical_warp

__all__ = ["CAMERA", "CanonReference", "CanonicalizeSettings", "CanonicalizedPolicy", "DisplacementEstimator",
           "Estimate", "OracleCanonicalizedPolicy", "SceneReference", "WarpMap", "canonical_warp", "load_reference",
           "save_reference", "scene_reference"]
