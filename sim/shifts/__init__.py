"""The seven shift factors of the built-in benchmark (LIBERO-Plus taxonomy), chosen by name
(docs/architecture.md, "The shift benchmark").

* ``FACTORS`` — name → factor with its levels from ``configs/bench/factors.yaml`` (loaded on first use);
  :func:`get_factor` (an unknown name lists the valid ones); :func:`load_factors` for another config.
* :func:`apply_shift` — draw one episode's parameters from ``[seed, level, factor index]`` (the same in every
  process) and apply them to a freshly reset simulator; returns ``(params, undo)``.
* :class:`ShiftHooks` — the same as :func:`demos.rollout.run_episode` hooks: applies the shift after reset, transforms
  every observation (fresh per-step randomness for image noise), restores the clean model at the end.

Factors: ``camera``, ``robot_init``, ``language``, ``light``, ``background``, ``noise``, ``layout`` (see each
module and ``docs/shifts/README.md``). Level 0 is the clean condition: no factor is applied.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from r2a_core.config import unknown_name_error
from r2a_core.errors import R2AInputError
from sim.shifts.base import CLEAN, LEVELS, ShiftFactor, Undo, check_level
from sim.shifts.config import load_factor_levels
from sim.shifts.registry import FACTOR_CLASSES, FACTOR_NAMES

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

#: stream tags of the two generators of an episode
_PARAMS_STREAM, _OBS_STREAM = 0, 1


@lru_cache(maxsize=8)
def _load(path: str | None) -> dict[str, ShiftFactor]:
    levels = load_factor_levels(path)["factors"]
    return {name: cls(levels[name]) for name, cls in FACTOR_CLASSES.items()}


def load_factors(config: str | Path | None = None) -> dict[str, ShiftFactor]:
    """All factors with their levels from ``config`` (default ``configs/bench/factors.yaml``)."""
    return dict(_load(str(config) if config is not None else None))


def get_factor(name: str, config: str | Path | None = None) -> ShiftFactor:
    """The factor called ``name``; an unknown name lists the valid ones."""
    if name not in FACTOR_CLASSES:
        raise unknown_name_error("shift factor", str(name), FACTOR_NAMES, plural="factors")
    return _load(str(config) if config is not None else None)[name]


def __getattr__(name: str) -> Any:
    """``FACTORS`` (name → factor with the default levels) is built on first use: importing reads no file."""
    if name == "FACTORS":
        return load_factors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
        raise R2AInputError(f"seed {seed!r} is not valid: expected a non-negative integer")
    return int(seed)


def params_rng(seed: int, factor: str | ShiftFactor, level: int) -> np.random.Generator:
    """The generator of an episode's shift parameters: ``default_rng([seed, level, factor index, 0])``."""
    factor = get_factor(factor) if isinstance(factor, str) else factor
    return np.random.default_rng([_check_seed(seed), check_level(level), factor.index, _PARAMS_STREAM])


def obs_rng(seed: int, factor: str | ShiftFactor, level: int) -> np.random.Generator:
    """The generator of an episode's per-step observation randomness (a stream apart from the parameters)."""
    factor = get_factor(factor) if isinstance(factor, str) else factor
    return np.random.default_rng([_check_seed(seed), check_level(level), factor.index, _OBS_STREAM])


def sample_params(factor: str | ShiftFactor, level: int, seed: int, task: str) -> dict[str, Any]:
    """The parameters of episode ``seed`` at ``level``: identical for the same inputs in any process."""
    factor = get_factor(factor) if isinstance(factor, str) else factor
    return factor.sample(level, params_rng(seed, factor, level), task)


def apply_shift(sim: "SimEnv", factor: str | ShiftFactor, level: int, seed: int | None = None,
                task: str | None = None, *, refresh: bool = True) -> tuple[dict[str, Any], Undo]:
    """Draw and apply one episode's shift to a freshly reset ``sim``; return ``(params, undo)``.

    Call after ``sim.reset(seed)`` and after recording the fingerprint. ``seed`` and ``task`` default to the
    simulator's. With ``refresh`` (default) the simulator's observation is recomputed, so ``sim.observe()``
    shows the shifted scene; pass it through ``factor.transform_obs`` before a policy sees it. A factor that
    does not touch the simulator (language, noise) leaves the reset's observation as it was: LIBERO's is the last
    settling step's, rendered from the kinematics a physics substep before the state, and a re-render would differ
    from it by ±1 in a few pixels of the wrist camera.
    Call ``undo()`` before the next episode: it restores the clean model (the next reset restores the state).
    """
    factor = get_factor(factor) if isinstance(factor, str) else factor
    seed = sim.seed if seed is None else seed
    if seed is None:
        raise R2AInputError("apply_shift needs a seed: reset the simulator first or pass seed=")
    params = sample_params(factor, level, seed, task or sim.task.name)
    undo = factor.apply(sim, params)
    if refresh and type(factor).apply is not ShiftFactor.apply:  # nothing edited, nothing to re-render
        sim.refresh_observation()
    return params, undo


class ShiftHooks:
    """``run_episode`` hooks that run one episode under ``factor`` at ``level`` (level 0: clean, no-op).

    ``after_reset`` applies the shift (the runner has recorded the fingerprint already) and returns the
    refreshed observation; ``transform`` changes what the policy sees; ``close`` undoes the model edits.
    ``params`` holds the episode's parameters (JSON-serializable) once the shift is applied.
    """

    def __init__(self, factor: str | ShiftFactor | None, level: int, config: str | Path | None = None) -> None:
        if factor is None or level == 0:
            self.factor: ShiftFactor | None = None
            self.level = 0
        else:
            self.factor = factor if isinstance(factor, ShiftFactor) else get_factor(factor, config)
            self.level = check_level(level)
        self.params: dict[str, Any] = {}
        self._undo: Undo | None = None
        self._rng: np.random.Generator | None = None

    def after_reset(self, sim: "SimEnv") -> dict[str, Any] | None:
        self.close()
        if self.factor is None:
            self.params = {}
            return None
        self.params, self._undo = apply_shift(sim, self.factor, self.level)
        self._rng = obs_rng(sim.seed, self.factor, self.level)
        return sim.observe()

    def transform(self, obs: dict[str, Any]) -> dict[str, Any]:
        if self.factor is None or self._rng is None:
            return obs
        return self.factor.transform_obs(obs, self.params, self._rng)

    def after_step(self, sim: "SimEnv", action: np.ndarray) -> None:
        return None

    @property
    def stepwise_transform(self) -> bool:
        """Whether ``transform`` carries nothing from one step to the next (its result depends on that step's
        observation alone), so that a rollout may skip it on the steps the policy does not see."""
        return self.factor is None or not self.factor.transform_draws_randomness

    def close(self) -> None:
        if self._undo is not None:
            undo, self._undo = self._undo, None
            undo()

    @property
    def instruction(self) -> str | None:
        """The instruction the policy was given, when the factor changed it (language), else None."""
        return self.params.get("instruction")


__all__ = ["CLEAN", "FACTORS", "FACTOR_CLASSES", "FACTOR_NAMES", "LEVELS", "ShiftFactor", "ShiftHooks", "apply_shift",
           "get_factor", "load_factors", "obs_rng", "params_rng", "sample_params"]
