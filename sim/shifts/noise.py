"""Image-corruption shift on the third-person camera: Gaussian pixel noise, Gaussian blur, motion blur, fog.

One corruption type is drawn per episode; its severity comes from the level (LIBERO-Plus: motion blur, Gaussian
blur σ 1–10 px, zoom blur, fog, glass blur; plus Gaussian pixel noise). Every step draws fresh randomness from
the episode's observation generator: a new noise field, a jittered blur σ, a jittered motion direction and
length, a new fog pattern. Pixel sizes are given for a 128 px image and scale with the image width. Only
``images/agentview`` changes; the simulator is never touched.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from r2a_core.errors import R2AInputError
from r2a_core.types import image_key
from sim.shifts.base import RANGE, ShiftFactor, band, uniform

CORRUPTIONS = ("gaussian_noise", "gaussian_blur", "motion_blur", "fog")
#: the level parameter holding each corruption's severity range
SEVERITY_KEY = {"gaussian_noise": "noise_std", "gaussian_blur": "blur_sigma_px", "motion_blur": "motion_length_px",
                "fog": "fog_density"}
REFERENCE_SIZE = 128  # severities are stated for this image width
JITTER = 0.15  # per-step relative jitter of blur sizes
ANGLE_JITTER_DEG = 20.0


class NoiseShift(ShiftFactor):
    name = "noise"
    index = 5
    modifies_state = False
    transform_draws_randomness = True
    summary = "agentview corruption per step: Gaussian noise, Gaussian blur, motion blur or fog"
    level_schema = {"noise_std": RANGE, "blur_sigma_px": RANGE, "motion_length_px": RANGE, "fog_density": RANGE}

    #: each corruption is its own knob; severity 1: noise σ 50/255, blur σ 10 px (LIBERO-Plus's bound), motion
    #: blur 24 px, fog density 0.8 (sizes at 128 px)
    knobs = CORRUPTIONS
    OUTER = {"gaussian_noise": 50.0, "gaussian_blur": 10.0, "motion_blur": 24.0, "fog": 0.8}

    def _params_at(self, knobs: dict[str, float]) -> dict[str, Any]:
        """The knobs given set their corruption's range; a corruption left out gets [0, 0] and is never drawn."""
        return {SEVERITY_KEY[kind]: band(knobs[kind], self.OUTER[kind]) if knobs.get(kind, 0.0) > 0 else [0.0, 0.0]
                for kind in CORRUPTIONS}

    def _sample(self, spec: dict[str, Any], rng: np.random.Generator, task: str) -> dict[str, Any]:
        kinds = enabled_corruptions(spec)
        if not kinds:
            raise R2AInputError("noise: every corruption's range is [0, 0]; enable at least one")
        kind = kinds[int(rng.integers(len(kinds)))]
        params: dict[str, Any] = {"camera": "agentview", "corruption": kind,
                                  "severity": uniform(rng, spec[SEVERITY_KEY[kind]])}
        if kind == "motion_blur":
            params["angle_deg"] = uniform(rng, [0.0, 180.0])
        return params

    def describe(self, params: dict[str, Any]) -> str:
        return f"{params['corruption'].replace('gaussian_', '')} {params['severity']:.2g}"

    def transform_obs(self, obs: dict[str, Any], params: dict[str, Any],
                      rng: np.random.Generator) -> dict[str, Any]:
        key = image_key(params["camera"])
        if key not in obs:
            return obs
        return {**obs, key: corrupt(obs[key], params, rng)}


def enabled_corruptions(spec: dict[str, Any]) -> tuple[str, ...]:
    """The corruptions a level can draw: those whose severity range is not [0, 0]."""
    return tuple(kind for kind in CORRUPTIONS if spec[SEVERITY_KEY[kind]][1] > 0)


def corrupt(image: np.ndarray, params: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    """Apply the episode's corruption to one uint8 (H, W, 3) image with fresh per-step randomness."""
    import cv2

    kind, severity = params["corruption"], float(params["severity"])
    scale = image.shape[1] / REFERENCE_SIZE
    img = image.astype(np.float32)
    if kind == "gaussian_noise":  # severity: std in 0–255 intensity units
        img = img + rng.normal(0.0, severity, img.shape).astype(np.float32)
    elif kind == "gaussian_blur":  # severity: σ in pixels at 128 px
        sigma = max(severity * scale * (1.0 + rng.uniform(-JITTER, JITTER)), 1e-3)
        img = cv2.GaussianBlur(img, (0, 0), sigmaX=sigma, sigmaY=sigma, borderType=cv2.BORDER_REFLECT)
    elif kind == "motion_blur":  # severity: streak length in pixels at 128 px
        length = max(severity * scale * (1.0 + rng.uniform(-JITTER, JITTER)), 1.0)
        angle = float(params["angle_deg"]) + rng.uniform(-ANGLE_JITTER_DEG, ANGLE_JITTER_DEG)
        img = cv2.filter2D(img, -1, motion_kernel(length, angle), borderType=cv2.BORDER_REFLECT)
    elif kind == "fog":  # severity: opacity of the densest fog
        fog = fractal_noise(img.shape[:2], rng)
        alpha = (severity * (0.5 + 0.5 * fog))[..., None]
        haze = np.float32(0.85 * 255.0)  # light grey fog
        img = img * (1.0 - alpha) + haze * alpha
    else:  # pragma: no cover - validated when sampled
        raise ValueError(kind)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def motion_kernel(length: float, angle_deg: float) -> np.ndarray:
    """A normalized line kernel of ``length`` pixels at ``angle_deg`` (a straight camera-shake streak)."""
    size = (int(np.ceil(length)) + 2) | 1  # odd, with room for the sub-pixel spread
    kernel = np.zeros((size, size), np.float32)
    centre = (size - 1) / 2.0
    # points along the streak, splatted bilinearly: the kernel changes smoothly with length and angle
    t = np.linspace(-(length - 1) / 2.0, (length - 1) / 2.0, 8 * int(np.ceil(length)) + 1)
    xs = centre + t * np.cos(np.deg2rad(angle_deg))
    ys = centre + t * np.sin(np.deg2rad(angle_deg))
    x0, y0 = np.floor(xs).astype(int), np.floor(ys).astype(int)
    fx, fy = (xs - x0).astype(np.float32), (ys - y0).astype(np.float32)
    for dx, dy, w in ((0, 0, (1 - fx) * (1 - fy)), (1, 0, fx * (1 - fy)), (0, 1, (1 - fx) * fy), (1, 1, fx * fy)):
        np.add.at(kernel, (np.clip(y0 + dy, 0, size - 1), np.clip(x0 + dx, 0, size - 1)), w)
    return kernel / kernel.sum()


def fractal_noise(shape: tuple[int, int], rng: np.random.Generator, octaves: int = 4) -> np.ndarray:
    """Smooth random field in [0, 1]: upsampled random grids at doubling frequencies, amplitudes halving."""
    import cv2

    h, w = shape
    field = np.zeros((h, w), np.float32)
    amplitude, total = 1.0, 0.0
    for octave in range(octaves):
        cells = 2 ** (octave + 1)
        grid = rng.random((cells + 1, cells + 1)).astype(np.float32)
        field += amplitude * cv2.resize(grid, (w, h), interpolation=cv2.INTER_CUBIC)
        total += amplitude
        amplitude /= 2.0
    field /= total
    return np.clip((field - field.min()) / max(float(field.max() - field.min()), 1e-6), 0.0, 1.0)
