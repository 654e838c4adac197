"""The image warp of view canonicalization: a precomputed bilinear remap (well under 1 ms a frame at 64 px) and the
remap that shows a moved camera's image from the clean viewpoint, exact on the table plane.

Pixels of the canonical view with no source: outside the shifted image the edge is replicated (the nearest
observed colour: no hard border the base never saw); rays that miss the table plane in front of both cameras
(rare: above the horizon) take the frame's mean colour.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2a_core.camera import CameraView, plane_homography


@dataclass(frozen=True)
class WarpMap:
    """A precomputed bilinear remap of an ``(H, W, 3)`` image: for each output pixel the four source indexes and
    weights (edges replicated) and where no source exists (``invalid``: filled with the frame's mean colour)."""

    index: np.ndarray    # (H·W, 4) flat source pixel indexes
    weight: np.ndarray   # (H·W, 4) float32 bilinear weights
    invalid: np.ndarray  # (H·W,) bool
    size: tuple[int, int]

    @classmethod
    def from_homography(cls, dst_to_src: np.ndarray, size: tuple[int, int]) -> "WarpMap":
        """``dst_to_src`` takes an output pixel to the source pixel it shows (continuous, centres at +0.5)."""
        h, w = size
        u, v = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
        q = dst_to_src @ np.stack([u.ravel(), v.ravel(), np.ones(h * w)])
        invalid = ~(q[2] > 1e-9) | ~np.all(np.isfinite(q), axis=0)
        den = np.where(invalid, 1.0, q[2])
        x = np.clip(np.nan_to_num(q[0] / den) - 0.5, 0, w - 1)
        y = np.clip(np.nan_to_num(q[1] / den) - 0.5, 0, h - 1)
        x0, y0 = np.minimum(np.floor(x).astype(np.int64), w - 1), np.minimum(np.floor(y).astype(np.int64), h - 1)
        x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
        fx, fy = x - x0, y - y0
        index = np.stack([y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1], axis=1)
        weight = np.stack([(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy], axis=1).astype(np.float32)
        return cls(index, weight, invalid, (h, w))

    def apply(self, image: np.ndarray) -> np.ndarray:
        h, w = self.size
        flat = np.asarray(image, np.float32).reshape(h * w, -1)
        out = np.einsum("nk,nkc->nc", self.weight, flat[self.index])
        if self.invalid.any():
            out[self.invalid] = flat.mean(axis=0)
        return np.clip(out + 0.5, 0, 255).astype(np.uint8).reshape(image.shape)


def canonical_warp(shifted: CameraView, clean: CameraView, height: float, size: tuple[int, int]) -> WarpMap:
    """The remap showing ``shifted``'s image from ``clean``'s viewpoint (exact on the table plane)."""
    return WarpMap.from_homography(plane_homography(clean, shifted, height, size), size)


__all__ = ["WarpMap", "canonical_warp"]
