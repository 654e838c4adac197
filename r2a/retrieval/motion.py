"""Motion in end-effector space and how a delta-EE controller turns actions into it.

The graph stores what demonstrations *did* (EE displacements); a base policy speaks *actions*. For robosuite's
OSC_POSE deltas the two are related by the controller's response: each control step the arm covers part of the
commanded delta and carries velocity into the next step. :class:`ResponseModel` is that relation — a linear
ARX model per axis, fitted by least squares on the graph's own frames::

    v[j] = ar1 * v[j-1] + ar2 * v[j-2] + scale * (ex0 * a[j] + ex1 * a[j-1] + ex2 * a[j-2])

``v[j]`` is the displacement of step ``j`` (metres, or a world-frame axis-angle vector in radians), ``a`` the
normalized action and ``scale`` the action's full-scale step (OSC_POSE: 0.05 m, 0.5 rad). On the built-in demos
this two-step model has a per-step RMSE of 0.5 / 0.6 / 1.1 mm on x / y / z, against 1.3 mm for a first-order
one. Inverting it turns a reference trajectory into the actions that reproduce it
(:meth:`AxisResponse.inverse`); running it forward turns a base chunk into the EE motion it implies
(:meth:`AxisResponse.forward`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.rotations import rot6d_to_matrix, step_rotations

log = logging.getLogger(__name__)

#: full-scale step of a normalized OSC_POSE delta action: metres for translation, radians for rotation
DELTA_EE_SCALE = (0.05, 0.5)


@dataclass(frozen=True)
class AxisResponse:
    """One axis group's response, per axis ``i`` (an ARX model; ``p`` past steps, ``q`` actions)::

        v[j, i] = sum_k ar[i, k] v[j-1-k, i] + scale * sum_k ex[i, k] a[j-k, i]
    """

    ar: tuple[tuple[float, ...], ...]
    ex: tuple[tuple[float, ...], ...]
    scale: float

    @property
    def past_steps(self) -> int:
        return len(self.ar[0])

    @property
    def past_actions(self) -> int:
        return len(self.ex[0]) - 1

    def forward(self, actions: np.ndarray, v_past: np.ndarray, a_past: np.ndarray) -> np.ndarray:
        """Displacements ``(n, 3)`` that ``actions (n, 3)`` cause after the past steps ``v_past (p, 3)`` and
        actions ``a_past (q-1, 3)`` (both oldest first).

        The model is linear, so this is three small matrix products with the system's impulse responses
        (computed once per length): it runs on every query of the wrapper.
        """
        actions = np.asarray(actions, np.float64)
        forced, from_v, from_a = _response_matrices(self, len(actions))
        v = _last_rows(v_past, self.past_steps)
        a = _last_rows(a_past, self.past_actions)
        return (np.einsum("ijk,ki->ji", forced, actions) + np.einsum("ijk,ki->ji", from_v, v)
                + np.einsum("ijk,ki->ji", from_a, a))

    def inverse(self, steps: np.ndarray, v_past: np.ndarray, a_past: np.ndarray, bound: float = 1.0) -> np.ndarray:
        """Actions ``(n, 3)`` whose response follows the step displacements ``steps (n, 3)``; each is clipped to
        ``±bound`` and the clipped action's own response carried on, as the controller would."""
        return self._run(np.asarray(steps, np.float64), v_past, a_past, invert=True, bound=bound)[1]

    def _run(self, series: np.ndarray, v_past: np.ndarray, a_past: np.ndarray, invert: bool,
             bound: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        ar, ex = np.asarray(self.ar), np.asarray(self.ex)
        p, q = ar.shape[1], ex.shape[1]
        v_hist = list(_last_rows(v_past, p))   # oldest first
        a_hist = list(_last_rows(a_past, q - 1))
        steps, actions = np.empty_like(series), np.empty_like(series)
        for j, value in enumerate(series):
            free = sum(ar[:, k] * v_hist[-1 - k] for k in range(p))
            free = free + self.scale * sum(ex[:, k] * a_hist[-k] for k in range(1, q))
            if invert:
                a = np.clip((value - free) / (self.scale * ex[:, 0]), -bound, bound)
            else:
                a = value
            v = free + self.scale * ex[:, 0] * a
            steps[j], actions[j] = v, a
            v_hist.append(v)
            a_hist.append(a)
        return steps, actions

    def to_dict(self) -> dict[str, Any]:
        return {"ar": [list(r) for r in self.ar], "ex": [list(r) for r in self.ex], "scale": self.scale}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AxisResponse":
        return cls(tuple(tuple(float(v) for v in r) for r in d["ar"]),
                   tuple(tuple(float(v) for v in r) for r in d["ex"]), float(d["scale"]))


@lru_cache(maxsize=64)
def _response_matrices(response: "AxisResponse", n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per axis, the displacements of ``n`` steps caused by each action (``(3, n, n)``), by each past step
    (``(3, n, p)``) and by each past action (``(3, n, q-1)``): the impulse responses of the ARX model."""
    p, q1 = response.past_steps, response.past_actions
    forced, from_v, from_a = np.zeros((3, n, n)), np.zeros((3, n, p)), np.zeros((3, n, q1))
    zeros_v, zeros_a = np.zeros((p, 3)), np.zeros((q1, 3))
    for k in range(n):
        unit = np.zeros((n, 3))
        unit[k] = 1.0
        forced[:, :, k] = response._run(unit, zeros_v, zeros_a, invert=False)[0].T
    for k in range(p):
        v = zeros_v.copy()
        v[k] = 1.0
        from_v[:, :, k] = response._run(np.zeros((n, 3)), v, zeros_a, invert=False)[0].T
    for k in range(q1):
        a = zeros_a.copy()
        a[k] = 1.0
        from_a[:, :, k] = response._run(np.zeros((n, 3)), zeros_v, a, invert=False)[0].T
    return forced, from_v, from_a


def _last_rows(x: np.ndarray, n: int) -> np.ndarray:
    """The last ``n`` rows of ``x (m, 3)``, zero-padded at the front when ``m < n``."""
    x = np.asarray(x, np.float64).reshape(-1, 3)
    if n == 0:
        return np.zeros((0, 3))
    x = x[-n:]
    return np.concatenate([np.zeros((n - len(x), 3)), x]) if len(x) < n else x


@dataclass(frozen=True)
class ResponseModel:
    """The delta-EE controller's response, translation and rotation (see the module docstring)."""

    translation: AxisResponse
    rotation: AxisResponse
    fit_rmse: tuple[float, float] = (0.0, 0.0)

    @property
    def past_steps(self) -> int:
        return max(self.translation.past_steps, self.rotation.past_steps)

    @property
    def past_actions(self) -> int:
        return max(self.translation.past_actions, self.rotation.past_actions)

    def to_dict(self) -> dict[str, Any]:
        return {"translation": self.translation.to_dict(), "rotation": self.rotation.to_dict(),
                "fit_rmse": list(self.fit_rmse)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ResponseModel":
        return cls(AxisResponse.from_dict(d["translation"]), AxisResponse.from_dict(d["rotation"]),
                   tuple(float(v) for v in d.get("fit_rmse", (0.0, 0.0))))


def response_for(graph: Any) -> "ResponseModel":
    """The controller response fitted on a motion graph's own frames (delta-EE graphs only)."""
    space = graph.manifest["action_space"]
    check_delta_ee(space.get("kind", "?"), int(space.get("dim", 0)), f"graph {graph.path}")
    a = graph.arrays
    return fit_response_model(a["future_dpos"], a["future_drot6d"], a["future_actions"], a["future_valid"])


def check_delta_ee(kind: str, dim: int, what: str) -> None:
    """The reference is converted only into delta-EE actions ``dx dy dz drx dry drz (gripper ...)``."""
    if kind != "delta_ee" or dim < 6:
        raise R2AInputError(f"{what}: the reference can be converted only into a delta_ee action space "
                            f"(dx dy dz drx dry drz ...), got {kind} with {dim} dims")


def fit_response_model(future_dpos: np.ndarray, future_drot6d: np.ndarray, future_actions: np.ndarray,
                       future_valid: np.ndarray, past_steps: int = 2, past_actions: int = 2, max_nodes: int = 20000,
                       seed: int = 0) -> ResponseModel:
    """Fit both axis groups on a delta-EE graph's future-motion arrays (at most ``max_nodes`` nodes, sampled)."""
    n = len(future_dpos)
    rows = np.arange(n) if n <= max_nodes else np.sort(np.random.default_rng(seed).choice(n, max_nodes, False))
    dpos = future_dpos[rows].astype(np.float64)
    steps_pos = np.diff(np.concatenate([np.zeros_like(dpos[:, :1]), dpos], axis=1), axis=1)
    steps_rot = step_rotations(rot6d_to_matrix(future_drot6d[rows]))
    actions = future_actions[rows].astype(np.float64)
    valid = future_valid[rows]
    pos_scale, rot_scale = DELTA_EE_SCALE
    # translation per axis (gravity and table contact make z differ); rotation pooled: the controller's gains are
    # isotropic, and demonstrations turn almost only about z, so roll and pitch alone would be fitted on noise
    translation, rmse_t = _fit_axes(steps_pos, actions[..., 0:3], valid, pos_scale, past_steps, past_actions, False)
    try:
        rotation, rmse_r = _fit_axes(steps_rot, actions[..., 3:6], valid, rot_scale, past_steps, past_actions, True)
    except R2AInputError as err:
        # demos that barely turn (a few Lift demos) cannot identify the rotation response; the controller's
        # structure is the same for both groups, so the translation dynamics (pooled) stand in, at rotation scale
        log.info("these demos barely rotate (%s): the rotation response is taken from the translation dynamics "
                 "(used by conversion: response and the start-pose recovery's turn)", err)
        pooled, _ = _fit_axes(steps_pos, actions[..., 0:3], valid, pos_scale, past_steps, past_actions, True)
        rotation, rmse_r = AxisResponse(pooled.ar, pooled.ex, rot_scale), float("nan")
    return ResponseModel(translation, rotation, (rmse_t, rmse_r))


def _fit_axes(steps: np.ndarray, actions: np.ndarray, valid: np.ndarray, scale: float, p: int, q_past: int,
              pooled: bool) -> tuple[AxisResponse, float]:
    """Least squares over every frame whose whole window (p past steps, q_past past actions) is inside the node's
    recorded future (step j is produced by action j, so the window starts at j = max(p, q_past)); per axis, or
    one set of coefficients for all three (``pooled``)."""
    first = max(p, q_past)
    groups = [(0, 1, 2)] if pooled else [(0,), (1,), (2,)]
    coefs, sq, count = {}, 0.0, 0
    for axes in groups:
        rows, target = [], []
        for j in range(first, steps.shape[1]):
            ok = valid[:, j] & valid[:, j - first]
            for axis in axes:
                cols = [steps[ok, j - 1 - k, axis] for k in range(p)]
                cols += [scale * actions[ok, j - k, axis] for k in range(q_past + 1)]
                rows.append(np.stack(cols, axis=1))
                target.append(steps[ok, j, axis])
        design, y = np.concatenate(rows), np.concatenate(target)
        if len(y) < 10 * design.shape[1]:
            raise R2AInputError("too few graph frames to fit the controller response (need longer demos)")
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        if not coef[p] > 1e-3:
            raise R2AInputError(f"the fitted controller response has gain {coef[p]:.4g} on axes {axes}: actions do "
                                "not move the arm in these demonstrations, so no reference can be converted")
        coefs.update({axis: coef for axis in axes})
        sq += float(np.sum((design @ coef - y) ** 2))
        count += len(y)
    ar = tuple(tuple(float(c) for c in coefs[axis][:p]) for axis in range(3))
    ex = tuple(tuple(float(c) for c in coefs[axis][p:]) for axis in range(3))
    return AxisResponse(ar, ex, scale), float(np.sqrt(sq / count))


__all__ = ["AxisResponse", "DELTA_EE_SCALE", "ResponseModel", "check_delta_ee", "fit_response_model", "response_for"]
