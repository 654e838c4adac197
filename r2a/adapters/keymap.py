"""Map our observation dict to a model's input keys, and the model's actions back to our action space.

A :class:`KeyMap` is data (loaded from ``configs/adapters/*.yaml``), so pointing r2a at another model means
writing a YAML file, not code. It does four things, in this order:

* ``images``: model key ← one of our images, optionally flipped and resized (numpy only: nearest or area);
* ``state``: model key ← the concatenation of our state vectors, as float32;
* ``copy``: model key ← one of our keys, unchanged (e.g. ``prompt``);
* ``keep_unmapped``: also pass on every observation key not used above, under its own name.

Besides the observation keys, derived state keys exist for models trained on LIBERO-style states:
``state/ee_axis_angle`` (3, from ``state/ee_quat``) and ``state/gripper_fingers`` (2, Panda finger joint
positions reconstructed from the normalized opening ``state/gripper``); and openpi's LIBERO convention
(:mod:`r2a.adapters.libero_convention`): ``state/libero/eef_axis_angle`` (3, robosuite's axis-angle of
``state/libero/eef_quat``), and ``state/libero/eef_pos``, ``state/libero/eef_quat``, ``state/libero/gripper_qpos``,
which the LIBERO backend carries and which are derived from our keys for observations without them. A derived
key may come from another one. ``state_dtype`` (float32 by default) is the dtype of every ``state`` vector.

Images: ``resize: area`` or ``nearest`` (numpy), or ``bilinear_pad`` — openpi's ``resize_with_pad`` (PIL
bilinear, aspect kept, zero padding).

Actions: when ``actions.model_dim`` is set the model's chunk must have that many columns (anything else is a
configuration error); it is then sliced or zero-padded to our action dimension, the gripper sign optionally
flipped (for models trained with +1 = open) and scaled.

The proxy (``r2a serve --upstream``) also needs the other direction, for the keys it can recover:
:meth:`KeyMap.unmap_obs` turns a model observation back into our keys — ``copy`` reversed, each ``state`` vector
split into its sources by their known widths (:data:`STATE_WIDTHS`; one source of unknown width, e.g.
``state/joint_pos``, takes the rest; derived keys are inverted: ``state/ee_axis_angle`` → ``state/ee_quat``,
``state/gripper_fingers`` → ``state/gripper``, LIBERO's keys → ours, the hand turned back into the grip site),
and with ``keep_unmapped`` every other key under its own name.
Images are never recovered. :meth:`KeyMap.unmap_actions` is the inverse of :meth:`KeyMap.map_actions`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from r2a.adapters.libero_convention import (
    LIBERO_EEF_AXIS_ANGLE,
    LIBERO_EEF_POS,
    LIBERO_EEF_QUAT,
    LIBERO_GRIPPER_QPOS,
    hand_quat_from_site,
    quat2axisangle,
    resize_with_pad,
    site_quat_from_hand,
)
from r2a_core.config import shipped_config, shipped_path
from r2a_core.errors import R2AInputError
from r2a_core.images import resize_image
from r2a_core.rotations import axis_angle_to_quat, quat_to_axis_angle, wxyz_to_xyzw
from r2a_core.types import (
    PANDA_GRIPPER_MAX_OPENING,
    STATE_EE_POS,
    STATE_EE_QUAT,
    STATE_GRIPPER,
    STATE_STEP,
    ActionSpace,
    gripper_opening,
)
from r2a_core.yaml_io import read_yaml_mapping

#: format of configs/adapters/*.yaml this reader understands
FORMAT_VERSION = 1
ADAPTER_DIR = shipped_path("configs/adapters")
RESIZE_METHODS = ("area", "nearest", "bilinear_pad")
STATE_DTYPES = ("float32", "float64")
FLIPS = ("none", "horizontal", "vertical", "rot180")
#: reads an observation key, derived ones included
Getter = Callable[[str], Any]
#: top-level YAML keys; the ones after the key map configure the transport (see AdapterConfig)
TOP_LEVEL_KEYS = ("format_version", "description", "images", "state", "state_dtype", "copy", "keep_unmapped",
                  "actions", "url", "api_key_env", "timeout", "checkpoint", "device")


def _fingers(get: Getter) -> np.ndarray:
    half = float(np.asarray(get(STATE_GRIPPER)).reshape(-1)[0]) * PANDA_GRIPPER_MAX_OPENING / 2.0
    return np.array([half, -half], dtype=np.float32)


#: derived key → (the key it is computed from, function of a getter that resolves keys, derived ones too)
DERIVED: dict[str, tuple[str, Callable[[Getter], np.ndarray]]] = {
    "state/ee_axis_angle": (STATE_EE_QUAT, lambda get: quat_to_axis_angle(np.asarray(get(STATE_EE_QUAT)))),
    "state/gripper_fingers": (STATE_GRIPPER, _fingers),
    LIBERO_EEF_AXIS_ANGLE: (LIBERO_EEF_QUAT, lambda get: quat2axisangle(wxyz_to_xyzw(np.asarray(get(LIBERO_EEF_QUAT),
                                                                                                np.float64)))),
    LIBERO_EEF_POS: (STATE_EE_POS, lambda get: np.asarray(get(STATE_EE_POS), np.float64).reshape(3)),
    LIBERO_EEF_QUAT: (STATE_EE_QUAT, lambda get: hand_quat_from_site(np.asarray(get(STATE_EE_QUAT)))),
    LIBERO_GRIPPER_QPOS: (STATE_GRIPPER, lambda get: _fingers(get).astype(np.float64)),
}


#: derived key → (our key, the inverse function): how :meth:`KeyMap.unmap_obs` recovers our key from it
INVERSE_DERIVED: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "state/ee_axis_angle": (STATE_EE_QUAT, lambda v: axis_angle_to_quat(v.reshape(3))),
    "state/gripper_fingers": (STATE_GRIPPER, lambda f: np.asarray(gripper_opening(f.reshape(2)))),
    LIBERO_EEF_AXIS_ANGLE: (STATE_EE_QUAT, lambda v: site_quat_from_hand(axis_angle_to_quat(v.reshape(3)))),
    LIBERO_EEF_POS: (STATE_EE_POS, lambda v: v.reshape(3)),
    LIBERO_EEF_QUAT: (STATE_EE_QUAT, lambda q: site_quat_from_hand(q.reshape(4))),
    LIBERO_GRIPPER_QPOS: (STATE_GRIPPER, lambda f: np.asarray(gripper_opening(f.reshape(2)))),
}
#: how many numbers each state key contributes to a concatenated model state (splitting it needs them)
STATE_WIDTHS: dict[str, int] = {STATE_EE_POS: 3, STATE_EE_QUAT: 4, STATE_GRIPPER: 1, STATE_STEP: 1,
                                "state/ee_axis_angle": 3, "state/gripper_fingers": 2, LIBERO_EEF_POS: 3,
                                LIBERO_EEF_QUAT: 4, LIBERO_EEF_AXIS_ANGLE: 3, LIBERO_GRIPPER_QPOS: 2}


@dataclass(frozen=True)
class ImageMap:
    """One model image ← one of our images (``source``), flipped then resized to ``size`` = (H, W)."""

    source: str
    size: tuple[int, int] | None = None
    resize: str = "area"
    flip: str = "none"


@dataclass(frozen=True)
class ActionMap:
    """How a model's action chunk becomes ours (see the module docstring)."""

    model_dim: int | None = None
    flip_gripper: bool = False
    #: a scalar scales the non-gripper dimensions; a list gives one factor per action dimension
    scale: float | tuple[float, ...] = 1.0


@dataclass(frozen=True)
class KeyMap:
    """Observation keys → model keys, and model actions → our actions. ``KeyMap()`` maps nothing."""

    images: Mapping[str, ImageMap] = field(default_factory=dict)
    state: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    copy: Mapping[str, str] = field(default_factory=dict)
    keep_unmapped: bool = False
    actions: ActionMap = ActionMap()
    #: dtype of every ``state`` vector (openpi's LIBERO client sends LIBERO's float64)
    state_dtype: str = "float32"
    #: where the map came from, for error messages
    source: str = "key map"

    @classmethod
    def identity(cls) -> "KeyMap":
        """Our keys unchanged, actions unchanged."""
        return cls(keep_unmapped=True, source="identity key map")

    def map_obs(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """The model's observation dict."""
        out: dict[str, Any] = {}
        for key, spec in self.images.items():
            out[key] = transform_image(self._get(obs, spec.source, key), spec, f"{self.source}: images.{key}")
        for key, sources in self.state.items():
            parts = [np.asarray(self._get(obs, s, key), dtype=self.state_dtype).reshape(-1) for s in sources]
            out[key] = np.concatenate(parts)
        for key, src in self.copy.items():
            out[key] = self._get(obs, src, key)
        if self.keep_unmapped:
            used = {s.source for s in self.images.values()} | set(self.copy.values())
            used |= {s for sources in self.state.values() for s in sources}
            out.update({k: v for k, v in obs.items() if k not in used and k not in out})
        return out

    def map_present(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """The model keys :meth:`map_obs` would write from the keys ``obs`` holds itself (images; states whose every
        source it holds, nothing derived; copies; with ``keep_unmapped`` the rest) — what a wrapper changed, to
        overlay on a client's own observation (the R2A proxy forwards harmonized images this way)."""
        out: dict[str, Any] = {}
        for key, spec in self.images.items():
            if spec.source in obs:
                out[key] = transform_image(obs[spec.source], spec, f"{self.source}: images.{key}")
        for key, sources in self.state.items():
            if all(s in obs for s in sources):
                out[key] = np.concatenate([np.asarray(obs[s], dtype=self.state_dtype).reshape(-1) for s in sources])
        out.update({key: obs[src] for key, src in self.copy.items() if src in obs})
        if self.keep_unmapped:
            used = {s.source for s in self.images.values()} | set(self.copy.values())
            used |= {s for sources in self.state.values() for s in sources}
            out.update({k: v for k, v in obs.items() if k not in used and k not in out})
        return out

    def _get(self, obs: Mapping[str, Any], key: str, target: str) -> Any:
        """``obs[key]``, or the derived key computed from what ``obs`` has (a derived key may need another)."""
        chain: list[str] = []

        def get(name: str) -> Any:
            if name in obs:
                return obs[name]
            if name in DERIVED and name not in chain:
                chain.append(name)
                return DERIVED[name][1](get)
            needed = f"'{key}'" + "".join(f" (derived from '{DERIVED[k][0]}')" for k in chain)
            raise R2AInputError(f"{self.source}: observation has no key {needed}, needed for model key '{target}'; "
                                f"keys present: {', '.join(sorted(obs)) or 'none'}")

        return get(key)

    # ------------------------------------------------------------------------------- model keys → our keys
    def source_of(self, key: str) -> str | None:
        """Where :meth:`unmap_obs` finds our ``key`` in a model observation, in words (None: nowhere)."""
        for model_key, src in self.copy.items():
            if src == key or INVERSE_DERIVED.get(src, ("",))[0] == key:
                return f"model key '{model_key}'" + ("" if src == key else f" ({src})")
        for model_key, sources in self.state.items():
            spans = _state_spans(sources)
            for src in sources:
                if (src == key or INVERSE_DERIVED.get(src, ("",))[0] == key) and src in spans:
                    lo, hi = spans[src]
                    where = f"[{lo}:{'' if hi is None else hi}]"
                    return f"model key '{model_key}'{where}" + ("" if src == key else f" ({src})")
        if self.keep_unmapped and key not in self._targets():
            return f"model key '{key}' (kept unmapped)"
        return None

    def unmap_obs(self, model_obs: Mapping[str, Any]) -> dict[str, Any]:
        """Our keys recovered from a model observation (the reverse of :meth:`map_obs`, images left out).

        A key whose model key is absent is simply not in the result; a state vector whose length does not fit
        its sources' widths raises :class:`R2AInputError` naming the model key. A key found directly wins over
        one derived from another (``state/ee_quat`` over ``state/ee_axis_angle``)."""
        found: list[tuple[str, Any]] = [(src, model_obs[k]) for k, src in self.copy.items() if k in model_obs]
        for model_key, sources in self.state.items():
            if model_key in model_obs:
                found += self._split_state(model_key, sources, model_obs[model_key])
        if self.keep_unmapped:
            targets = self._targets()
            found += [(k, v) for k, v in model_obs.items() if k not in targets]
        out: dict[str, Any] = {}
        for key, value in found:
            if key not in INVERSE_DERIVED:
                out.setdefault(key, value)
        for key, value in found:
            if key in INVERSE_DERIVED:
                ours, inverse = INVERSE_DERIVED[key]
                if ours not in out:
                    out[ours] = inverse(np.asarray(value, np.float64))
        return out

    def unmap_images(self, model_obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Our images recovered from a model observation: each mapped image with its flip undone (each flip is its
        own inverse), at the size the model gets (a resize cannot be undone)."""
        out: dict[str, np.ndarray] = {}
        for key, spec in self.images.items():
            if key in model_obs:
                image = transform_image(model_obs[key], ImageMap(source=key, flip=spec.flip),
                                        f"{self.source}: images.{key}")
                out[spec.source] = image
        return out

    def _targets(self) -> set[str]:
        return set(self.images) | set(self.state) | set(self.copy)

    def _split_state(self, model_key: str, sources: tuple[str, ...], value: Any) -> list[tuple[str, Any]]:
        vec = np.asarray(value, np.float64).reshape(-1)
        known = sum(STATE_WIDTHS.get(s, 0) for s in sources)
        open_ended = any(s not in STATE_WIDTHS for s in sources)
        if len(vec) < known or (not open_ended and len(vec) != known):
            widths = ", ".join(f"{s} ({STATE_WIDTHS.get(s, '?')})" for s in sources)
            raise R2AInputError(f"{self.source}: model key '{model_key}' has {len(vec)} numbers, expected "
                                f"{known}{' or more' if open_ended else ''}: {widths}")
        out: list[tuple[str, Any]] = []
        for src, (lo, hi) in _state_spans(sources).items():
            part = vec[lo:hi]
            if src == STATE_STEP:
                out.append((src, int(round(float(part[0])))))
            else:
                out.append((src, part.reshape(()) if STATE_WIDTHS.get(src) == 1 else part))
        return out

    # ------------------------------------------------------------------------------------------- actions
    def map_actions(self, actions: Any, action_space: ActionSpace) -> np.ndarray:
        """The model's chunk (H, model_dim) or single action → our (H, action_space.dim) float32 chunk."""
        spec, dim = self.actions, action_space.dim
        try:
            chunk = np.array(actions, dtype=np.float32)
        except (TypeError, ValueError) as err:
            raise R2AInputError(f"{self.source}: the model's actions are not a numeric array ({err})") from None
        chunk = chunk[None] if chunk.ndim == 1 else chunk
        if spec.model_dim is not None:
            if chunk.ndim != 2 or chunk.shape[1] != spec.model_dim:
                raise R2AInputError(f"{self.source}: the model returned actions of shape {chunk.shape}, "
                                    f"expected (H, {spec.model_dim}) (actions.model_dim)")
            chunk = chunk[:, :dim] if spec.model_dim >= dim else np.pad(chunk, ((0, 0), (0, dim - spec.model_dim)))
        if chunk.ndim != 2 or chunk.shape[1] != dim:
            return chunk  # a wrong shape is reported by the guard, with the policy's name
        if spec.flip_gripper:
            chunk[:, list(action_space.gripper_dims)] *= -1.0
        return chunk * self._scale_vector(action_space)

    def unmap_actions(self, actions: np.ndarray, action_space: ActionSpace,
                      model_chunk: np.ndarray | None = None) -> np.ndarray:
        """Our ``(n, action_space.dim)`` actions back in the model's format (the inverse of :meth:`map_actions`):
        unscaled, the gripper flipped back, padded or sliced to ``actions.model_dim``. Model columns beyond our
        dimension, which :meth:`map_actions` drops, are taken from ``model_chunk`` (the model's own chunk) row
        for row where it has them, else 0."""
        ours = np.asarray(actions, np.float64).reshape(-1, action_space.dim)
        scale = self._scale_vector(action_space).astype(np.float64)
        if (scale == 0).any():
            raise R2AInputError(f"{self.source}: actions.scale has a zero factor; the mapping cannot be inverted")
        out = ours / scale
        if self.actions.flip_gripper:
            out[:, list(action_space.gripper_dims)] *= -1.0
        model_dim = self.actions.model_dim
        if model_dim is not None and model_dim < action_space.dim:
            out = out[:, :model_dim]
        elif model_dim is not None and model_dim > action_space.dim:
            tail = np.zeros((len(out), model_dim - action_space.dim))
            if model_chunk is not None:
                given = np.asarray(model_chunk, np.float64)
                if given.ndim == 2 and given.shape[1] == model_dim:
                    rows = min(len(given), len(out))
                    tail[:rows] = given[:rows, action_space.dim:]
            out = np.concatenate([out, tail], axis=1)
        return out.astype(np.float32)

    def _scale_vector(self, action_space: ActionSpace) -> np.ndarray:
        scale = self.actions.scale
        if isinstance(scale, tuple):
            if len(scale) != action_space.dim:
                raise R2AInputError(f"{self.source}: actions.scale has {len(scale)} factors, expected "
                                    f"{action_space.dim} (one per action dimension: {', '.join(action_space.names)})")
            return np.asarray(scale, dtype=np.float32)
        factors = np.full(action_space.dim, float(scale), dtype=np.float32)
        factors[list(action_space.gripper_dims)] = 1.0
        return factors


def _state_spans(sources: tuple[str, ...]) -> dict[str, tuple[int, int | None]]:
    """Where each source sits in the concatenated vector, as slice bounds: counted from the start for the
    sources before the first one of unknown width, from the end (negative) for those after the last one; with
    exactly one unknown, it takes what lies between. Sources between two unknowns have no fixed place."""
    spans: dict[str, tuple[int, int | None]] = {}
    start = 0
    for src in sources:
        if src not in STATE_WIDTHS:
            break
        spans[src] = (start, start + STATE_WIDTHS[src])
        start += STATE_WIDTHS[src]
    unknown = [s for s in sources if s not in STATE_WIDTHS]
    if not unknown:
        return spans
    end = 0
    for src in reversed(sources):
        if src not in STATE_WIDTHS:
            break
        spans[src] = (end - STATE_WIDTHS[src], end or None)
        end -= STATE_WIDTHS[src]
    if len(unknown) == 1:
        spans[unknown[0]] = (start, end or None)
    return spans


# ----------------------------------------------------------------------------------------------- images


def transform_image(image: Any, spec: ImageMap, where: str) -> np.ndarray:
    """Flip then resize an ``(H, W, 3)`` image; the dtype is kept (uint8 stays uint8)."""
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[-1] != 3:
        raise R2AInputError(f"{where}: image '{spec.source}' has shape {img.shape}, expected (H, W, 3)")
    img = {"none": img, "horizontal": img[:, ::-1], "vertical": img[::-1], "rot180": img[::-1, ::-1]}[spec.flip]
    if spec.size is not None and tuple(img.shape[:2]) != tuple(spec.size):
        if spec.resize == "bilinear_pad":
            img = resize_with_pad(np.ascontiguousarray(img), *spec.size)
        else:
            img = resize_image(img, spec.size, spec.resize)
    return np.ascontiguousarray(img)


# ------------------------------------------------------------------------------------------------- YAML


@dataclass(frozen=True)
class AdapterConfig:
    """An adapter YAML: the key map plus where the model is (``url`` for openpi, ``checkpoint`` for lerobot)."""

    keymap: KeyMap
    path: Path
    url: str | None = None
    api_key_env: str | None = None
    timeout: float | None = None
    checkpoint: Path | None = None
    device: str | None = None


def adapter_yaml(name_or_path: str) -> Path:
    """A YAML path (as given, or a shipped ``configs/adapters/...`` one from anywhere), or the shipped
    ``configs/adapters/NAME.yaml`` for a bare name like ``openpi_libero``; anything else as given, for the caller to
    say what it expected."""
    try:
        return shipped_config(name_or_path, "adapters", "adapter config")
    except R2AInputError:
        return Path(name_or_path)


def load_adapter_config(path: str | Path) -> AdapterConfig:
    """Read and validate an adapter YAML; every error names the file and the field."""
    path = Path(path)
    doc = read_yaml_mapping(path, "adapter config")
    where = str(path)
    unknown = sorted(set(doc) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise _unknown_key(where, unknown[0], TOP_LEVEL_KEYS)
    if doc.get("format_version") != FORMAT_VERSION:
        raise R2AInputError(f"{where}: format_version {doc.get('format_version')!r} is not supported "
                            f"(this r2a reads version {FORMAT_VERSION})")
    keymap = _parse_keymap(doc, where)
    checkpoint = doc.get("checkpoint")
    return AdapterConfig(
        keymap=keymap, path=path, url=_opt_str(doc, "url", where), api_key_env=_opt_str(doc, "api_key_env", where),
        timeout=_opt_number(doc, "timeout", where), device=_opt_str(doc, "device", where),
        checkpoint=Path(str(checkpoint)).expanduser() if checkpoint is not None else None)


def load_keymap(path: str | Path) -> KeyMap:
    """Just the key map of an adapter YAML."""
    return load_adapter_config(path).keymap


def _parse_keymap(doc: dict[str, Any], where: str) -> KeyMap:
    images = {str(k): _parse_image(v, f"{where}: images.{k}") for k, v in _section(doc, "images", where).items()}
    state = {str(k): _str_list(v, f"{where}: state.{k}") for k, v in _section(doc, "state", where).items()}
    copy = {str(k): _str(v, f"{where}: copy.{k}") for k, v in _section(doc, "copy", where).items()}
    keep = doc.get("keep_unmapped", False)
    if not isinstance(keep, bool):
        raise R2AInputError(f"{where}: keep_unmapped must be true or false, got {keep!r}")
    dtype = doc.get("state_dtype", "float32")
    if dtype not in STATE_DTYPES:
        raise R2AInputError(f"{where}: state_dtype {dtype!r} unknown; valid: {', '.join(STATE_DTYPES)}")
    return KeyMap(images=images, state=state, copy=copy, keep_unmapped=keep, state_dtype=dtype,
                  actions=_parse_actions(_section(doc, "actions", where), f"{where}: actions"), source=where)


def _parse_image(value: Any, where: str) -> ImageMap:
    if isinstance(value, str):
        return ImageMap(source=value)
    if not isinstance(value, dict):
        raise R2AInputError(f"{where}: expected an observation key or a mapping with 'from', 'size', 'resize', 'flip'")
    unknown = sorted(set(value) - {"from", "size", "resize", "flip"})
    if unknown:
        raise _unknown_key(where, unknown[0], ("from", "size", "resize", "flip"))
    size = value.get("size")
    if size is not None and (not isinstance(size, list) or len(size) != 2
                             or not all(isinstance(s, int) and s > 0 for s in size)):
        raise R2AInputError(f"{where}: size must be [height, width] in pixels, got {size!r}")
    resize, flip = value.get("resize", "area"), value.get("flip", "none")
    if resize not in RESIZE_METHODS:
        raise R2AInputError(f"{where}: resize '{resize}' unknown; valid: {', '.join(RESIZE_METHODS)}")
    if flip not in FLIPS:
        raise R2AInputError(f"{where}: flip '{flip}' unknown; valid: {', '.join(FLIPS)}")
    return ImageMap(source=_str(value.get("from"), f"{where}.from"), size=tuple(size) if size else None,
                    resize=resize, flip=flip)


def _parse_actions(value: dict[str, Any], where: str) -> ActionMap:
    unknown = sorted(set(value) - {"model_dim", "flip_gripper", "scale"})
    if unknown:
        raise _unknown_key(where, unknown[0], ("model_dim", "flip_gripper", "scale"))
    model_dim, flip, scale = value.get("model_dim"), value.get("flip_gripper", False), value.get("scale", 1.0)
    if model_dim is not None and (not isinstance(model_dim, int) or model_dim < 1):
        raise R2AInputError(f"{where}.model_dim: expected a positive integer, got {model_dim!r}")
    if not isinstance(flip, bool):
        raise R2AInputError(f"{where}.flip_gripper: expected true or false, got {flip!r}")
    if isinstance(scale, list) and all(isinstance(s, (int, float)) for s in scale):
        scale = tuple(float(s) for s in scale)
    elif isinstance(scale, (int, float)) and not isinstance(scale, bool):
        scale = float(scale)
    else:
        raise R2AInputError(f"{where}.scale: expected a number or a list of numbers, got {scale!r}")
    return ActionMap(model_dim=model_dim, flip_gripper=flip, scale=scale)


def _section(doc: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    value = doc.get(name) or {}
    if not isinstance(value, dict):
        raise R2AInputError(f"{where}: '{name}' must be a mapping, got {type(value).__name__}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise R2AInputError(f"{where}: expected an observation key (a string), got {value!r}")
    return value


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise R2AInputError(f"{where}: expected a non-empty list of observation keys, got {value!r}")
    return tuple(_str(v, where) for v in value)


def _opt_str(doc: dict[str, Any], name: str, where: str) -> str | None:
    value = doc.get(name)
    if value is not None and not isinstance(value, str):
        raise R2AInputError(f"{where}: '{name}' must be a string, got {value!r}")
    return value


def _opt_number(doc: dict[str, Any], name: str, where: str) -> float | None:
    value = doc.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise R2AInputError(f"{where}: '{name}' must be a positive number of seconds, got {value!r}")
    return None if value is None else float(value)


def _unknown_key(where: str, name: str, valid: tuple[str, ...]) -> R2AInputError:
    hint = difflib.get_close_matches(name, valid, n=1)
    suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
    return R2AInputError(f"{where}: unknown key '{name}'{suggestion}; valid keys: {', '.join(valid)}")
