"""Failure frames: which steps a strip shows, and that it stays small."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
from matplotlib.image import imread

from eval.frames import MAX_SIDE, N_FRAMES, FrameStrip


def _run(strip: FrameStrip, steps: int, side: int = 32, query_every: int = 1) -> None:
    """``steps`` control steps, the policy queried every ``query_every``-th (``reply`` set, as run_episode does)."""
    for i in range(steps):
        image = np.full((side, side, 3), i % 256, np.uint8)
        strip(SimpleNamespace(index=i, obs={"images/agentview": image}, reply={} if i % query_every == 0 else None))


def _decoded(png: bytes) -> np.ndarray:
    return (imread(io.BytesIO(png)) * 255).round().astype(np.uint8)


def test_a_full_episode_gives_evenly_spaced_frames_ending_at_the_last_step():
    strip = FrameStrip()
    _run(strip, 150)
    steps = strip.steps
    assert len(steps) == N_FRAMES and steps[0] == 0 and steps[-1] == 149
    assert all(b > a for a, b in zip(steps, steps[1:]))
    image = _decoded(strip.png())
    assert image.shape[:2] == (32, N_FRAMES * 32 + 2 * (N_FRAMES - 1))
    assert image[0, 0, 0] == 0 and image[0, -1, 0] == 149             # first and last frame, by their pixels


def test_a_short_episode_still_spans_its_whole_length():
    strip = FrameStrip()
    _run(strip, 61)  # e.g. an early failure (an error) at step 60 of 150
    assert len(strip.steps) == N_FRAMES and strip.steps[-1] == 60
    tiny = FrameStrip()
    _run(tiny, 3)
    assert tiny.steps == [0, 1, 2]


def test_only_the_observations_the_policy_was_queried_on_are_shown():
    """Between queries the benchmark does not render (render_unseen=False): those images are stale, never shown."""
    strip = FrameStrip()
    _run(strip, 150, query_every=8)
    assert len(strip.steps) == N_FRAMES and strip.steps[0] == 0 and strip.steps[-1] == 144
    assert all(step % 8 == 0 for step in strip.steps)


def test_a_long_episode_holds_few_frames_and_still_ends_at_its_last_query():
    strip = FrameStrip()
    _run(strip, 1000)
    assert strip.count <= 4 * N_FRAMES + 1
    steps = strip.steps
    assert len(steps) == N_FRAMES and steps[0] == 0 and steps[-1] == 999
    gaps = np.diff(steps)
    assert gaps.max() <= 2 * gaps.min() + 1                               # evenly spaced, up to the thinning


def test_large_images_are_downscaled():
    strip = FrameStrip()
    _run(strip, 20, side=512)
    height, width = _decoded(strip.png()).shape[:2]
    assert height == MAX_SIDE and width <= N_FRAMES * MAX_SIDE + 2 * (N_FRAMES - 1)


def test_no_camera_no_frames():
    strip = FrameStrip()
    strip(SimpleNamespace(index=0, obs={"state/ee_pos": np.zeros(3)}, reply={}))
    assert strip.count == 0


def test_a_saved_strip_is_webp_that_reads_like_its_png(monkeypatch):
    """WebP at STRIP_QUALITY (where Pillow has it): the same size, pixels close to the PNG's, smaller, and the same
    bytes for the same pixels; PNG where Pillow lacks WebP."""
    from PIL import Image

    from eval import frames as frames_module
    from eval.frames import encode_strip, webp_available

    strip = FrameStrip()
    _run(strip, 150, side=64)
    pixels = strip.image()
    data, suffix = strip.encoded()
    if webp_available():
        assert suffix == ".webp" and data[:4] == b"RIFF" and data[8:12] == b"WEBP"
        with Image.open(io.BytesIO(data)) as image:
            assert image.mode == "RGB" and np.abs(np.asarray(image, np.int16) - pixels).mean() < 3
        assert len(data) < len(strip.png()) and encode_strip(pixels) == (data, suffix)
        opaque = np.concatenate([pixels, np.full(pixels.shape[:2] + (1,), 255, np.uint8)], axis=2)
        assert encode_strip(opaque) == (data, suffix)                   # matplotlib's RGBA PNGs, stored as RGB
    monkeypatch.setattr(frames_module, "webp_available", lambda: False)
    data, suffix = encode_strip(pixels)
    assert suffix == ".png" and (_decoded(data)[..., :3] == pixels).all()
