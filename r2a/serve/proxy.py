"""R2A as a drop-in proxy between a robot client and a VLA server: what ``r2a serve --upstream`` serves.

Composition, nothing new inside: :class:`R2AProxyPolicy` (this file) → the R2A wrapper
(:class:`~r2a.wrapper.policy.R2APolicy`) → its base, an :class:`~r2a.serve.upstream.UpstreamPolicy` connected to
the VLA server; a :class:`~r2a.serve.policy_server.PolicyServer` serves the whole. The client speaks the VLA's own
format (the adapter YAML, e.g. ``configs/adapters/openpi_libero.yaml``, describes it). Per request:

1. the client's observation is mapped *backwards* through the adapter (:meth:`~r2a.adapters.keymap.KeyMap.
   unmap_obs`) into the only keys R2A reads: ``state/ee_pos``, ``state/ee_quat`` and ``state/gripper`` —
   **required**; a request without them is answered ``bad request: …`` naming the model key that should carry
   them — and ``prompt`` and ``state/step`` when the adapter maps them (optional: without a prompt retrieval
   uses every task of the graph; without a step the wrapper assumes the client executes every action it
   returns) — and the camera images (:meth:`~r2a.adapters.keymap.KeyMap.unmap_images`: the adapter's flip
   undone, at the size the model gets), which the gate's image signal and observation harmonization read;
2. the wrapper asks its base — with harmonization on, through the harmonizer, as in-process — which sends the
   client's observation upstream with what the wrapper changed mapped back into it
   (:meth:`~r2a.adapters.keymap.KeyMap.map_present`: harmonized images; with r2a's own keys also the base's
   clock after start-pose recovery), everything else **unchanged**, and maps the reply's actions into r2a's action
   space (``actions:`` of the adapter). So the proxy serves the same R2A as in-process: with r2a's own keys
   (``KeyMap.identity()``) an episode through the proxy is the in-process episode step for step
   (tests/test_serve_proxy.py); with a resizing adapter R2A reads the images at the model's size;
3. the blended actions (``executed_steps`` of them, or one during start-pose recovery, when the upstream is not
   asked) are mapped back to the client's format (:meth:`~r2a.adapters.keymap.KeyMap.unmap_actions`); the
   upstream reply's other keys pass through (its ``server_timing`` as ``upstream_server_timing``), plus
   ``r2a`` diagnostics.

Episodes: openpi's client never resets, so the proxy also starts a new episode when the prompt changes or
``state/step`` goes back; our client's ``reset()`` does it explicitly. Metadata: the upstream's as read at start,
passed through, with ``n_action_steps`` set to what the proxy returns and an ``r2a`` entry (spec, upstream,
adapter, config, artifacts). Failures: see :mod:`r2a.serve.upstream`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from r2a.adapters.keymap import KeyMap
from r2a.adapters.openpi_policy import RESET_METADATA
from r2a.serve.policy_server import BadRequest
from r2a.serve.upstream import CLIENT_OBS, CLIENT_OURS, UPSTREAM_ACTIONS, UpstreamPolicy
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA, PROMPT, STATE_EE_POS, STATE_EE_QUAT, STATE_GRIPPER, STATE_STEP, image_key

log = logging.getLogger(__name__)

#: what R2A needs from every observation, with its size
REQUIRED = {STATE_EE_POS: 3, STATE_EE_QUAT: 4, STATE_GRIPPER: 1}
#: what it uses when the adapter recovers it
OPTIONAL = (PROMPT, STATE_STEP)
#: our camera images' keys (``images/<camera>``): the gate's image signal and harmonization read them
IMAGE_PREFIX = image_key("")


class R2AProxyPolicy:
    """The R2A wrapper around an upstream server, speaking the upstream's observation and action format."""

    def __init__(self, wrapper: Any, upstream: UpstreamPolicy, keymap: KeyMap, spec: str) -> None:
        self.wrapper, self.upstream, self.keymap, self.spec = wrapper, upstream, keymap, spec
        self.action_space = wrapper.action_space
        self._last: tuple[Any, Any] | None = None  # (prompt, step) of the previous request

    @property
    def n_action_steps(self) -> int:
        return int(self.wrapper.n_action_steps)

    @property
    def metadata(self) -> dict[str, Any]:
        ours = {k: v for k, v in self.wrapper.metadata.items() if k != "base"}
        ours.update(spec=self.spec, upstream=self.upstream.url, adapter=self.keymap.source)
        passed = {k: v for k, v in self.upstream.metadata.items() if k != RESET_METADATA}
        return {**passed, "n_action_steps": self.n_action_steps, "r2a": ours}

    def reset(self) -> None:
        self.wrapper.reset()
        self._last = None

    def close(self) -> None:
        self.wrapper.close()

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        ours = self.r2a_observation(obs)
        self._new_episode_check(ours)
        out = self.wrapper.infer({**ours, CLIENT_OBS: obs, CLIENT_OURS: dict(ours)})
        model_chunk = out.pop(UPSTREAM_ACTIONS, None)
        out["actions"] = self.keymap.unmap_actions(out["actions"], self.action_space, model_chunk)
        if "server_timing" in out:
            out["upstream_server_timing"] = out.pop("server_timing")
        return out

    def r2a_observation(self, obs: dict[str, Any]) -> dict[str, Any]:
        """The keys R2A reads, recovered from the client's observation; :class:`BadRequest` names what is missing."""
        try:
            recovered = self.keymap.unmap_obs(obs)
        except R2AInputError as err:
            raise BadRequest(str(err)) from None
        for key, size in REQUIRED.items():
            where = self.keymap.source_of(key) or "no key of the adapter"
            if key not in recovered:
                raise BadRequest(f"R2A needs {key}, carried by {where} ({self.keymap.source}); the observation "
                                 f"has keys {', '.join(sorted(map(str, obs))) or 'none'}")
            try:
                value = np.asarray(recovered[key], np.float64)
            except (TypeError, ValueError):
                raise BadRequest(f"{key} (from {where}) is not numeric") from None
            if value.size != size:
                raise BadRequest(f"{key} (from {where}) has {value.size} numbers, expected {size}")
            recovered[key] = value.reshape(()) if size == 1 else value.reshape(size)
        images = {k: v for k, v in recovered.items() if k.startswith(IMAGE_PREFIX)}
        try:
            images.update(self.keymap.unmap_images(obs))
        except R2AInputError as err:  # an image R2A cannot read (not H×W×3): R2A goes without it, the upstream not
            log.debug("R2A proxy: images left out of R2A's observation: %s", err)
        return {**{k: recovered[k] for k in (*REQUIRED, *OPTIONAL) if k in recovered}, **images}

    def _new_episode_check(self, ours: dict[str, Any]) -> None:
        prompt, step = ours.get(PROMPT), ours.get(STATE_STEP)
        if self._last is not None:
            last_prompt, last_step = self._last
            went_back = step is not None and last_step is not None and int(step) < int(last_step)
            if prompt != last_prompt or went_back:
                log.info("R2A proxy: a new episode (%s); resetting", "the step went back" if went_back
                         else "the prompt changed")
                self.wrapper.reset()
        self._last = (prompt, step)


def check_adapter(keymap: KeyMap) -> None:
    """Refuse an adapter from which the proxy cannot recover R2A's required keys (at start, before connecting)."""
    missing = [key for key in REQUIRED if keymap.source_of(key) is None]
    if missing:
        raise R2AInputError(f"{keymap.source}: the R2A proxy needs {', '.join(missing)} from every observation, "
                            "and no key of this adapter carries "
                            f"{'it' if len(missing) == 1 else 'them'} (map them under state: or copy:, e.g. "
                            "state: {observation/state: [state/ee_pos, state/ee_axis_angle, state/gripper_fingers]},"
                            " or set keep_unmapped: true for a client that sends r2a's keys)")


def build_proxy(spec: str, upstream_url: str, keymap: KeyMap | None = None, *, api_key: str | None = None,
                timeout: float = 60.0, connect_timeout: float = 30.0, reconnect_timeout: float = 2.0) -> R2AProxyPolicy:
    """``spec`` (``r2a``, ``r2a-builtin``, … with ``:CONFIG.yaml?section.field=value&…``) around the server at
    ``upstream_url``, whose client speaks ``keymap``'s model format (default: r2a's own keys). The config's
    ``base`` is replaced by the upstream. Raises :class:`R2AInputError` when the upstream does not answer within
    ``connect_timeout`` seconds: the proxy announces the upstream's metadata to every client, so it needs it."""
    from r2a.policies.registry import R2A_VARIANTS, parse_policy_spec, r2a_config_for
    from r2a.wrapper.build import build_r2a

    name, _ = parse_policy_spec(spec)
    if name not in R2A_VARIANTS:
        raise R2AInputError(f"--upstream puts R2A in front of a policy server: --policy must be "
                            f"{', '.join(R2A_VARIANTS)} (optionally :CONFIG.yaml), got '{spec}'")
    keymap = keymap or KeyMap.identity()
    check_adapter(keymap)
    config = dataclasses.replace(r2a_config_for(spec), base=f"openpi:{upstream_url}")
    space = OSC_POSE_DELTA
    upstream = UpstreamPolicy(upstream_url, keymap, space, api_key=api_key, timeout=timeout,
                              connect_timeout=connect_timeout, reconnect_timeout=reconnect_timeout)
    try:
        wrapper = build_r2a(config, upstream, space)
    except BaseException:
        upstream.close()
        raise
    log.info("R2A proxy: %s in front of %s (adapter %s)", spec, upstream_url, keymap.source)
    return R2AProxyPolicy(wrapper, upstream, keymap, spec)


__all__ = ["OPTIONAL", "REQUIRED", "R2AProxyPolicy", "build_proxy", "check_adapter"]
