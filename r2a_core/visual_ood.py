"""How far a camera image is from the demonstrations' images: a frozen pooled embedding and its statistics.

One implementation, shared by the learned gate (a "the base may be unreliable" signal) and observation
harmonization. The embedding is deliberately cheap and frozen — no network, nothing learned, the same for any
policy: per-channel mean and spread, per-channel 8-bin histograms, saturation, a 4×4 grid of mean luminance and a
2×2 grid of gradient energy, all on a 32×32 area-downsampled copy (52 numbers, well under a millisecond at
128 px). VLA-Scope detects visual out-of-distribution inputs from pooled image features (ROC-AUC 0.945); this is
the policy-agnostic version of that idea.

:class:`ImageStats` holds, per camera, the demonstrations' embedding mean and a shrunk covariance; ``score`` is
the Mahalanobis distance² divided by the dimension (≈ 1 on images like the demonstrations', growing with the
shift). Per camera and demo file the stats also keep a *start reference*: the demos' first frames (their
gain-invariant layout, pooled colour moments and histogram), against which observation harmonization estimates
an episode's photometric shift from its own first frame. Stored as ``r2a.image-stats`` v2 (JSON: numbers only, no
pickle; v1, without start references, is still read); readers reject other versions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.files import write_json_atomic
from r2a_core.images import block_sums, resize_image

FORMAT, FORMAT_VERSION = "r2a.image-stats", 2
READABLE_VERSIONS = (1, 2)
#: side of the luminance layout that picks an episode's start reference (a coarse, gain-normalized thumbnail)
LAYOUT_SIZE = 8
POOL_SIZE = 32
HIST_BINS = 8
#: covariance shrinkage toward its diagonal (a few thousand frames estimate 52×52 covariances only roughly)
SHRINKAGE = 0.1
FEATURE_NAMES = ([f"mean_{c}" for c in "rgb"] + [f"std_{c}" for c in "rgb"]
                 + [f"hist_{c}{i}" for c in "rgb" for i in range(HIST_BINS)] + ["sat_mean", "sat_std"]
                 + [f"lum_{i}{j}" for i in range(4) for j in range(4)]
                 + [f"grad_{i}{j}" for i in range(2) for j in range(2)])
FEATURE_DIM = len(FEATURE_NAMES)
#: the photometric part of the embedding (colour statistics, no spatial layout): what observation harmonization's
#: detector scores, since a normalizer can undo a photometric shift but not a geometric one
PHOTOMETRIC = tuple(i for i, n in enumerate(FEATURE_NAMES) if n.startswith(("mean_", "std_", "hist_", "sat_")))
_PHOTOMETRIC_INDEX = np.array(PHOTOMETRIC)


def pooled_image_features(image: np.ndarray) -> np.ndarray:
    """The frozen embedding of one ``(H, W, 3)`` uint8 image → ``(FEATURE_DIM,)`` float64.

    Computed once per query on the gate's path, where ~30 small numpy calls cost more than their arithmetic on a
    32×32 image: the means and deviations are the reductions ``ndarray.mean``/``std`` run (:func:`_mean`,
    :func:`_std`), without their dispatch, and the three histograms one ``bincount`` — the same operations in the
    same order, so the embedding is bit for bit the same (``tests/test_retrieval_fast.py``).
    """
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise R2AInputError(f"image features: expected an (H, W, 3) image, got shape {img.shape}")
    small = _pooled(img) / 255.0
    flat = small.reshape(-1, 3)
    out = np.empty(FEATURE_DIM)
    out[0:3], out[3:6] = _column_mean_std(flat)
    bins = np.minimum((flat * HIST_BINS).astype(np.int64), HIST_BINS - 1) + _CHANNEL_BIN_OFFSET
    out[_HIST] = np.bincount(bins.ravel(), minlength=3 * HIST_BINS) / len(flat)
    hi = np.maximum(np.maximum(flat[:, 0], flat[:, 1]), flat[:, 2])  # flat.max(axis=1), without a 3-long reduction
    lo = np.minimum(np.minimum(flat[:, 0], flat[:, 1]), flat[:, 2])
    sat = np.where(hi > 1e-6, (hi - lo) / np.maximum(hi, 1e-6), 0.0)
    out[_SAT] = _mean_std(sat)
    lum = small @ _LUMA
    out[_GRID] = np.add.reduce(lum.reshape(4, POOL_SIZE // 4, 4, POOL_SIZE // 4), axis=(1, 3)).ravel() / (
        (POOL_SIZE // 4) ** 2)
    grad = np.abs(lum[1:] - lum[:-1])[:, :-1]
    grad += np.abs(lum[:, 1:] - lum[:, :-1])[:-1, :]
    half = grad.shape[0] // 2
    for i, block in enumerate((grad[:half, :half], grad[:half, half:], grad[half:, :half], grad[half:, half:])):
        out[_ENERGY + i] = _mean(block)
    return out


#: where :func:`pooled_image_features` writes each group (the order of :data:`FEATURE_NAMES`)
_HIST = slice(6, 6 + 3 * HIST_BINS)
_SAT = slice(_HIST.stop, _HIST.stop + 2)
_GRID = slice(_SAT.stop, _SAT.stop + 16)
_ENERGY = _GRID.stop
_CHANNEL_BIN_OFFSET = np.arange(3) * HIST_BINS
_LUMA = np.array([0.299, 0.587, 0.114])


def _mean(x: np.ndarray) -> Any:
    """``x.mean()`` for float64 ``x``: the sum numpy's mean takes, divided by the count."""
    return np.add.reduce(x, axis=None) / x.size


def _mean_std(x: np.ndarray) -> tuple[Any, Any]:
    """``(x.mean(), x.std())`` of a float64 vector by numpy's own steps (the mean; the squared deviations from it
    summed, divided, rooted), sharing the mean."""
    mean = _mean(x)
    dev = x - mean
    dev *= dev
    return mean, np.sqrt(_mean(dev))


def _column_mean_std(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x.mean(0), x.std(0))`` of a C-ordered float64 ``(n, c)`` array. numpy sums axis 0 of such an array row
    after row, ``c`` numbers at a time; a running sum along the rows of the transposed copy adds the same numbers
    in the same order with long inner loops (3× faster at 1024 × 3), so the results are the same bits."""
    t = np.ascontiguousarray(x.T)
    n = x.shape[0]
    mean = np.add.accumulate(t, axis=1)[:, -1] / n
    t -= mean[:, None]
    t *= t
    return mean, np.sqrt(np.add.accumulate(t, axis=1)[:, -1] / n)


def _pooled(img: np.ndarray) -> np.ndarray:
    """The 32×32 area-downsampled image (rounded to integers, as :func:`resize_image` gives for uint8), float64;
    a block mean when the size is a multiple of 32 (the same numbers, a fraction of the time)."""
    h, w = img.shape[:2]
    if h % POOL_SIZE == 0 and w % POOL_SIZE == 0 and np.issubdtype(img.dtype, np.integer):
        fy, fx = h // POOL_SIZE, w // POOL_SIZE
        return np.rint(block_sums(img, fy, fx) / (fy * fx))
    return resize_image(img, (POOL_SIZE, POOL_SIZE)).astype(np.float64)


def channel_histograms(image: np.ndarray) -> np.ndarray:
    """The ``(3, 256)`` per-channel value counts of a uint8 ``(H, W, 3)`` image."""
    return np.stack([np.bincount(image[..., c].ravel(), minlength=256) for c in range(3)])


def histogram_moments(histogram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation (0–255 units, the deviation at least 1) of ``(3, 256)`` histograms."""
    hist = np.asarray(histogram, np.float64)
    hist = hist / np.maximum(hist.sum(axis=1, keepdims=True), 1e-12)
    levels = np.arange(256.0)
    mean = hist @ levels
    return mean, np.sqrt(np.maximum((hist * (levels[None, :] - mean[:, None]) ** 2).sum(1), 1.0))


def start_layout(image: np.ndarray) -> np.ndarray:
    """The gain-invariant luminance layout of an image: an ``LAYOUT_SIZE``² thumbnail divided by its mean, so a
    brighter or dimmer version of the same scene has the same layout and different scenes do not."""
    lum = _pooled(np.asarray(image)) @ np.array([0.299, 0.587, 0.114])
    k = POOL_SIZE // LAYOUT_SIZE
    thumb = lum.reshape(LAYOUT_SIZE, k, LAYOUT_SIZE, k).mean(axis=(1, 3)).ravel()
    return thumb / max(float(thumb.mean()), 1e-6)


@dataclass
class StartReference:
    """What a demo file's episodes look like at their first frame (one scene, the robot at its start pose): the
    mean layout that identifies the scene and the pooled per-channel moments and histogram to normalize toward."""

    source: str
    episodes: int
    layout: np.ndarray  # (LAYOUT_SIZE², ) mean gain-normalized luminance thumbnail
    mean: np.ndarray  # (3,) per-channel mean, 0–255
    std: np.ndarray  # (3,) per-channel standard deviation, 0–255
    histogram: np.ndarray  # (3, 256) pooled per-channel histogram, normalized

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "episodes": self.episodes, "layout": self.layout.tolist(),
                "mean": self.mean.tolist(), "std": self.std.tolist(), "histogram": self.histogram.tolist()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "StartReference":
        return cls(source=str(d["source"]), episodes=int(d["episodes"]), layout=np.asarray(d["layout"], np.float64),
                   mean=np.asarray(d["mean"], np.float64), std=np.asarray(d["std"], np.float64),
                   histogram=np.asarray(d["histogram"], np.float64))


def fit_start_reference(first_frames: Iterable[np.ndarray], source: str) -> StartReference:
    """The start reference of one demo file from its episodes' first frames (uint8 ``(H, W, 3)`` each)."""
    frames = [np.asarray(f) for f in first_frames]
    if not frames:
        raise R2AInputError(f"{source}: no first frames to build a start reference from")
    hist = np.zeros((3, 256))
    for img in frames:
        hist += channel_histograms(img)
    hist /= hist.sum(axis=1, keepdims=True)
    mean, std = histogram_moments(hist)
    return StartReference(source=source, episodes=len(frames), layout=np.mean([start_layout(f) for f in frames], 0),
                          mean=mean, std=std, histogram=hist)


@dataclass
class CameraStats:
    """One camera's demonstration statistics: embedding mean, inverse shrunk covariance, pooled histograms."""

    mean: np.ndarray
    precision: np.ndarray
    frames: int
    histogram: np.ndarray  # (3, 256) pooled per-channel histogram of the demo frames (observation harmonization)
    photometric_precision: np.ndarray | None = None  # of the PHOTOMETRIC features alone
    starts: list[StartReference] = field(default_factory=list)  # one per demo file (format v2)

    def start_reference(self, image: np.ndarray) -> StartReference:
        """The start reference whose scene layout is nearest to ``image``'s (an episode's first frame)."""
        if not self.starts:
            raise R2AInputError("these image stats have no start references (format v1); recompute them with "
                                "'r2a demos image-stats'")
        layout = start_layout(image)
        return min(self.starts, key=lambda ref: float(np.sum((ref.layout - layout) ** 2)))

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

    def photometric_score(self, camera: str, image: np.ndarray) -> float:
        """The score of ``image``'s colour statistics alone: what the fitted detector threshold (``thresholds``)
        reads — it fires under light and background shifts, not under a moved camera."""
        if camera not in self.cameras:
            raise R2AInputError(f"image stats have no camera {camera!r}; they hold {', '.join(self.cameras)}")
        return self.cameras[camera].score(pooled_image_features(image), photometric=True)


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


def fit_threshold(negatives: np.ndarray | Sequence[np.ndarray],
                  positives: np.ndarray | Sequence[np.ndarray]) -> float:
    """The threshold on the score that best separates ``positives`` (should fire) from ``negatives`` (should
    not): the largest Youden's J = TPR − FPR, placed midway between the two scores it falls between (log scale).
    Each side is one array of scores or a list of groups (one per shift condition); groups count equally in their
    side's rate, so thousands of clean frames do not outweigh a few hundred of one shift."""
    neg, pos = _groups(negatives), _groups(positives)
    if sum(map(len, neg)) < 2 or sum(map(len, pos)) < 2:
        raise R2AInputError("fitting a detector threshold needs at least 2 frames that should and 2 that should "
                            "not fire")
    values = np.unique(np.concatenate(neg + pos))
    cuts = np.sqrt(np.maximum(values[:-1], 1e-12) * np.maximum(values[1:], 1e-12)) if len(values) > 1 else values
    tpr = np.mean([(g[None, :] > cuts[:, None]).mean(1) for g in pos], axis=0)
    fpr = np.mean([(g[None, :] > cuts[:, None]).mean(1) for g in neg], axis=0)
    return float(cuts[int(np.argmax(tpr - fpr))])


def _groups(scores: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    if isinstance(scores, np.ndarray) or not len(scores) or np.isscalar(scores[0]):
        scores = [scores]
    return [np.asarray(g, np.float64).ravel() for g in scores if len(g)]


def fit_camera_stats(images: Iterable[np.ndarray]) -> CameraStats:
    """Statistics of a camera from its demonstration frames (uint8 ``(H, W, 3)`` each)."""
    feats, hist, n = [], np.zeros((3, 256)), 0
    for img in images:
        img = np.asarray(img)
        feats.append(pooled_image_features(img))
        hist += channel_histograms(img)
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
                              else s.photometric_precision.tolist(),
                              "starts": [ref.to_dict() for ref in s.starts]} for name, s in stats.cameras.items()}}
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
    if doc.get("format_version") not in READABLE_VERSIONS:
        raise R2AInputError(f"{path}: image-stats format_version {doc.get('format_version')!r} is not supported "
                            f"(this r2a reads {', '.join(map(str, READABLE_VERSIONS))})")
    if doc.get("feature_names") != FEATURE_NAMES:
        raise R2AInputError(f"{path}: computed with another image embedding; recompute it (r2a demos image-stats)")
    cameras = {}
    for name, s in doc["cameras"].items():
        photo = s.get("photometric_precision")
        cameras[name] = CameraStats(mean=np.asarray(s["mean"]), precision=np.asarray(s["precision"]),
                                    frames=int(s["frames"]), histogram=np.asarray(s["histogram"]),
                                    photometric_precision=None if photo is None else np.asarray(photo),
                                    starts=[StartReference.from_dict(d) for d in s.get("starts") or []])
    return ImageStats(cameras=cameras, sources=list(doc.get("sources") or []),
                      thresholds={k: (None if v is None else float(v))
                                  for k, v in (doc.get("thresholds") or {}).items()},
                      detector=dict(doc.get("detector") or {}))


__all__ = ["FEATURE_DIM", "CameraStats", "ImageStats", "StartReference", "fit_camera_stats", "fit_start_reference",
           "channel_histograms", "fit_threshold", "histogram_moments", "load_image_stats", "pooled_image_features",
           "roc_auc", "save_image_stats", "start_layout"]
