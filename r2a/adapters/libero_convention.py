"""openpi's LIBERO convention: what openpi's LIBERO example client (``examples/libero/main.py``) sends its server.

That client reads LIBERO's raw observation and sends four keys (docs/architecture.md, "Conventions"):

* ``observation/image``, ``observation/wrist_image``: ``agentview_image`` and ``robot0_eye_in_hand_image``
  turned 180° (``img[::-1, ::-1]``), then ``openpi_client.image_tools.resize_with_pad`` to 224×224 (PIL bilinear,
  aspect kept, zero padding) and ``convert_to_uint8``. LIBERO's raw frames hold OpenGL's bottom-up rows, so
  turning one 180° gives r2a's upright frame mirrored left-right: that is the adapter's ``flip: horizontal``.
* ``observation/state``: 8 float64 numbers — ``robot0_eef_pos`` (the grip site), the axis-angle of
  ``robot0_eef_quat`` by robosuite's ``quat2axisangle`` (:func:`quat2axisangle`), ``robot0_gripper_qpos`` (the
  two finger joints).
* ``prompt``: the task's language.

``robot0_eef_quat`` is not our ``state/ee_quat``: it is the orientation of the Panda *hand body* (robosuite kept
the body for datasets collected with robosuite ≤ 1.4, LIBERO's among them), which is the grip site's turned +90°
about the site's z axis, and its sign is MuJoCo's — which matters, because near the pointing-down pose (w ≈ 0)
``q`` and ``-q`` give axis-angles of opposite direction. LIBERO's observation is also sampled one physics substep
into the control step (with the images), ours after the last one. So the LIBERO backend carries LIBERO's own
numbers in the observation (float64, as LIBERO reports them) under the keys below, and the adapter sends those;
an observation without them (another simulator, a real robot) gets them derived from ours
(:data:`r2a.adapters.keymap.DERIVED`): the position as it is, the hand from the grip site with the sign of LIBERO's
start poses (x ≥ 0), fingers symmetric — close, not exact.
"""

from __future__ import annotations

import math

import numpy as np

from r2a_core.errors import R2AInputError

#: LIBERO's ``robot0_eef_pos`` (3, float64): the grip site's position, as LIBERO's observation reports it
LIBERO_EEF_POS = "state/libero/eef_pos"
#: LIBERO's ``robot0_eef_quat`` in wxyz (4, float64): the hand body's orientation with MuJoCo's sign
LIBERO_EEF_QUAT = "state/libero/eef_quat"
#: LIBERO's ``robot0_gripper_qpos`` (2, float64): the two finger joints
LIBERO_GRIPPER_QPOS = "state/libero/gripper_qpos"
#: derived: :func:`quat2axisangle` of ``robot0_eef_quat`` (3), what openpi's example sends as ``state[3:6]``
LIBERO_EEF_AXIS_ANGLE = "state/libero/eef_axis_angle"
#: the keys the LIBERO backend adds to the observation (sim/envs/libero_env.py names them the same)
LIBERO_STATE_KEYS = (LIBERO_EEF_POS, LIBERO_EEF_QUAT, LIBERO_GRIPPER_QPOS)

#: the hand body relative to the grip site (wxyz): +90° about the site's z axis (robosuite's Panda, measured)
_HAND_IN_SITE = np.array([math.sqrt(0.5), 0.0, 0.0, math.sqrt(0.5)])


def quat2axisangle(quat_xyzw: np.ndarray) -> np.ndarray:
    """robosuite's ``quat2axisangle`` as openpi's example uses it: xyzw in, float64 axis-angle out, the angle
    ``2·acos(w)`` in [0, 2π] (the quaternion's own sign kept, not canonicalized), 0 for a (near) zero rotation."""
    quat = np.array(quat_xyzw, dtype=np.float64).reshape(4)
    quat[3] = min(max(quat[3], -1.0), 1.0)
    den = np.sqrt(1.0 - quat[3] * quat[3])
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return (quat[:3] * 2.0 * math.acos(quat[3])) / den


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of two wxyz quaternions."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw])


def hand_quat_from_site(site_wxyz: np.ndarray) -> np.ndarray:
    """The hand body's orientation (wxyz) from the grip site's, signed like LIBERO's start poses (x ≥ 0)."""
    hand = _mul(np.asarray(site_wxyz, np.float64).reshape(4), _HAND_IN_SITE)
    return -hand if hand[1] < 0 else hand


def site_quat_from_hand(hand_wxyz: np.ndarray) -> np.ndarray:
    """The grip site's orientation (wxyz, w ≥ 0) from the hand body's: the inverse of :func:`hand_quat_from_site`."""
    inverse = _HAND_IN_SITE * np.array([1.0, -1.0, -1.0, -1.0])
    site = _mul(np.asarray(hand_wxyz, np.float64).reshape(4), inverse)
    site = site / np.linalg.norm(site)
    return -site if site[0] < 0 else site


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``openpi_client.image_tools.resize_with_pad`` for one ``(H, W, 3)`` uint8 image: PIL bilinear to fit inside
    ``height × width`` with the aspect ratio kept, centred on black. An image of that size comes back as it is."""
    if tuple(image.shape[:2]) == (height, width):
        return image
    try:
        from PIL import Image
    except ImportError as err:  # matplotlib, a dependency of r2a, brings Pillow
        raise R2AInputError("resize: bilinear_pad needs Pillow: pip install pillow") from err
    pil = Image.fromarray(np.ascontiguousarray(image))
    cur_width, cur_height = pil.size
    ratio = max(cur_width / width, cur_height / height)
    resized_height, resized_width = int(cur_height / ratio), int(cur_width / ratio)
    resized = pil.resize((resized_width, resized_height), resample=Image.BILINEAR)
    canvas = Image.new(resized.mode, (width, height), 0)
    canvas.paste(resized, (max(0, int((width - resized_width) / 2)), max(0, int((height - resized_height) / 2))))
    return np.asarray(canvas)
