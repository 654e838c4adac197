"""Image helpers shared by every package (numpy only: no PIL, cv2 or torchvision)."""

from __future__ import annotations

import numpy as np


def resize_image(img: np.ndarray, size: tuple[int, int], method: str = "area") -> np.ndarray:
    """Resize ``(H, W, C)`` — or a stack ``(N, H, W, C)`` — to ``size`` = (H', W') with numpy only ("nearest" or
    "area" averaging).

    An image already of that size is returned as it is (not copied): both methods would reproduce it exactly. A stack
    gives each frame as it comes out alone; uint8 frames shrunk by a power-of-two factor (128 → 64: a trainer loads
    10⁵ of them) are averaged over blocks for the whole stack at once.
    """
    if img.ndim == 4:
        return _resize_stack(img, size, method)
    (h, w), (oh, ow) = img.shape[:2], size
    if (h, w) == (oh, ow):
        return img
    if method == "nearest":
        rows, cols = _nearest_indices(h, oh), _nearest_indices(w, ow)
        return img[rows][:, cols]
    out = np.tensordot(_area_weights(h, oh), img.astype(np.float32), axes=(1, 0))
    out = np.tensordot(_area_weights(w, ow), out, axes=(1, 1)).transpose(1, 0, 2)
    return _as_input_dtype(out, img.dtype)


def _resize_stack(frames: np.ndarray, size: tuple[int, int], method: str) -> np.ndarray:
    (n, h, w, c), (oh, ow) = frames.shape, size
    if (h, w) == (oh, ow):
        return frames
    if method == "nearest":
        return frames[:, _nearest_indices(h, oh)][:, :, _nearest_indices(w, ow)]
    fh, fw = h // oh, w // ow
    if frames.dtype == np.uint8 and (fh * oh, fw * ow) == (h, w) and _power_of_two(fh) and _power_of_two(fw):
        # blocks of fh × fw pixels averaged: integer sums and a power-of-two scale, exact in float32 as every
        # partial sum of one frame's weighted products is — the same numbers, without multiplying by zeros
        mean = block_sums(frames, fh, fw).astype(np.float32) * np.float32(1.0 / (fh * fw))
        return _as_input_dtype(mean, frames.dtype)
    # otherwise frame by frame: a product over the whole stack sums in another order, one level off in a few pixels
    if n == 0:
        return np.empty((0, oh, ow, c), frames.dtype)
    return np.stack([resize_image(frame, size, method) for frame in frames])


def block_sums(img: np.ndarray, fy: int, fx: int) -> np.ndarray:
    """Integer sums over ``fy × fx`` pixel blocks of an integer image ``(H, W, C)`` or stack ``(N, H, W, C)`` whose
    sides are multiples of the block; uint16 while a uint8 block's sum fits (half the memory traffic of uint32), and
    rows are widened as they are added — plain adds of strided slices, far faster than a reduction over inner axes."""
    *lead, h, w, c = img.shape
    wide = np.uint16 if img.dtype == np.uint8 and fy * fx * 255 < 2 ** 16 else np.uint32
    rows = img.reshape(*lead, h // fy, fy, w * c)
    acc = rows[..., 0, :].astype(wide)
    for k in range(1, fy):
        acc += rows[..., k, :].astype(wide, copy=False)
    cols = acc.reshape(*lead, h // fy, w // fx, fx, c)
    out = cols[..., 0, :].copy()
    for k in range(1, fx):
        out += cols[..., k, :]
    return out


def _power_of_two(k: int) -> bool:
    return k > 0 and k & (k - 1) == 0


def _nearest_indices(n_in: int, n_out: int) -> np.ndarray:
    return np.minimum(((np.arange(n_out) + 0.5) * n_in / n_out).astype(int), n_in - 1)


def _as_input_dtype(out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Integer images are rounded to the nearest value and clipped to the type's range."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        out = np.clip(np.rint(out), info.min, info.max)
    return out.astype(dtype)


def _area_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) matrix: output pixel i averages input pixels by their overlap with its footprint."""
    edges = np.linspace(0.0, n_in, n_out + 1)
    pixels = np.arange(n_in)[None, :]
    overlap = np.minimum(edges[1:, None], pixels + 1) - np.maximum(edges[:-1, None], pixels)
    overlap = np.clip(overlap, 0.0, None)
    return (overlap / overlap.sum(axis=1, keepdims=True)).astype(np.float32)
