"""The two policies that show the base its agentview image warped back to the training view: the deployable
:class:`CanonicalizedPolicy` (the displacement estimated from the episode's first frame) and the headroom
diagnostic :class:`OracleCanonicalizedPolicy` (the true displacement read from the simulator)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from r2a.observation.canonicalize.estimator import DisplacementEstimator
from r2a.observation.canonicalize.reference import DEFAULT_REFERENCE, CanonReference
from r2a.observation.canonicalize.warp import WarpMap, canonical_warp
from r2a_core.camera import AGENTVIEW, camera_view_of, pixel_displacement, plane_homography
from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy
from r2a_core.types import PROMPT, image_key

log = logging.getLogger(__name__)

CAMERA = AGENTVIEW


@dataclass(frozen=True)
class CanonicalizeSettings:
    """How the base's agentview image is canonicalized (``canonicalize:`` in an R2A config)."""

    enabled: bool = False
    """warp the base's agentview image back to the training view (R2A config only; ``--policy canonicalize:BASE``
    always does)"""
    reference: str = DEFAULT_REFERENCE
    """the tasks' clean start views and camera calibration, with the gate's fitted threshold
    (scripts/build_canon_reference.py; docs/experiments/canonicalize.md)"""
    threshold_px: float | None = None
    """warp only when the estimated displacement moves the image's central grid by more than this many pixels at
    64 px (null: the reference's threshold, fitted on clean training frames)"""
    min_gain: float = 0.0
    """and only when the estimate's view loss is below the unmoved camera's by at least this fraction of it (a moved
    camera explains the frame much better than no move; a photometric change does not); 0: no such condition"""
    photometric_veto: str | None = None
    """image statistics (r2a demos image-stats) whose agentview detector, firing on the first frame, keeps the warp
    off: a lighting or background change, not a moved camera (null: no veto)"""



class _ViewWarpingPolicy:
    """``base`` seeing its ``camera`` image warped by a map decided at the episode's first frame (:meth:`_first_frame`
    sets ``_warp`` and ``_report``); every reply carries the report under ``canonicalize``."""

    KIND = ""

    def __init__(self, base: Policy, camera: str = CAMERA) -> None:
        self.base, self.camera = base, camera
        self.action_space = getattr(base, "action_space", None)
        self._warp: WarpMap | None = None
        self._report: dict[str, Any] = {}

    def _settings_metadata(self) -> dict[str, Any]:
        return {}

    @property
    def metadata(self) -> dict[str, Any]:
        base = getattr(self.base, "metadata", None) or {}
        return {**base, "canonicalize": {"kind": self.KIND, "camera": self.camera, **self._settings_metadata()}}

    @property
    def n_action_steps(self) -> int | None:
        return getattr(self.base, "n_action_steps", None)

    def reset(self) -> None:
        self._warp, self._report = None, {}
        self.base.reset()

    def close(self) -> None:
        close = getattr(self.base, "close", None)
        if callable(close):
            close()

    def _first_frame(self, image: np.ndarray, prompt: str | None) -> None:
        raise NotImplementedError

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        key = image_key(self.camera)
        image = obs.get(key)
        if image is not None and np.ndim(image) == 3 and np.shape(image)[-1] == 3:
            image = np.asarray(image).astype(np.uint8, copy=False)
            if not self._report:
                self._first_frame(image, obs.get(PROMPT))
            if self._warp is not None and self._warp.size == tuple(image.shape[:2]):
                obs = {**obs, key: self._warp.apply(image)}
        elif not self._report:
            self._report = {"active": False, "reason": f"no {key} image"}
        reply = self.base.infer(obs)
        out = dict(reply) if isinstance(reply, dict) else {"actions": reply}
        out["canonicalize"] = dict(self._report)
        return out


class CanonicalizedPolicy(_ViewWarpingPolicy):
    """``base`` seeing the agentview image warped back to the training view by the displacement estimated from the
    episode's first frame (:class:`DisplacementEstimator`), applied to every frame of the episode; gated: frames
    whose estimated warp moves the image by no more than the threshold (fitted on clean training frames) pass
    unchanged. A failed estimate never fails the episode: the images pass through and the reply says why."""

    KIND = "estimated"

    def __init__(self, base: Policy, reference: CanonReference, settings: CanonicalizeSettings | None = None,
                 camera: str = CAMERA) -> None:
        super().__init__(base, camera)
        self.reference = reference
        self.settings = settings or CanonicalizeSettings(enabled=True)
        self.threshold = float(self.settings.threshold_px if self.settings.threshold_px is not None
                               else reference.threshold_px)
        self.estimator = DisplacementEstimator(reference)
        self.veto = None
        if self.settings.photometric_veto:
            from r2a_core.config import resolve_path
            from r2a_core.visual_ood import load_image_stats

            self.veto = load_image_stats(resolve_path(self.settings.photometric_veto))
            if self.veto.thresholds.get(CAMERA) is None:
                raise R2AInputError(f"canonicalize.photometric_veto {self.settings.photometric_veto}: no fitted "
                                    f"{CAMERA} detector threshold (r2a demos image-stats --fit-clean … "
                                    "--fit-shifted …)")

    def _settings_metadata(self) -> dict[str, Any]:
        return {"threshold_px": self.threshold, "min_gain": self.settings.min_gain,
                "photometric_veto": self.settings.photometric_veto}

    def _first_frame(self, image: np.ndarray, prompt: str | None) -> None:
        """Estimate the episode's displacement and decide whether to warp (once per episode)."""
        try:
            est = self.estimator.estimate(image, prompt)
            if not np.isfinite(est.pixels) or not np.all(np.isfinite(est.displacement.vector())):
                self._report = {"active": False, "reason": "non-finite estimate"}
                return
            report = {"pixels": round(est.pixels, 2), "estimate": est.displacement.as_dict(),
                      "scene": self.reference.scenes[est.scene].task, "loss": round(est.loss, 3),
                      "identity_loss": round(est.identity_loss, 3), "seconds": round(est.seconds, 3)}
            if est.pixels <= self.threshold:
                self._report = {"active": False, "reason": "below threshold", **report}
                return
            gain = (est.identity_loss - est.loss) / max(est.identity_loss, 1e-9)
            report["gain"] = round(float(gain), 4)
            if not gain >= self.settings.min_gain:  # NaN never passes
                self._report = {"active": False, "reason": "no clear gain over the unmoved view", **report}
                return
            if self.veto is not None:
                score = self.veto.photometric_score(CAMERA, image)
                report["photometric_score"] = round(score, 3)
                if score > float(self.veto.thresholds[CAMERA]):
                    self._report = {"active": False, "reason": "photometric detector fired", **report}
                    return
            scene = self.reference.scenes[est.scene]
            size = tuple(np.shape(image)[:2])
            self._warp = canonical_warp(est.displacement.apply(scene.view, scene.height), scene.view, scene.height,
                                        size)
            self._report = {"active": True, **report}
        except Exception as err:  # noqa: BLE001 — a view estimate must never fail an episode; the reply says why
            log.warning("canonicalize: estimate failed, images pass through: %s", err)
            self._warp, self._report = None, {"active": False, "reason": f"failed: {type(err).__name__}: {err}"}


class OracleCanonicalizedPolicy(_ViewWarpingPolicy):
    """NOT deployable, a headroom diagnostic: ``base`` seeing the agentview image warped from the TRUE shifted pose
    to the clean one, both read from the simulator (privileged).

    The clean pose is read when the policy is built and again at every ``reset()``: the benchmark builds a policy
    per episode and the rollout loop resets it right after the simulator's reset and before the shift hooks move
    the camera (``demos.rollout.run_episode``), and every episode's shift is undone when it ends. The shifted pose
    is read at the episode's first query (the camera factor does not move the camera within an episode)."""

    KIND = "oracle"

    def __init__(self, base: Policy, sim: Any, camera: str = CAMERA) -> None:
        super().__init__(base, camera)
        self.sim = sim
        self.clean = camera_view_of(sim, camera)

    def reset(self) -> None:
        self.clean = camera_view_of(self.sim, self.camera)
        super().reset()

    def _first_frame(self, image: np.ndarray, prompt: str | None) -> None:
        size = tuple(np.shape(image)[:2])
        shifted = camera_view_of(self.sim, self.camera)
        height = float(self.sim.table_height())
        homography = plane_homography(shifted, self.clean, height, size)
        moved = pixel_displacement(homography, size)
        if moved < 1e-6:
            self._report = {"active": False, "reason": "clean pose", "pixels": 0.0}
            return
        self._warp = canonical_warp(shifted, self.clean, height, size)
        self._report = {"active": True, "pixels": round(moved, 2)}


__all__ = ["CAMERA", "CanonicalizeSettings", "CanonicalizedPolicy", "OracleCanonicalizedPolicy"]
