"""Failure frames: a small strip of what the policy saw across an episode, so a reader of the report can see how
it failed next to its clean twin (``r2a bench run --save-frames failures``; RoboCasa-Shift's Fig. 7 style).

:class:`FrameStrip` is a :func:`demos.rollout.run_episode` observer that looks only at the observations the policy
was queried on — the only ones whose cameras render under ``render_unseen=False``, so a strip costs the benchmark
no extra renders (rendering every step made a LIBERO episode ~3x slower). It keeps an evenly thinned set of those
agentview frames (shift included), downscaled to at most :data:`MAX_SIDE` pixels, and at the end picks
:data:`N_FRAMES` evenly spaced ones, the last one seen included, as one row. A strip is at most
``N_FRAMES × MAX_SIDE`` by ``MAX_SIDE`` pixels, saved as WebP (:func:`encode_strip`: ≈ 15 KB, where its PNG took
≈ 65 KB; PNG where Pillow lacks WebP), and the episode holds at most ``4 × N_FRAMES + 1`` small frames in memory.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from r2a_core.images import resize_image
from r2a_core.types import image_key

#: frames per strip
N_FRAMES = 8
#: the longest side of one frame in the strip, in pixels
MAX_SIDE = 128
#: the camera shown (the third-person view; the wrist view rarely shows how a grasp went wrong)
CAMERA = "agentview"
#: WebP quality of a saved strip (:func:`encode_strip`): at 80 a strip reads like its PNG at a quarter of the bytes
STRIP_QUALITY = 80
_GAP = 2


class FrameStrip:
    """Observer collecting frames of one episode; :meth:`encoded` encodes the strip (:meth:`png` as PNG),
    :attr:`steps` says which."""

    def __init__(self, n_frames: int = N_FRAMES, max_side: int = MAX_SIDE, camera: str = CAMERA) -> None:
        self.n_frames, self.max_side, self.key = int(n_frames), int(max_side), image_key(camera)
        self._frames: list[tuple[int, np.ndarray]] = []
        self._last: tuple[int, np.ndarray] | None = None
        self._seen = 0     # queried observations so far
        self._stride = 1   # every stride-th of them is kept; doubled whenever the kept ones outgrow 4 × n_frames

    def __call__(self, step: Any) -> None:
        if step.reply is None:  # not a query: its images are the last rendered ones, not this step's
            return
        image = step.obs.get(self.key)
        if image is None:
            return
        if self._seen % self._stride == 0:
            self._frames.append((step.index, self._small(image)))
            self._last = None
            if len(self._frames) > 4 * self.n_frames:
                self._frames, self._stride = self._frames[::2], 2 * self._stride
        else:
            self._last = (step.index, image)
        self._seen += 1

    @property
    def count(self) -> int:
        return len(self._frames) + (self._last is not None)

    def _kept(self) -> list[tuple[int, np.ndarray]]:
        frames = list(self._frames)
        if self._last is not None:
            frames.append((self._last[0], self._small(self._last[1])))
        if len(frames) <= self.n_frames:
            return frames
        picks = np.unique(np.linspace(0, len(frames) - 1, self.n_frames).round().astype(int))
        return [frames[i] for i in picks]

    @property
    def steps(self) -> list[int]:
        """The control steps the strip's frames show, left to right."""
        return [index for index, _ in self._kept()]

    def image(self) -> np.ndarray:
        """The strip as one ``(H, W, 3)`` uint8 row of frames, white gaps between them."""
        frames = [image for _, image in self._kept()]
        if not frames:
            raise ValueError("no frames were observed")
        h = max(f.shape[0] for f in frames)
        strip = np.full((h, sum(f.shape[1] for f in frames) + _GAP * (len(frames) - 1), 3), 255, np.uint8)
        x = 0
        for frame in frames:
            strip[: frame.shape[0], x: x + frame.shape[1]] = frame
            x += frame.shape[1] + _GAP
        return strip

    def png(self) -> bytes:
        """The strip as PNG bytes."""
        return encode_png(self.image())

    def encoded(self) -> tuple[bytes, str]:
        """The strip as a run saves it: its bytes and file suffix (:func:`encode_strip`)."""
        return encode_strip(self.image())

    def _small(self, image: np.ndarray) -> np.ndarray:
        image = np.asarray(image)
        h, w = image.shape[:2]
        scale = min(1.0, self.max_side / max(h, w))
        size = (max(1, round(h * scale)), max(1, round(w * scale)))
        return np.ascontiguousarray(resize_image(image, size)[..., :3]).astype(np.uint8)


def encode_png(image: np.ndarray) -> bytes:
    """An ``(H, W, 3)`` uint8 image as PNG bytes (matplotlib's writer: Pillow, a matplotlib dependency)."""
    from matplotlib.image import imsave

    buffer = io.BytesIO()
    imsave(buffer, np.asarray(image, np.uint8), format="png")
    return buffer.getvalue()


def webp_available() -> bool:
    """Whether this Pillow (a matplotlib dependency) encodes WebP (its wheels do; a build without libwebp does not)."""
    from PIL import features

    return bool(features.check("webp"))


def encode_strip(image: np.ndarray) -> tuple[bytes, str]:
    """An ``(H, W, 3)`` (or RGBA) uint8 strip as a run saves it and ``r2a bench publish`` stores it: lossy WebP at
    :data:`STRIP_QUALITY` and its suffix ``.webp``, or, where Pillow lacks WebP, ``encode_png`` and ``.png``. Opaque
    RGBA (matplotlib's PNGs) is stored as RGB; the bytes are a function of the pixels (no timestamp)."""
    from PIL import Image

    image = np.ascontiguousarray(np.asarray(image, np.uint8))
    if image.ndim == 3 and image.shape[2] == 4 and bool((image[..., 3] == 255).all()):
        image = image[..., :3]
    if not webp_available():
        return encode_png(image), ".png"
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="WEBP", quality=STRIP_QUALITY, method=6)
    return buffer.getvalue(), ".webp"
