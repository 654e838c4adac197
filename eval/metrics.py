"""Per-episode trajectory quality from end-effector positions and the gripper opening
(docs/architecture.md, "The shift benchmark").

Success rate says whether a policy got there; these say how: a policy that wanders, jitters or chatters its
gripper under a shift can still succeed. Positions are ``(T, 3)`` in metres sampled every ``dt`` seconds
(control at 20 Hz → ``dt = 0.05``); the gripper opening is ``(T,)`` in [0, 1]. Compare them only on episodes
that succeed in both runs of a pair, or failures (which stop at the horizon) dominate the means.
"""

from __future__ import annotations

import math

import numpy as np

from r2a_core.errors import R2AInputError

#: below this peak speed (m/s) an episode "never moves" and SPARC is undefined
STILL_SPEED = 1e-3
#: a gripper opening change this large in the opposite direction counts as a toggle (fraction of full range)
GRIPPER_HYSTERESIS = 0.1


def speed_profile(ee_pos: np.ndarray, dt: float) -> np.ndarray:
    """EE speed (m/s) between consecutive samples, ``(T − 1,)``."""
    return np.linalg.norm(np.diff(_positions(ee_pos), axis=0), axis=1) / dt


def path_length(ee_pos: np.ndarray) -> float:
    """Total distance travelled by the EE (m)."""
    return float(np.linalg.norm(np.diff(_positions(ee_pos), axis=0), axis=1).sum())


def mean_speed(ee_pos: np.ndarray, dt: float) -> float:
    """Path length over episode duration (m/s); 0 for fewer than two samples."""
    pos = _positions(ee_pos)
    return path_length(pos) / (dt * (len(pos) - 1)) if len(pos) > 1 else 0.0


def integrated_squared_jerk(ee_pos: np.ndarray, dt: float) -> float:
    """∫|d³x/dt³|² dt by third-order finite differences (m²/s⁵); 0 for fewer than four samples.

    Sensitive to jitter that path length misses; it scales with duration, so compare paired episodes.
    """
    pos = _positions(ee_pos)
    if len(pos) < 4:
        return 0.0
    jerk = np.diff(pos, n=3, axis=0) / dt**3
    return float(np.sum(jerk * jerk) * dt)


def gripper_toggles(gripper: np.ndarray, hysteresis: float = GRIPPER_HYSTERESIS) -> int:
    """Number of open↔close changes of the gripper, counted with hysteresis.

    Fixed open/closed thresholds do not work on the measured opening: a gripper closed on a 4 cm cube stays
    half open. So the state flips when the opening moves by at least ``hysteresis`` against the current state
    from its extreme since the last flip (a Schmitt trigger on the motion): closing onto an object counts once,
    chatter smaller than ``hysteresis`` never counts. The start state is open if the opening is ≥ 0.5.
    A pick is 1 toggle, a pick-and-place 2. Works on a gripper command in [0, 1] too.
    """
    g = np.asarray(gripper, dtype=np.float64).reshape(-1)
    if g.size == 0:
        return 0
    is_open, extreme, toggles = bool(g[0] >= 0.5), float(g[0]), 0
    for x in g[1:]:
        extreme = max(extreme, x) if is_open else min(extreme, x)
        if abs(x - extreme) >= hysteresis:
            is_open, extreme, toggles = not is_open, float(x), toggles + 1
    return toggles


def time_to_success(success_step: int | None, dt: float) -> float | None:
    """Seconds until the success check first held (``success_step`` control steps); None if never."""
    return None if success_step is None else float(success_step) * dt


def sparc(speed: np.ndarray, fs: float, padlevel: int = 4, fc: float = 10.0, amp_th: float = 0.05,
          still_speed: float = STILL_SPEED) -> float:
    """Spectral arc length (SPARC; Balasubramanian et al. 2015) of a speed profile: smoothness, more negative =
    less smooth; it does not depend on the movement's amplitude or duration, unlike jerk.

    As in the authors' reference code: the FFT magnitude of the speed, zero-padded to ``2**padlevel`` times the
    next power of two (the usual "zero-padded ×4" is this padlevel 4), normalized by its maximum (the
    DC value for a non-negative speed); the band runs up to min(``fc``, the last frequency whose normalized
    amplitude is ≥ ``amp_th``); SPARC is minus the arc length of the normalized spectrum over that band with
    frequencies divided by the band width. A single minimum-jerk bell gives ≈ −1.40; submovements and tremor
    give more negative values. NaN when the peak speed is below ``still_speed`` (the episode never moves).
    """
    v = np.asarray(speed, dtype=np.float64).reshape(-1)
    if v.size == 0 or not np.all(np.isfinite(v)) or float(np.max(np.abs(v))) < still_speed:
        return math.nan
    nfft = int(2 ** (math.ceil(math.log2(v.size)) + padlevel))
    freq = np.arange(nfft) * (fs / nfft)
    mag = np.abs(np.fft.fft(v, nfft))
    mag = mag / mag.max()
    in_band = freq <= fc
    freq, mag = freq[in_band], mag[in_band]
    above = np.nonzero(mag >= amp_th)[0]
    freq, mag = freq[above[0]:above[-1] + 1], mag[above[0]:above[-1] + 1]
    if freq.size < 2:
        return math.nan
    df = np.diff(freq) / (freq[-1] - freq[0])
    return float(-np.sum(np.sqrt(df * df + np.diff(mag) ** 2)))


def trajectory_metrics(ee_pos: np.ndarray, gripper: np.ndarray, dt: float,
                       success_step: int | None = None) -> dict[str, float | None]:
    """All trajectory metrics of one episode, as floats (SPARC may be NaN; the report writes NaN as null)."""
    pos = _positions(ee_pos)
    grip = np.asarray(gripper, dtype=np.float64).reshape(-1)
    if grip.shape[0] != pos.shape[0]:
        raise R2AInputError(f"gripper has {grip.shape[0]} samples but ee_pos has {pos.shape[0]}; "
                            "pass one gripper opening per EE position")
    if dt <= 0:
        raise R2AInputError(f"dt must be > 0 seconds, got {dt}")
    return {"path_length": path_length(pos), "mean_speed": mean_speed(pos, dt),
            "integrated_squared_jerk": integrated_squared_jerk(pos, dt),
            "gripper_toggles": float(gripper_toggles(grip)),
            "time_to_success": time_to_success(success_step, dt),
            "sparc": sparc(speed_profile(pos, dt), 1.0 / dt) if len(pos) > 1 else math.nan}


def _positions(ee_pos: np.ndarray) -> np.ndarray:
    pos = np.asarray(ee_pos, dtype=np.float64)
    if pos.ndim != 2 or pos.shape[1] != 3:
        raise R2AInputError(f"ee_pos must have shape (T, 3), got {pos.shape}")
    return pos
