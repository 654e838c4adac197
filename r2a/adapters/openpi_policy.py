"""openpi's websocket policy protocol, the client's end: a Policy whose model runs behind a policy server.

The protocol (openpi-client 0.1.2; docs/architecture.md, "Platform notes"): on connect the server sends one
binary msgpack message with its metadata; each request is a binary msgpack observation dict and each reply a binary
msgpack result dict (``"actions"`` …); a *text* frame is a server-side error (openpi's server sends the traceback,
then closes with code 1011). Compression is off and message size unlimited; an optional ``Authorization: Api-Key …``
header authenticates; ``GET /healthz`` answers 200.

One extension, invisible to openpi's peers: our server's metadata carries ``"r2a_reset": True``, and only then
does our client's ``reset()`` send ``{"__r2a_reset__": True}``, which the server answers by resetting the
served policy. openpi's client never resets over the wire, so a stateful policy served to it never resets. Our
server answers a refused request with a text frame starting ``bad request: `` and one its policy's own upstream
failed with ``upstream error: ``; both leave the connection open. The names of both ends live here; the server is
:mod:`r2a.serve.policy_server`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.sync.client import ClientConnection, connect

from r2a.adapters.keymap import KeyMap
from r2a.adapters.msgpack_numpy import packb, unpackb
from r2a_core.errors import R2AInputError
from r2a_core.provenance import artifact_digests, digests_shown
from r2a_core.types import OSC_POSE_DELTA, ActionSpace

log = logging.getLogger(__name__)

#: the request that resets the served policy (sent only to servers whose metadata has RESET_METADATA: True)
RESET_REQUEST = "__r2a_reset__"
RESET_METADATA = "r2a_reset"
#: seconds between connection attempts while waiting for a server to come up
RETRY_INTERVAL = 0.5
#: the first words of the text frame that answers a refused request
BAD_REQUEST = "bad request"
#: the first words of the text frame that answers a request the policy's own upstream server failed
UPSTREAM_ERROR = "upstream error"


class PolicyServerError(RuntimeError):
    """The policy server failed while answering (its traceback is in the message) or dropped the connection."""



class OpenPIWebsocketPolicy:
    """A Policy whose model runs behind an openpi-protocol websocket server (openpi's or our :class:`PolicyServer`).

    Observations go through ``keymap.map_obs`` before sending; the reply's actions through
    ``keymap.map_actions``. Connecting waits up to ``connect_timeout`` seconds for the server to come up (it may
    still be loading a model); each reply may take up to ``timeout`` seconds. A dropped connection is reopened
    on the next ``reset()`` or ``infer()``.
    """

    def __init__(self, url: str, keymap: KeyMap | None = None, action_space: ActionSpace = OSC_POSE_DELTA,
                 api_key: str | None = None, timeout: float = 60.0, connect_timeout: float = 10.0) -> None:
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            raise R2AInputError(f"policy server URL '{url}': expected ws://HOST:PORT or wss://HOST:PORT")
        self.url, self.keymap, self.action_space = url, keymap or KeyMap.identity(), action_space
        self.timeout, self.connect_timeout = float(timeout), float(connect_timeout)
        self._api_key = api_key
        self._ws: ClientConnection | None = None
        self._stack = contextlib.ExitStack()  # websockets >= 17.1 wants connect() used as a context manager
        self.metadata: dict[str, Any] = {}
        self._open()

    @property
    def n_action_steps(self) -> int | None:
        """How many actions of a chunk to execute, when the server's metadata says (ours do)."""
        value = self.metadata.get("n_action_steps")
        return int(value) if isinstance(value, int) and value > 0 else None

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        reply = self._exchange(packb(self.keymap.map_obs(obs)))
        if not isinstance(reply, dict):
            raise PolicyServerError(f"policy server {self.url} replied with a {type(reply).__name__}, expected a map")
        if "actions" in reply:
            reply["actions"] = self.keymap.map_actions(reply["actions"], self.action_space)
        return reply

    def reset(self) -> None:
        """openpi has no reset on the wire; our own server advertises one in its metadata, then it is used."""
        if self._ws is None:
            self._open()  # reconnect between episodes, also to servers without a reset
        if self.metadata.get(RESET_METADATA) is True:
            self._exchange(packb({RESET_REQUEST: True}))

    def close(self) -> None:
        self._stack.close()
        self._ws = None

    def __enter__(self) -> "OpenPIWebsocketPolicy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> ClientConnection:
        """Connect (retrying while nothing listens, up to connect_timeout) and read the metadata message."""
        headers = {"Authorization": f"Api-Key {self._api_key}"} if self._api_key else None
        deadline, announced = time.monotonic() + self.connect_timeout, False
        while True:
            try:
                ws = self._stack.enter_context(connect(
                    self.url, compression=None, max_size=None, additional_headers=headers,
                    open_timeout=max(deadline - time.monotonic(), RETRY_INTERVAL)))
                break
            except (InvalidURI, InvalidHandshake, socket.gaierror) as err:
                raise self._handshake_error(err) from None
            except OSError as err:  # refused, unreachable, timed out: the server may still be starting
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise R2AInputError(
                        f"policy server {self.url}: nothing answered within {self.connect_timeout:g} s "
                        f"({err.strerror or err}); start the server first, or check the URL") from None
                if not announced:
                    log.info("waiting for the policy server at %s ...", self.url)
                    announced = True
                time.sleep(min(RETRY_INTERVAL, remaining))
        self._ws = ws
        metadata = self._receive(ws)
        if not isinstance(metadata, dict):
            self.close()
            raise R2AInputError(f"policy server {self.url}: the first message is not a metadata map; "
                                f"is it an openpi policy server?")
        self._refuse_other_model(metadata)
        self.metadata = metadata
        log.info("connected to the policy server at %s (metadata keys: %s)", self.url, sorted(metadata))
        return ws

    def _refuse_other_model(self, metadata: dict[str, Any]) -> None:
        """On a reconnect, the server must still serve the files it announced first (``"artifacts"``, role → sha256):
        a server restarted with another checkpoint at the same address would otherwise mix two models in one run."""
        before, now = artifact_digests(self.metadata.get("artifacts")), artifact_digests(metadata.get("artifacts"))
        if before and before != now:
            self.close()
            raise PolicyServerError(f"policy server {self.url} now serves other files than when this client first "
                                    f"connected (sha256: {digests_shown(before, 'none announced')} then, "
                                    f"{digests_shown(now, 'none announced')} now): it was restarted "
                                    "with another model; start a new run against it")

    def _handshake_error(self, err: Exception) -> R2AInputError:
        if isinstance(err, InvalidStatus):
            status = err.response.status_code
            hint = " (missing or wrong API key)" if status in (401, 403) else ""
            return R2AInputError(f"policy server {self.url} refused the connection: HTTP {status}{hint}")
        if isinstance(err, socket.gaierror):
            return R2AInputError(f"policy server {self.url}: unknown host ({err.strerror})")
        return R2AInputError(f"policy server {self.url}: not a websocket policy server ({err})")

    def _exchange(self, request: bytes) -> Any:
        """Send one request and return the unpacked reply. A connection found closed when sending is reopened
        once (the server never saw the request, so this is safe); a failure after sending is raised."""
        ws = self._ws or self._open()
        try:
            ws.send(request)
        except ConnectionClosed:
            self.close()
            ws = self._open()
            ws.send(request)
        return self._receive(ws)

    def _receive(self, ws: ClientConnection) -> Any:
        """The next binary message, unpacked; a text frame is the server's error report."""
        try:
            message = ws.recv(timeout=self.timeout)
        except TimeoutError:
            self.close()  # a late reply would answer the next request
            raise PolicyServerError(f"policy server {self.url} did not answer within {self.timeout:g} s") from None
        except ConnectionClosed as err:
            self.close()
            raise PolicyServerError(f"policy server {self.url} closed the connection ({err})") from None
        if isinstance(message, str):
            if message.startswith(f"{BAD_REQUEST}: "):  # our server refused the request; the connection is fine
                raise PolicyServerError(f"policy server {self.url} refused the request: {message}")
            if message.startswith(f"{UPSTREAM_ERROR}: "):  # a proxy's upstream failed; the connection is fine
                raise PolicyServerError(f"policy server {self.url} could not answer: {message}")
            self.close()
            raise PolicyServerError(f"policy server {self.url} failed:\n{message}")
        return unpackb(message)
