"""The shift-factor interface and the small helpers every factor shares.

A factor changes one thing about an episode (the camera, the light, the start pose, ...) at a severity level
L1–L3; L0 is the clean condition and is never passed to a factor. Its life in one episode:

1. ``sample(level, rng, task)`` draws JSON-serializable parameters from the level's ranges (pure: no simulator);
2. ``apply(sim, params)`` runs right after ``sim.reset(seed)`` and after the runner recorded the fingerprint; it
   edits the model and/or the state and returns ``undo``, which restores exactly the clean model (the env is
   reused with ``hard_reset=False``, so model edits would otherwise persist into the next episode; state edits
   are undone by the next reset);
3. ``transform_obs(obs, params, rng)`` is applied to every observation the policy sees (identity by default).

Calibration (``r2a bench calibrate``) needs the levels as a function of one number: ``params_at(severity)`` maps a
severity in [0, 1] per knob — 0 is clean, 1 the factor's outer bound (LIBERO-Plus's range where it has one) — to
level parameters, every parameter monotone in it. Most factors have one knob; noise has one per corruption type so
each can be calibrated on its own; language is ordinal (its three paraphrase lists), not a knob.

``modifies_state`` says whether the factor changes the simulator's state or physics (then the scene really
differs) or only what the policy observes (then the physics, the fingerprint and a privileged expert's
behaviour are untouched).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

import numpy as np

from r2a_core.camera import camera_view_of
from r2a_core.errors import R2AInputError

if TYPE_CHECKING:  # pragma: no cover
    from sim.envs.robosuite_env import SimEnv

#: valid shift levels (L0 = clean is handled by the caller, not by a factor)
LEVELS: tuple[int, ...] = (1, 2, 3)
#: the name of the clean condition (level 0) in configs, records and reports
CLEAN = "clean"

Undo = Callable[[], None]

#: kinds of level parameters the YAML may hold (see :func:`check_value`)
RANGE, NUMBER, INT, PROB, BOOL = "range", "number", "int", "probability", "bool"


def check_level(level: Any) -> int:
    """``level`` as an int in 1..3, or :class:`R2AInputError` (0 is the clean condition, not a factor level)."""
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, np.integer)) or int(level) not in LEVELS:
        raise R2AInputError(f"shift level {level!r} is not valid: expected 1, 2 or 3 "
                            "(level 0 is the clean condition and applies no shift)")
    return int(level)


def check_value(kind: str, value: Any, where: str) -> Any:
    """Validate one level parameter of kind ``range``/``number``/``int``/``probability``/``bool``."""
    def is_number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x)

    if kind == RANGE:
        if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(map(is_number, value))
                and value[0] <= value[1]):
            raise R2AInputError(f"{where}: expected a range [low, high] with low <= high, got {value!r}")
        return [float(value[0]), float(value[1])]
    if kind == NUMBER:
        if not is_number(value):
            raise R2AInputError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if kind == INT:
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise R2AInputError(f"{where}: expected a non-negative integer, got {value!r}")
        return int(value)
    if kind == PROB:
        if not (is_number(value) and 0.0 <= value <= 1.0):
            raise R2AInputError(f"{where}: expected a probability in [0, 1], got {value!r}")
        return float(value)
    if kind == BOOL:
        if not isinstance(value, bool):
            raise R2AInputError(f"{where}: expected true or false, got {value!r}")
        return value
    raise AssertionError(kind)


class ShiftFactor:
    """Base class of the shift factors; subclasses set the class attributes and implement ``_sample``/``apply``.

    ``levels`` maps 1..3 to that level's validated parameters (from ``configs/bench/factors.yaml``).
    """

    #: registry name
    name: ClassVar[str] = ""
    #: stable index in the parameter seed ``[seed, level, index]`` — never reuse or renumber
    index: ClassVar[int] = -1
    #: True if the factor changes the simulator state/physics, False if it changes only observations
    modifies_state: ClassVar[bool] = False
    #: parameter name → kind (``range``, ``number``, ``int``, ``probability``, ``bool``) of each level
    level_schema: ClassVar[dict[str, str]] = {}
    #: one-line description (README, CLI help)
    summary: ClassVar[str] = ""

    #: the factor's severity knobs (``params_at``); one per independently calibrated part
    knobs: ClassVar[tuple[str, ...]] = ("severity",)
    #: an ordinal factor's only valid severities (language: its three lists); None for a continuous knob
    ordinal: ClassVar[tuple[float, ...] | None] = None

    def __init__(self, levels: dict[int, dict[str, Any]]) -> None:
        self.levels = levels

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, modifies_state={self.modifies_state})"

    def level_params(self, level: int) -> dict[str, Any]:
        return self.levels[check_level(level)]

    def sample(self, level: int, rng: np.random.Generator, task: str) -> dict[str, Any]:
        """Draw this episode's parameters (JSON-serializable) from ``level``'s ranges."""
        params = self._sample(self.level_params(level), rng, task)
        return {"factor": self.name, "level": int(level), **to_jsonable(params)}

    def _sample(self, spec: dict[str, Any], rng: np.random.Generator, task: str) -> dict[str, Any]:
        raise NotImplementedError

    def params_at(self, severity: float | Mapping[str, float]) -> dict[str, Any]:
        """Level parameters at ``severity`` (a number for a one-knob factor, else knob → number, each in [0, 1];
        a knob left out of the mapping is off), validated against ``level_schema``."""
        knobs = self.knob_values(severity)
        params = self._params_at(knobs)
        where = f"{self.name} at severity {knobs}"
        return {p: _rounded(check_value(kind, params[p], f"{where}: {p}")) for p, kind in self.level_schema.items()}

    def knob_values(self, severity: float | Mapping[str, float]) -> dict[str, float]:
        """``severity`` as knob → value, checked: known knobs, values in [0, 1], ordinal steps only."""
        values = dict(severity) if isinstance(severity, Mapping) else {self.knobs[0]: severity}
        if not isinstance(severity, Mapping) and len(self.knobs) > 1:
            raise R2AInputError(f"{self.name} has several severity knobs ({', '.join(self.knobs)}): "
                                "give a mapping knob → severity")
        out = {}
        for knob, value in values.items():
            if knob not in self.knobs:
                raise R2AInputError(f"{self.name} has no severity knob {knob!r}; knobs: {', '.join(self.knobs)}")
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0 <= value <= 1:
                raise R2AInputError(f"{self.name}.{knob}: severity must be a number in [0, 1], got {value!r}")
            if self.ordinal is not None and not any(abs(value - step) < 1e-3 for step in self.ordinal):
                steps = ", ".join(f"{step:.4g}" for step in self.ordinal)
                raise R2AInputError(f"{self.name} is ordinal: severity must be one of {steps}, got {value!r}")
            out[knob] = float(value)
        return out

    def _params_at(self, knobs: dict[str, float]) -> dict[str, Any]:
        raise NotImplementedError(f"{self.name} has no severity knob")

    def describe(self, params: dict[str, Any]) -> str:
        """A short human-readable summary of sampled parameters (logs, contact sheet)."""
        return ""

    def apply(self, sim: "SimEnv", params: dict[str, Any]) -> Undo:
        """Change the simulator after reset; return ``undo`` restoring the clean model. Default: nothing."""
        return lambda: None

    #: whether ``transform_obs`` draws from its generator (fresh randomness per step): then every step's call
    #: advances the episode's stream, and a rollout must not leave out the steps the policy does not see
    transform_draws_randomness = False

    def transform_obs(self, obs: dict[str, Any], params: dict[str, Any],
                      rng: np.random.Generator) -> dict[str, Any]:
        """Change an observation the policy sees (a new dict; the input is not modified). Default: identity."""
        return obs


# ------------------------------------------------------------------------------------------------ helpers
def _rounded(value: Any) -> Any:
    """Level parameters to 6 decimals, so files written from them read as the numbers they mean."""
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return round(value, 6) if isinstance(value, float) else value


def to_jsonable(value: Any) -> Any:
    """numpy scalars/arrays → Python floats/ints/lists, recursively."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    return value


#: a range at severity s spans [BAND_LOW · s, s] of the way from the clean value to the outer bound, so episodes
#: of one level vary but a level never reaches into a milder one's lower half
BAND_LOW = 0.75


def band(severity: float, bound: float, clean: float = 0.0) -> list[float]:
    """The range of a parameter at ``severity``: from ``clean`` (severity 0) toward ``bound`` (severity 1)."""
    return [clean + BAND_LOW * severity * (bound - clean), clean + severity * (bound - clean)]


def uniform(rng: np.random.Generator, bounds: list[float]) -> float:
    return float(rng.uniform(bounds[0], bounds[1]))


def signed_uniform(rng: np.random.Generator, bounds: list[float]) -> float:
    """A magnitude from ``bounds`` with a random sign."""
    return float(rng.choice((-1.0, 1.0)) * rng.uniform(bounds[0], bounds[1]))


#: the scene kinds the factors tell apart (their one per-backend switch): robosuite's table arena (Lift, Stack,
#: StackThree) and bins arena (PickPlaceCan), LIBERO's table scenes (libero_spatial: the main table) and floor
#: scenes (libero_object: objects on the floor, no table)
TABLE, BINS, LIBERO_TABLE, LIBERO_FLOOR = "table", "bins", "libero_table", "libero_floor"
#: the scene kind of each LIBERO suite r2a registers
LIBERO_SUITE_SCENES = {"libero_spatial": LIBERO_TABLE, "libero_object": LIBERO_FLOOR}


def scene_of(task: str) -> str:
    """The kind of scene ``task`` is set in (from the task registry alone: samplers run without a simulator).

    Factors that depend on the scene (background's surfaces and materials, layout's placement) key their
    per-scene choices on it; an unregistered name counts as robosuite's table arena.
    """
    from sim.envs.libero_tasks import LIBERO_TASKS

    if task == "PickPlaceCan":
        return BINS
    if task in LIBERO_TASKS:
        suite = LIBERO_TASKS[task].suite
        if suite not in LIBERO_SUITE_SCENES:
            raise R2AInputError(f"no shift scene kind for LIBERO suite '{suite}': add it to "
                                "sim.shifts.base.LIBERO_SUITE_SCENES")
        return LIBERO_SUITE_SCENES[suite]
    return TABLE


def is_libero_scene(scene: str) -> bool:
    return scene in (LIBERO_TABLE, LIBERO_FLOOR)


def raw_model(sim: "SimEnv"):
    """The ``mujoco.MjModel`` behind robosuite's wrapper (its arrays are edited in place)."""
    return sim.mj_model


def raw_data(sim: "SimEnv"):
    return sim.mj_data


class ArraySnapshot:
    """Copies of some arrays (or some rows of them), written back by :meth:`restore`."""

    def __init__(self) -> None:
        self._saved: list[tuple[np.ndarray, Any, np.ndarray]] = []

    def save(self, array: np.ndarray, index: Any = slice(None)) -> None:
        self._saved.append((array, index, np.array(array[index], copy=True)))

    def restore(self) -> None:
        for array, index, value in reversed(self._saved):
            array[index] = value

    def undo_for(self, sim: "SimEnv") -> Undo:
        """A factor's ``undo``: write the saved arrays back and recompute the simulator's derived quantities."""
        def undo() -> None:
            self.restore()
            sim.sim.forward()

        return undo


def view_pivot(sim: "SimEnv", camera: str = "agentview") -> np.ndarray:
    """Where the camera's optical axis meets the table plane: the scene centre the camera looks at
    (:func:`r2a_core.camera.optical_axis_pivot`)."""
    return camera_view_of(sim, camera).pivot(sim.table_height())
