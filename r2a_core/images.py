"""Image helpers shared by every package (numpy only: no PIL, cv2 or torchvision)."""

from __future__ import annotations

import numpy as np


def resize_image(img: np.ndarray, size: tuple[int, int], method: str = "area") -> np.ndarray:
    """Resize ``(H, W, C)`` to ``size`` = (H', W') with numpy only ("nearest" or "area" averaging).

    An image already of that size is returned as it is (not copied): both methods would reproduce it exactly.
    """
    (h, w), (oh, ow) = img.shape[:2], size
    if (h, w) == (oh, ow):
        return img
    if method == "nearest":
        rows = np.minimum(((np.arange(oh) + 0.5) * h / oh).astype(int), h - 1)
        cols = np.minimum(((np.arange(ow) + 0.5) * w / ow).astype(int), w - 1)
        return img[rows][:, cols]
    out = np.tensordot(_area_weights(h, oh), img.astype(np.float32), axes=(1, 0))
    out = np.tensordot(_area_weights(w, ow), out, axes=(1, 1)).transpose(1, 0, 2)
    if np.issubdtype(img.dtype, np.integer):
        info = np.iinfo(img.dtype)
        out = np.clip(np.rint(out), info.min, info.max)
    return out.astype(img.dtype)


def _area_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) matrix: output pixel i averages input pixels by their overlap with its footprint."""
    edges = np.linspace(0.0, n_in, n_out + 1)
    pixels = np.arange(n_in)[None, :]
    overlap = np.minimum(edges[1:, None], pixels + 1) - np.maximum(edges[:-1, None], pixels)
    overlap = np.clip(overlap, 0.0, None)
    return (overlap / overlap.sum(axis=1, keepdims=True)).astype(np.float32)
