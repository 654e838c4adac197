"""The proxy's base policy: forwards the robot client's own observation to the upstream VLA server, unchanged.

:class:`UpstreamPolicy` is :class:`~r2a.adapters.openpi_policy.OpenPIWebsocketPolicy` with three differences:

* the request is the client's raw observation, which :class:`~r2a.serve.proxy.R2AProxyPolicy` passes under
  :data:`CLIENT_OBS` inside the observation the R2A wrapper hands its base, with the model keys of what the
  wrapper's chain changed mapped back over it (harmonized images; without that key it maps our observation
  through the key map, like its parent);
* the reply is checked: a map with ``"actions"``, an ``(H, model_dim)`` numeric chunk, every value finite —
  anything else raises :class:`~r2a.serve.policy_server.UpstreamError` naming what is wrong, as does an upstream
  that is down, fails or times out. The proxy's server answers that with an ``upstream error: …`` text frame
  and keeps the client's connection; the mapped chunk is clipped to the action bounds (as the guard does);
* after the first connection, a lost upstream is retried every 0.5 s for ``reconnect_timeout`` seconds on the
  next request (bounded, so the client hears back quickly); ``reset()`` never raises.

The upstream's own chunk travels back in the reply under :data:`UPSTREAM_ACTIONS`, for the model columns our
action space does not have (:meth:`~r2a.adapters.keymap.KeyMap.unmap_actions`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed

from r2a.adapters.keymap import KeyMap
from r2a.adapters.msgpack_numpy import packb
from r2a.adapters.openpi_policy import RESET_METADATA, RESET_REQUEST, OpenPIWebsocketPolicy, PolicyServerError
from r2a.serve.policy_server import UpstreamError
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA, ActionSpace

log = logging.getLogger(__name__)

#: observation key under which the client's raw observation reaches the upstream policy (never sent anywhere)
CLIENT_OBS = "__r2a_client_obs__"
#: observation key under which the proxy keeps what it recovered from the client (to see what the wrapper changed)
CLIENT_OURS = "__r2a_client_ours__"
#: reply key holding the upstream's own action chunk, before mapping (the proxy removes it)
UPSTREAM_ACTIONS = "__r2a_upstream_actions__"


class UpstreamPolicy(OpenPIWebsocketPolicy):
    """The upstream VLA server as a base policy (see the module docstring). ``connect_timeout``: how long to
    wait for the upstream at start (it may still be loading a model); ``reconnect_timeout``: at a request."""

    def __init__(self, url: str, keymap: KeyMap | None = None, action_space: ActionSpace = OSC_POSE_DELTA,
                 api_key: str | None = None, timeout: float = 60.0, connect_timeout: float = 30.0,
                 reconnect_timeout: float = 2.0) -> None:
        try:
            super().__init__(url, keymap, action_space, api_key=api_key, timeout=timeout,
                             connect_timeout=connect_timeout)
        except R2AInputError as err:
            raise R2AInputError(f"--upstream: {err}") from None
        self.connect_timeout = float(reconnect_timeout)

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        raw = obs.get(CLIENT_OBS)
        if isinstance(raw, dict):  # the client's own observation, with what the wrapper changed mapped back in
            request = {**raw, **self.keymap.map_present(changed_keys(obs))}
        else:
            request = self.keymap.map_obs(obs)
        try:
            reply = self._exchange(packb(request))
        except (R2AInputError, PolicyServerError, ConnectionClosed, OSError) as err:
            raise UpstreamError(f"upstream {self.url}{_what_failed(err, self.url)}") from None
        return self._checked(reply)

    def reset(self) -> None:
        """Forward the reset when connected to a server that takes one (ours); an upstream that is down is
        not waited for: it is reconnected at the next request."""
        if self._ws is None or self.metadata.get(RESET_METADATA) is not True:
            return
        try:
            self._exchange(packb({RESET_REQUEST: True}))
        except (R2AInputError, PolicyServerError, ConnectionClosed, OSError) as err:
            log.warning("upstream %s: the reset was not delivered (%s)", self.url,
                        _what_failed(err, self.url).strip(" :"))
            self.close()

    def _checked(self, reply: Any) -> dict[str, Any]:
        if not isinstance(reply, dict) or "actions" not in reply:
            got = f"a map with keys {sorted(map(str, reply))}" if isinstance(reply, dict) else type(reply).__name__
            raise UpstreamError(f"upstream {self.url} replied with {got}; expected a map with 'actions'")
        model_chunk = reply["actions"]
        try:
            chunk = self.keymap.map_actions(model_chunk, self.action_space)
        except R2AInputError as err:
            raise UpstreamError(f"upstream {self.url}: malformed reply: {err}") from None
        dim = self.action_space.dim
        if chunk.ndim != 2 or chunk.shape[1] != dim or len(chunk) == 0:
            raise UpstreamError(f"upstream {self.url} replied with actions of shape {np.shape(model_chunk)}, "
                                f"expected (H, {self.keymap.actions.model_dim or dim}) with H >= 1 "
                                f"({self.keymap.source}: actions.model_dim)")
        if not np.isfinite(chunk).all():
            bad = int((~np.isfinite(chunk)).sum())
            raise UpstreamError(f"upstream {self.url} replied with {bad} non-finite action value(s) of "
                                f"{chunk.size}")
        return {**reply, "actions": self.action_space.clip(chunk), UPSTREAM_ACTIONS: np.asarray(model_chunk)}


def changed_keys(obs: dict[str, Any]) -> dict[str, Any]:
    """Our keys whose values the wrapper's chain changed from what the proxy recovered from the client (under
    :data:`CLIENT_OURS`): harmonized images, the base's clock after start-pose recovery."""
    before = obs.get(CLIENT_OURS) or {}
    return {k: v for k, v in obs.items()
            if k not in (CLIENT_OBS, CLIENT_OURS) and (k not in before or not _same(v, before[k]))}


def _same(a: Any, b: Any) -> bool:
    """Arrays: the same shape, dtype and values; numbers (a Python int against a 0-d array): the same value."""
    if a is b:
        return True
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    try:
        x, y = np.asarray(a), np.asarray(b)
    except Exception:  # noqa: BLE001 - something that is no array is compared as it is
        return a == b
    if x.ndim == 0 and y.ndim == 0 and x.dtype.kind in "biuf" and y.dtype.kind in "biuf":
        return bool(x == y)
    return x.shape == y.shape and x.dtype == y.dtype and bool(np.array_equal(x, y))


def _what_failed(err: Exception, url: str) -> str:
    """The client's error as the rest of one line after "upstream URL": our client's messages start with
    "policy server URL", which is dropped; an upstream traceback is cut to its last line."""
    text = str(err)
    prefix = f"policy server {url}"
    text = text[len(prefix):] if text.startswith(prefix) else f": {type(err).__name__}: {text}"
    if text.startswith(" failed:\n"):
        lines = [line.strip() for line in text.split("\n")[1:] if line.strip()]
        return f" failed ({lines[-1] if lines else 'no traceback'})"
    return " ".join(text.split()) if text.startswith(":") else " " + " ".join(text.split())
