"""openpi's websocket policy protocol, the server's end: any of our policies served so that openpi's client and
ours can use it (``r2a serve``, ``r2a policy serve``; the R2A proxy is one such policy).

The protocol and the names both ends share are in :mod:`r2a.adapters.openpi_policy` (the client).

Our server is stricter than openpi's about what it accepts (docs/architecture.md, "Platform notes"): it
listens on loopback unless told otherwise (another interface is logged as a warning), checks the API key
before the handshake, bounds every message (:class:`ServerLimits`: bytes, array count, dimensions) and refuses
non-finite numbers. A refused request gets a one-line text frame (``bad request: …``), logs one line and
leaves the connection open; so does a policy that cannot answer because a server *it* depends on failed
(:class:`UpstreamError`, ``upstream error: …``: the R2A proxy of ``r2a serve --upstream``); a failure of the
policy itself gets openpi's answer (the traceback, then close 1011). Each connection is served in its own thread,
so ``/healthz`` and new clients are answered during a long inference; inference itself runs one request at a time.
"""

from __future__ import annotations

import hmac
import http
import ipaddress
import logging
import math
import threading
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.sync.server import ServerConnection, serve

from r2a.adapters.msgpack_numpy import packb, unpackb
from r2a.adapters.openpi_policy import BAD_REQUEST, RESET_METADATA, RESET_REQUEST, UPSTREAM_ERROR
from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy

if TYPE_CHECKING:
    from websockets.sync.server import Server  # named WebSocketServer before websockets 13

log = logging.getLogger(__name__)

#: environment variable holding the server's API key (``r2a policy serve --api-key`` overrides it)
API_KEY_ENV = "R2A_POLICY_API_KEY"


class BadRequest(ValueError):
    """A request the server refuses (too large, too many arrays, non-finite values, not msgpack-numpy)."""


class UpstreamError(RuntimeError):
    """A served policy could not answer because the server it forwards to is down, failed or replied with
    something unusable. The client gets one line of text and keeps its connection; the next request retries."""


@dataclass(frozen=True)
class ServerLimits:
    """What one request may hold. Messages over ``max_message_bytes`` are refused by the websocket layer from
    their frame header (close code 1009), before the payload is read; the rest is checked after decoding."""

    max_message_bytes: int = 8 << 20
    """bytes per message (8 MiB: two 224-px images, or a 1024-px one, with room to spare)"""
    max_arrays: int = 64
    """numpy arrays per request"""
    max_ndim: int = 4
    """dimensions per array (an image is 3; a stack of frames 4)"""
    max_dim: int = 4096
    """length of any one axis"""
    max_depth: int = 8
    """nesting of maps and lists"""

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_arrays", "max_ndim", "max_dim", "max_depth"):
            if getattr(self, name) < 1:
                raise R2AInputError(f"policy server: {name} must be >= 1, got {getattr(self, name)}")


def check_request(obs: Any, limits: ServerLimits) -> None:
    """Raise :class:`BadRequest` naming the key when a decoded request breaks ``limits`` or holds NaN/inf."""
    if not isinstance(obs, dict):
        raise BadRequest(f"expected an observation map, got {type(obs).__name__}")
    arrays = 0

    def visit(value: Any, where: str, depth: int) -> None:
        nonlocal arrays
        if depth > limits.max_depth:
            raise BadRequest(f"'{where}' is nested deeper than {limits.max_depth} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                visit(item, f"{where}/{key}" if where else str(key), depth + 1)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                visit(item, f"{where}[{i}]", depth + 1)
        elif isinstance(value, np.ndarray):
            arrays += 1
            if arrays > limits.max_arrays:
                raise BadRequest(f"more than {limits.max_arrays} arrays in one request")
            if value.ndim > limits.max_ndim or any(n > limits.max_dim for n in value.shape):
                raise BadRequest(f"'{where}' has shape {value.shape}; at most {limits.max_ndim} dimensions of "
                                 f"at most {limits.max_dim} each are accepted")
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                bad = int((~np.isfinite(value)).sum())
                raise BadRequest(f"'{where}' has {bad} non-finite value(s) (NaN or inf) of {value.size}")
        elif isinstance(value, (float, np.floating)) and not math.isfinite(value):
            raise BadRequest(f"'{where}' is {value} (not finite)")

    visit(obs, "", 0)


class PolicyServer:
    """Serves any of our policies with openpi's protocol, so openpi's client and ours can use it.

    ``start()`` runs it in a background thread (port 0 picks a free port, which is returned); ``serve_forever()``
    runs it in the foreground until Ctrl-C. Each connection has its own thread; inference runs one request at
    a time (the policy is not assumed to be thread-safe), so a stateful policy should have one client at a time.
    ``api_key``: clients must send ``Authorization: Api-Key KEY``; ``limits``: what a request may hold.
    """

    def __init__(self, policy: Policy, host: str = "127.0.0.1", port: int = 8000,
                 metadata: dict[str, Any] | None = None, api_key: str | None = None,
                 limits: ServerLimits | None = None) -> None:
        self.policy, self.host, self._port, self.api_key = policy, host, int(port), api_key or None
        self.limits = limits or ServerLimits()
        self.metadata = {**(metadata or {}), RESET_METADATA: True}
        self._lock = threading.Lock()
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the chosen one when constructed with port 0 and started)."""
        return int(self._server.socket.getsockname()[1]) if self._server is not None else self._port

    def start(self) -> int:
        """Listen and serve in a daemon thread; returns the bound port."""
        self._server = self._listen()
        self._thread = threading.Thread(target=self._server.serve_forever, name="r2a-policy-server", daemon=True)
        self._thread.start()
        return self.port

    def serve_forever(self) -> None:
        """Listen and serve in this thread until interrupted (Ctrl-C)."""
        self._server = self._listen()
        try:
            self._server.serve_forever()
        except KeyboardInterrupt:
            log.info("policy server interrupted")
        finally:
            self.stop()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "PolicyServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _listen(self) -> Server:
        try:  # max_queue: a request/reply protocol needs no backlog of unread messages
            server = serve(self._handle, self.host, self._port, compression=None,
                           max_size=self.limits.max_message_bytes, max_queue=4,
                           process_request=self._process_request)
        except OSError as err:
            raise R2AInputError(f"policy server: cannot listen on {self.host}:{self._port} "
                                f"({err.strerror or err})") from None
        log.info("serving %s on ws://%s:%d (%s; messages up to %.1f MiB)", type(self.policy).__name__, self.host,
                 server.socket.getsockname()[1], "API key required" if self.api_key else "no API key",
                 self.limits.max_message_bytes / 2**20)
        if not is_loopback(self.host):
            log.warning("the policy server listens on %s: other machines can reach it%s", self.host,
                        "" if self.api_key else f" and no API key is set (--api-key or ${API_KEY_ENV})")
        return server

    def _process_request(self, connection: ServerConnection, request: Any) -> Any:
        """HTTP before the websocket handshake: health check and API key. (``protocol.reject`` is what
        ``connection.respond`` wraps since websockets 13; calling it directly also works on 12.)"""
        if request.path == "/healthz":
            return connection.protocol.reject(http.HTTPStatus.OK, "OK\n")
        if self.api_key and not hmac.compare_digest(request.headers.get("Authorization", "").encode(),
                                                    f"Api-Key {self.api_key}".encode()):
            log.warning("policy client %s refused: missing or wrong API key", connection.remote_address)
            return connection.protocol.reject(http.HTTPStatus.UNAUTHORIZED, "missing or wrong API key\n")
        return None

    def _handle(self, connection: ServerConnection) -> None:
        peer = connection.remote_address
        log.info("policy client connected from %s", peer)
        try:
            connection.send(packb(self.metadata))
            for message in connection:
                if not self._answer(connection, message):
                    break
        except ConnectionClosed as err:
            if err.sent is not None and err.sent.code == CloseCode.MESSAGE_TOO_BIG:
                log.warning("policy client %s refused: a message over %.1f MiB (%s); connection closed", peer,
                            self.limits.max_message_bytes / 2**20, err.sent.reason)
        log.info("policy client %s disconnected", peer)

    def _answer(self, connection: ServerConnection, message: str | bytes) -> bool:
        """Reply to one request. A refused request (the client's mistake) or a failed upstream of the policy
        gets one line of text and the connection stays open; a failure of the policy gets the traceback as text
        and the connection is closed (openpi's behaviour). Either way the server goes on serving."""
        try:
            reply = self._reply(message)
        except UpstreamError as err:
            text = " ".join(str(err).split())
            log.warning("policy request from %s not answered: %s", connection.remote_address, text)
            connection.send(f"{UPSTREAM_ERROR}: {text}")
            return True
        except (BadRequest, R2AInputError) as err:
            text = " ".join(str(err).split())
            log.warning("policy request from %s refused: %s", connection.remote_address, text)
            connection.send(f"{BAD_REQUEST}: {text}")
            return True
        except Exception:  # the client gets the traceback; the server keeps serving other clients
            trace = traceback.format_exc()
            log.error("policy request failed:\n%s", trace)
            connection.send(trace)
            connection.close(CloseCode.INTERNAL_ERROR, "Internal server error. Traceback included in previous frame.")
            return False
        connection.send(reply)
        return True

    def _reply(self, message: str | bytes) -> bytes:
        if isinstance(message, str):
            raise BadRequest("expected a binary msgpack observation, got a text frame")
        try:
            obs = unpackb(message)
        except Exception as err:  # noqa: BLE001 - whatever the decoder says, it is the client's malformed message
            raise BadRequest(f"not a msgpack-numpy message ({type(err).__name__}: {err})") from None
        check_request(obs, self.limits)
        with self._lock:
            if obs.get(RESET_REQUEST) is True:
                self.policy.reset()
                return packb({"reset": True})
            start = time.perf_counter()
            result = dict(self.policy.infer(obs))
        result["server_timing"] = {"infer_ms": 1000.0 * (time.perf_counter() - start)}
        return packb(result)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (``localhost``, 127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
