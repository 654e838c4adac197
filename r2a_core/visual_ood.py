"""How far a camera image is from the demonstrations' images: a frozen pooled embedding and its statistics.

One implementation, shared by the learned gate (a "the base may be unreliable" signal) and observation
harmonization. The embedding is deliberately cheap and frozen — no network, nothing learned, the same for any
policy: per-channel mean and spread, per-channel 8-bin histograms, saturation, a 4×4 grid of mean luminance and a
2×2 grid of gradient energy, all on a 32×32 area-downsampled copy (52 numbers, well under a millisecond at
128 px). VLA-Scope detects visual out-of-distribution inputs from pooled image features (ROC-AUC 0.945); this is
the policy-agnostic version of that idea.

:class:`ImageStats` holds, per camera, the demonstrations' embedding mean and a shrunk covariance; ``score`` is
the Mahalanobis distance² divided by the dimension (≈ 1 on images like the demonstrations', growing with the
shift). Stored as ``r2a.image-stats`` v1 (JSON: numbers only, no pickle); readers reject other versions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.files import write_json_atomic
from r2a_core.images import resize_image

FORMAT, FORMAT_VERSION = "r2a.image-stats", 1
POOL_SIZE = 32
HIST_BINS = 8
#: covariance shrinkage toward its diagonal (a few thousand frames estimate 52×52 covariances only roughly)
SHRINKAGE = 0.1
FEATURE_NAMES = ([f"mean_{c}" for c in "rgb"] + [f"std_{c}" for c in "rgb"]
                 + [f"hist_{c}{i}" for c in "rgb" for i in range(HIST_BINS)] + ["sat_mean", "sat_std"]
                 + [f"lum_{i}{j}" for i in range(4) for j in range(4)] + [f"grad_{i}{j}" for i in range(2) for j in range(2)])
FEATURE_DIM = len(FEATURE_NAMES)
#: the photometric part of the embedding (colour statistics, no spatial layout): what observation harmonization's
#: detector scores, since a normalizer can undo a photometric shift but not a geometric one
PHOTOMETRIC = tuple(i for i, n in enumerate(FEATURE_NAMES) if n.startswith(("mean_", "std_", "hist_", "sat_")))
_PHOTOMETRIC_INDEX = np.array(PHOTOMETRIC)


def pooled_image_features(image: np.ndarray) -> np.ndarray:
    """The frozen embedding of one ``(H, W, 3)`` uint8 image → ``(FEATURE_DIM,)`` float64."""
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise R2AInputError(f"image features: expected an (H, W, 3) image, got shape {img.shape}")
    small = _pooled(img) / 255.0
    flat = small.reshape(-1, 3)
    bins = np.minimum((flat * HIST_BINS).astype(np.int64), HIST_BINS - 1)
    hist = [np.bincount(bins[:, c], minlength=HIST_BINS) / len(flat) for c in range(3)]
    hi, lo = flat.max(axis=1), flat.min(axis=1)
    sat = np.where(hi > 1e-6, (hi - lo) / np.maximum(hi, 1e-6), 0.0)
    lum = small @ np.array([0.299, 0.587, 0.114])
    grid = lum.reshape(4, POOL_SIZE // 4, 4, POOL_SIZE // 4).mean(axis=(1, 3)).ravel()
    gy, gx = np.abs(np.diff(lum, axis=0))[:, :-1], np.abs(np.diff(lum, axis=1))[:-1, :]
    grad = gx + gy
    half = grad.shape[0] // 2
    energy = [grad[:half, :half].mean(), grad[:half, half:].mean(), grad[half:, :half].mean(), grad[half:, half:].mean()]
    return np.concatenate([flat.mean(0), flat.std(0), *hist, [sat.mean(), sat.std()], grid, energy])


def _pooled(img: np.ndarray) -> np.ndarray:
    """The 32×32 area-downsampled image (rounded to integers, as :func:`resize_image` gives for uint8), float64;
    a block mean when the size is a multiple of 32 (the same numbers, a fraction of the time)."""
    h, w = img.shape[:2]
    if h % POOL_SIZE == 0 and w % POOL_SIZE == 0 and np.issubdtype(img.dtype, np.integer):
        fy, fx = h // POOL_SIZE, w // POOL_SIZE
        rows = img.reshape(POOL_SIZE, fy, w * 3).astype(np.uint32)
        acc = rows[:, 0].copy()
        for k in range(1, fy):  # plain adds of strided slices: far faster than a reduction over inner axes
            acc += rows[:, k]
        cols = acc.reshape(POOL_SIZE, POOL_SIZE, fx, 3)
        out = cols[:, :, 0].copy()
        for k in range(1, fx):
            out += cols[:, :, k]
        return np.rint(out / (fy * fx))
    return resize_image(img, (POOL_SIZE, POOL_SIZE)).astype(np.float64)


@dataclass
class CameraStats:
    """One camera's demonstration statistics: embedding mean, inverse shrunk covariance, pooled histograms."""

    mean: np.ndarray
    precision: np.ndarray
    frames: int
    histogram: np.ndarray  # (3, 256) pooled per-channel histogram of the demo frames (observation harmonization)
    photometric_precision: np.ndarray | None = None  # of the PHOTOMETRIC features alone

    def score(self, features: np.ndarray, photometric: bool = False) -> float:
        """Mahalanobis distance² / dimension of an embedding (≈ 1 in distribution); ``photometric``: of its colour
        statistics alone."""
        d = np.asarray(features, np.float64) - self.mean
        if photometric:
            if self.photometric_precision is None:
                raise R2AInputError("these image stats have no photometric precision; recompute them")
            d = d[_PHOTOMETRIC_INDEX]
            return float(d @ self.photometric_precision @ d) / len(d)
        return float(d @ self.precision @ d) / len(d)


@dataclass
class ImageStats:
    """Per camera statistics of the demonstrations' images, and where they came from."""

    cameras: dict[str, CameraStats]
    sources: list[dict[str, Any]] = field(default_factory=list)
    #: camera → the detector's threshold on ``score`` (fitted on training-split clean vs shifted renders), or None
    thresholds: dict[str, float | None] = field(default_factory=dict)
    #: how the thresholds were fitted: per camera the false-positive rate, frames, ROC-AUC per shift condition
    detector: dict[str, Any] = field(default_factory=dict)

    def score(self, camera: str, image: np.ndarray) -> float:
        """How unlike the demonstrations ``image`` of ``camera`` is (see :meth:`CameraStats.score`)."""
        if camera not in self.cameras:
            raise R2AInputError(f"image stats have no camera {camera!r}; they hold {', '.join(self.cameras)}")
        return self.cameras[camera].score(pooled_image_features(image))


def roc_auc(negatives: np.ndarray, positives: np.ndarray) -> float:
    """Area under the ROC curve of scores (positives should score higher): the Mann–Whitney statistic, ties half."""
    neg, pos = np.asarray(negatives, np.float64), np.asarray(positives, np.float64)
    if len(neg) == 0 or len(pos) == 0:
        raise R2AInputError("ROC-AUC needs at least one negative and one positive score")
    order = np.argsort(np.concatenate([neg, pos]), kind="mergesort")
    ranks = np.empty(len(order))
    values = np.concatenate([neg, pos])[order]
    i = 0
    while i < len(values):  # average ranks over ties
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[len(neg):].sum() - len(pos) * (len(pos) + 1) / 2.0) / (len(neg) * len(pos)))


def fit_threshold(negatives: np.ndarray, positives: np.ndarray) -> float:
    """The threshold on the score that best separates ``positives`` (should fire) from ``negatives`` (should
    not): the largest Youden's J = TPR − FPR, placed midway between the two scores it falls between (log scale)."""
    neg, pos = np.asarray(negatives, np.float64), np.asarray(positives, np.float64)
    if len(neg) < 2 or len(pos) < 2:
        raise R2AInputError("fitting a detector threshold needs at least 2 frames that should and 2 that should not fire")
    values = np.unique(np.concatenate([neg, pos]))
    cuts = np.sqrt(np.maximum(values[:-1], 1e-12) * np.maximum(values[1:], 1e-12)) if len(values) > 1 else values
    tpr = (pos[None, :] > cuts[:, None]).mean(1)
    fpr = (neg[None, :] > cuts[:, None]).mean(1)
    return float(cuts[int(np.argmax(tpr - fpr))])


def fit_camera_stats(images: Iterable[np.ndarray]) -> CameraStats:
    """Statistics of a camera from its demonstration frames (uint8 ``(H, W, 3)`` each)."""
    feats, hist, n = [], np.zeros((3, 256)), 0
    for img in images:
        img = np.asarray(img)
        feats.append(pooled_image_features(img))
        for c in range(3):
            hist[c] += np.bincount(img[..., c].ravel(), minlength=256)
        n += 1
    if n < 2:
        raise R2AInputError(f"image stats need at least 2 frames per camera, got {n}")
    x = np.stack(feats)
    photo = list(PHOTOMETRIC)
    return CameraStats(mean=x.mean(0), precision=_shrunk_precision(x), frames=n,
                       histogram=hist / np.maximum(hist.sum(axis=1, keepdims=True), 1),
                       photometric_precision=_shrunk_precision(x[:, photo]))


def _shrunk_precision(x: np.ndarray) -> np.ndarray:
    cov = np.cov(x, rowvar=False) + 1e-6 * np.eye(x.shape[1])
    return np.linalg.pinv((1 - SHRINKAGE) * cov + SHRINKAGE * np.diag(np.diag(cov)))


def save_image_stats(stats: ImageStats, path: str | Path) -> Path:
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "feature_names": FEATURE_NAMES,
           "sources": stats.sources, "thresholds": stats.thresholds, "detector": stats.detector,
           "cameras": {name: {"mean": s.mean.tolist(), "precision": s.precision.tolist(), "frames": s.frames,
                              "histogram": s.histogram.tolist(),
                              "photometric_precision": None if s.photometric_precision is None
                              else s.photometric_precision.tolist()} for name, s in stats.cameras.items()}}
    write_json_atomic(Path(path), doc)
    return Path(path)


def load_image_stats(path: str | Path) -> ImageStats:
    """Read an ``r2a.image-stats`` file; another format, version or embedding is refused."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise R2AInputError(f"{path}: cannot read image stats ({err})") from None
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise R2AInputError(f"{path}: not an image-stats file (expected format {FORMAT!r})")
    if doc.get("format_version") != FORMAT_VERSION:
        raise R2AInputError(f"{path}: image-stats format_version {doc.get('format_version')!r} is not supported "
                            f"(this r2a reads {FORMAT_VERSION})")
    if doc.get("feature_names") != FEATURE_NAMES:
        raise R2AInputError(f"{path}: computed with another image embedding; recompute it (r2a demos image-stats)")
    cameras = {}
    for name, s in doc["cameras"].items():
        photo = s.get("photometric_precision")
        cameras[name] = CameraStats(mean=np.asarray(s["mean"]), precision=np.asarray(s["precision"]),
                                    frames=int(s["frames"]), histogram=np.asarray(s["histogram"]),
                                    photometric_precision=None if photo is None else np.asarray(photo))
    return ImageStats(cameras=cameras, sources=list(doc.get("sources") or []),
                      thresholds={k: (None if v is None else float(v)) for k, v in (doc.get("thresholds") or {}).items()},
                      detector=dict(doc.get("detector") or {}))


__all__ = ["FEATURE_DIM", "CameraStats", "ImageStats", "fit_camera_stats", "fit_threshold", "load_image_stats",
           "pooled_image_features", "roc_auc", "save_image_stats"]
