"""openpi's websocket protocol end to end on localhost: our server, our client and openpi's reference client."""

import contextlib
import http.client
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import numpy as np
import pytest

from r2a.adapters import openpi_policy
from r2a.adapters.guard import GuardedPolicy
from r2a.adapters.keymap import ADAPTER_DIR, load_keymap
from r2a.adapters.openpi_policy import OpenPIWebsocketPolicy, PolicyServerError
from r2a.policies import make_policy
from r2a.serve import policy_server
from r2a.serve.policy_server import PolicyServer
from r2a_core.errors import R2AInputError
from r2a_core.types import OSC_POSE_DELTA


class EchoPolicy:
    """A small numpy policy: the chunk encodes the state, so a reply proves the observation arrived intact."""

    def __init__(self):
        self.resets, self.seen = 0, []

    def infer(self, obs):
        self.seen.append(obs)
        if obs.get("prompt") == "fail":
            raise ValueError("the model exploded")
        state = np.asarray(obs.get("state/ee_pos", obs.get("observation/state", np.zeros(3))), np.float32)
        actions = np.tile(np.concatenate([state[:3], np.zeros(3), [-1.0]]).astype(np.float32), (4, 1))
        return {"actions": actions}

    def reset(self):
        self.resets += 1


def _obs(prompt: str = "lift") -> dict:
    return {"images/agentview": np.full((16, 16, 3), 7, np.uint8), "state/ee_pos": np.array([0.1, 0.2, 0.3]),
            "state/ee_quat": np.array([1.0, 0, 0, 0]), "state/gripper": np.array([1.0]), "state/step": 0,
            "prompt": prompt}


@pytest.fixture
def server():
    policy = EchoPolicy()
    srv = PolicyServer(policy, host="127.0.0.1", port=0, metadata={"model": "echo"})
    srv.start()
    yield srv
    srv.stop()


@contextlib.contextmanager
def _reserved_port() -> Iterator[int]:
    """A port bound (port 0, read back) but not listening, held for the block: connecting to it is refused and
    nobody else can bind it, so no other process can take it between the test choosing it and a server using it.

    Our server's socket (``socket.create_server``) sets SO_REUSEADDR like this one, and on Linux two such
    sockets may share a port as long as only one listens: a PolicyServer can then listen on the reserved port.
    """
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


#: a server taking over a reserved port needs Linux's SO_REUSEADDR semantics (BSD and Windows differ)
takes_over_reserved_port = pytest.mark.skipif(sys.platform != "linux",
                                              reason="listening on a reserved port needs Linux SO_REUSEADDR")


class _FakeClock:
    """Stands in for the client module's ``time``: a sleep advances the clock at once, so the client's connect
    retries are counted rather than timed. ``on_first_sleep`` runs at the first sleep, i.e. after one refusal."""

    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []
        self.on_first_sleep: Callable[[], object] | None = None

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return time.perf_counter()  # the server's infer timing stays real

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_first_sleep is not None and len(self.sleeps) == 1:
            self.on_first_sleep()


@pytest.fixture
def fake_clock(monkeypatch) -> tuple[_FakeClock, list[float]]:
    """The client on a fake clock (retry interval 0.5 s), and the open_timeout of each of its connection attempts."""
    clock, attempts = _FakeClock(), []
    real_connect = openpi_policy.connect

    def counting_connect(*args, **kwargs):
        attempts.append(kwargs["open_timeout"])
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(openpi_policy, "time", clock)
    monkeypatch.setattr(openpi_policy, "connect", counting_connect)
    monkeypatch.setattr(openpi_policy, "RETRY_INTERVAL", 0.5)
    return clock, attempts


def test_our_client_round_trip_metadata_and_reset(server):
    with OpenPIWebsocketPolicy(f"ws://127.0.0.1:{server.port}", action_space=OSC_POSE_DELTA) as client:
        assert client.metadata["model"] == "echo" and client.metadata["r2a_reset"] is True
        out = client.infer(_obs())
        np.testing.assert_allclose(out["actions"][:, :3], np.tile([0.1, 0.2, 0.3], (4, 1)), rtol=1e-6)
        assert out["actions"].dtype == np.float32 and "infer_ms" in out["server_timing"]
        seen = server.policy.seen[-1]
        np.testing.assert_array_equal(seen["images/agentview"], _obs()["images/agentview"])
        assert seen["prompt"] == "lift" and seen["state/step"] == 0
        client.reset()
        assert server.policy.resets == 1


def test_openpi_reference_client_talks_to_our_server(server):
    wcp = pytest.importorskip("openpi_client.websocket_client_policy")
    client = wcp.WebsocketClientPolicy(host="127.0.0.1", port=server.port)
    assert client.get_server_metadata()["model"] == "echo"
    obs = {"observation/state": np.array([1.0, 2.0, 3.0], np.float32), "prompt": "go"}
    ours = OpenPIWebsocketPolicy(f"ws://127.0.0.1:{server.port}")
    np.testing.assert_array_equal(client.infer(obs)["actions"], ours.infer(obs)["actions"])
    with pytest.raises(RuntimeError, match="the model exploded"):
        client.infer({"prompt": "fail"})
    ours.close()


def test_openpi_libero_keymap_over_the_wire(server):
    keymap = load_keymap(ADAPTER_DIR / "openpi_libero.yaml")
    with OpenPIWebsocketPolicy(f"ws://127.0.0.1:{server.port}", keymap, OSC_POSE_DELTA) as client:
        out = client.infer({**_obs(), "images/wrist": np.zeros((16, 16, 3), np.uint8)})
    seen = server.policy.seen[-1]
    assert sorted(seen) == ["observation/image", "observation/state", "observation/wrist_image", "prompt"]
    assert seen["observation/image"].shape == (224, 224, 3) and seen["observation/state"].shape == (8,)
    assert out["actions"].shape == (4, 7)


def test_server_error_arrives_as_a_clear_client_error_and_the_client_reconnects(server):
    with OpenPIWebsocketPolicy(f"ws://127.0.0.1:{server.port}") as client:
        with pytest.raises(PolicyServerError, match=r"(?s)failed:.*Traceback.*ValueError: the model exploded"):
            client.infer(_obs("fail"))
        assert client.infer(_obs())["actions"].shape == (4, 7)  # a fresh connection


@takes_over_reserved_port
def test_a_restarted_server_is_reconnected_on_the_next_request():
    with _reserved_port() as port:  # held across the restart, so nothing else can take the port in between
        first = PolicyServer(EchoPolicy(), host="127.0.0.1", port=port)
        assert first.start() == port
        client = OpenPIWebsocketPolicy(f"ws://127.0.0.1:{port}")
        second = PolicyServer(EchoPolicy(), host="127.0.0.1", port=port)
        try:
            client.infer(_obs())
            first.stop()
            second.start()
            assert client.infer(_obs())["actions"].shape == (4, 7)
            assert len(second.policy.seen) == 1
        finally:
            client.close()
            first.stop()
            second.stop()


@takes_over_reserved_port
def test_a_server_restarted_with_another_checkpoint_is_refused_on_reconnect():
    """A retrained policy served at the same address must not slip into a run or fit started against the first."""
    def announcing(sha: str) -> dict:
        return {"artifacts": {"base_checkpoint": {"path": "ckpt", "sha256": sha}}}

    with _reserved_port() as port:
        first = PolicyServer(EchoPolicy(), host="127.0.0.1", port=port, metadata=announcing("a" * 64))
        assert first.start() == port
        client = OpenPIWebsocketPolicy(f"ws://127.0.0.1:{port}")
        second = PolicyServer(EchoPolicy(), host="127.0.0.1", port=port, metadata=announcing("b" * 64))
        try:
            client.infer(_obs())
            first.stop()
            second.start()
            with pytest.raises(PolicyServerError, match="base_checkpoint aaaaaaaaaaaa then, base_checkpoint "
                                                        "bbbbbbbbbbbb now"):
                client.infer(_obs())
            assert second.policy.seen == []  # refused before the request was sent
        finally:
            client.close()
            first.stop()
            second.stop()


def test_healthz_answers_200(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    assert response.status == 200 and response.read() == b"OK\n"
    conn.close()


def test_nothing_listening_is_a_clear_error_after_bounded_retries(fake_clock):
    clock, attempts = fake_clock
    with _reserved_port() as port:  # bound, not listening: every attempt is refused
        with pytest.raises(R2AInputError, match=rf"ws://127.0.0.1:{port}: nothing answered within 1.25 s.*"
                                                "start the server first"):
            OpenPIWebsocketPolicy(f"ws://127.0.0.1:{port}", connect_timeout=1.25)
    # attempts at t = 0, 0.5, 1.0 and 1.25: one per interval, the last wait cut to the budget, then it gives up
    assert attempts == [1.25, 0.75, 0.5, 0.5] and clock.sleeps == [0.5, 0.5, 0.25]


@takes_over_reserved_port
def test_the_client_waits_for_a_server_that_starts_late(fake_clock):
    clock, attempts = fake_clock
    with _reserved_port() as port:
        srv = PolicyServer(EchoPolicy(), host="127.0.0.1", port=port)
        clock.on_first_sleep = srv.start  # the server comes up while the client waits after its first refusal
        try:
            with OpenPIWebsocketPolicy(f"ws://127.0.0.1:{port}", connect_timeout=10) as client:
                assert client.infer(_obs())["actions"].shape == (4, 7)
        finally:
            srv.stop()
    assert len(attempts) == 2 and clock.sleeps == [0.5]  # refused once, waited one interval, then connected


def test_api_key_is_sent_and_checked():
    srv = PolicyServer(EchoPolicy(), host="127.0.0.1", port=0, api_key="s3cret")
    port = srv.start()
    try:
        with OpenPIWebsocketPolicy(f"ws://127.0.0.1:{port}", api_key="s3cret") as client:
            assert client.infer(_obs())["actions"].shape == (4, 7)
        with pytest.raises(R2AInputError, match="HTTP 401 \\(missing or wrong API key\\)"):
            OpenPIWebsocketPolicy(f"ws://127.0.0.1:{port}", api_key="wrong")
    finally:
        srv.stop()


def test_bad_urls_and_busy_ports():
    with pytest.raises(R2AInputError, match="expected ws://HOST:PORT"):
        OpenPIWebsocketPolicy("http://localhost:8000")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(R2AInputError, match="cannot listen on 127.0.0.1"):
            PolicyServer(EchoPolicy(), host="127.0.0.1", port=sock.getsockname()[1]).start()


def test_registry_openpi_specs(server, tmp_path):
    sim = SimpleNamespace(action_space=OSC_POSE_DELTA)
    policy = make_policy(f"openpi:ws://127.0.0.1:{server.port}", sim, seed=0)
    assert isinstance(policy, GuardedPolicy)
    assert policy.infer(_obs())["actions"].shape == (4, 7)
    policy.inner.close()
    yaml_path = tmp_path / "adapter.yaml"
    yaml_path.write_text(f"format_version: 1\nurl: ws://127.0.0.1:{server.port}\nkeep_unmapped: true\n"
                         "actions: {{model_dim: 7, scale: 2.0}}\n".replace("{{", "{").replace("}}", "}"))
    scaled = make_policy(f"openpi:{yaml_path}", sim, seed=0)
    np.testing.assert_allclose(scaled.infer(_obs())["actions"][0, :3], [0.2, 0.4, 0.6], rtol=1e-6)
    scaled.inner.close()
    with pytest.raises(R2AInputError, match="expected ws://HOST:PORT or an adapter YAML"):
        make_policy("openpi:localhost:8000", sim, seed=0)
    (tmp_path / "nourl.yaml").write_text("format_version: 1\n")
    with pytest.raises(R2AInputError, match="nourl.yaml: no 'url:'"):
        make_policy(f"openpi:{tmp_path / 'nourl.yaml'}", sim, seed=0)


# ------------------------------------------------------------------------------ the server under bad input

def _connected(port: int, **kwargs) -> OpenPIWebsocketPolicy:
    return OpenPIWebsocketPolicy(f"ws://127.0.0.1:{port}", **kwargs)


def test_loopback_by_default_and_a_warning_elsewhere(monkeypatch, caplog):
    from r2a_cli.policy import build_parser

    assert build_parser("r2a policy").parse_args(["serve"]).host == "127.0.0.1"
    assert PolicyServer(EchoPolicy()).host == "127.0.0.1"
    assert all(map(policy_server.is_loopback, ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"]))
    assert not any(map(policy_server.is_loopback, ["0.0.0.0", "", "::", "192.0.2.7", "example.com"]))
    bound = SimpleNamespace(socket=SimpleNamespace(getsockname=lambda: ("0.0.0.0", 8000)))
    monkeypatch.setattr(policy_server, "serve", lambda *args, **kwargs: bound)  # nothing is bound for real
    with caplog.at_level("WARNING", logger="r2a.serve.policy_server"):
        PolicyServer(EchoPolicy(), host="0.0.0.0")._listen()
        PolicyServer(EchoPolicy(), host="127.0.0.1")._listen()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning == ("the policy server listens on 0.0.0.0: other machines can reach it and no API key is set "
                       "(--api-key or $R2A_POLICY_API_KEY)")


def test_a_missing_or_wrong_key_is_refused_before_inference_and_the_server_keeps_serving():
    wcp = pytest.importorskip("openpi_client.websocket_client_policy")
    policy = EchoPolicy()
    with PolicyServer(policy, host="127.0.0.1", port=0, api_key="s3cret") as srv:
        for key in (None, "wrong", "s3cre"):
            with pytest.raises(R2AInputError, match="HTTP 401"):
                _connected(srv.port, api_key=key)
        assert policy.seen == []
        reference = wcp.WebsocketClientPolicy(host="127.0.0.1", port=srv.port, api_key="s3cret")
        assert reference.infer(_obs())["actions"].shape == (4, 7)


def test_the_cli_takes_the_key_from_the_flag_or_the_environment(monkeypatch):
    from r2a_cli import policy as cli

    seen = []
    monkeypatch.setattr(PolicyServer, "serve_forever", lambda self: seen.append((self.api_key, self.limits, self.host)))
    parse = cli.build_parser("r2a policy").parse_args
    monkeypatch.setenv(policy_server.API_KEY_ENV, "from-env")
    cli.run(parse(["serve", "--policy", "callable:tests.test_adapters_openpi:hold_still"]))
    cli.run(parse(["serve", "--policy", "callable:tests.test_adapters_openpi:hold_still", "--api-key", "flag",
                   "--max-message-mb", "0.5"]))
    assert [(key, limits.max_message_bytes) for key, limits, _ in seen] == [("from-env", 8 << 20), ("flag", 1 << 19)]
    with pytest.raises(R2AInputError, match="--max-message-mb must be positive"):
        cli.run(parse(["serve", "--policy", "callable:tests.test_adapters_openpi:hold_still",
                       "--max-message-mb", "0"]))


def hold_still(obs):
    """A policy for the CLI test: one zero action."""
    return np.zeros(7, np.float32)


def test_an_oversized_message_is_refused_unread_and_the_server_keeps_answering(caplog):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    policy = EchoPolicy()
    limits = policy_server.ServerLimits(max_message_bytes=64 << 10)
    with PolicyServer(policy, host="127.0.0.1", port=0, limits=limits) as srv, \
            caplog.at_level("WARNING", logger="r2a.serve.policy_server"):
        with connect(f"ws://127.0.0.1:{srv.port}", max_size=None) as ws:
            ws.recv()  # metadata
            with pytest.raises(ConnectionClosed) as closed:
                ws.send(policy_server.packb({"images/agentview": np.zeros((256, 256, 3), np.uint8)}))  # 192 KiB
                ws.recv(timeout=30)
        assert closed.value.rcvd.code == 1009 and policy.seen == []
        with _connected(srv.port) as client:
            assert client.infer(_obs())["actions"].shape == (4, 7)
    assert any("a message over 0.1 MiB" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("field, value, message", [
    ("state/ee_pos", np.array([np.nan, 0.2, 0.3]),
     "'state/ee_pos' has 1 non-finite value\\(s\\) \\(NaN or inf\\) of 3"),
    ("state/gripper", np.float32("inf"), "'state/gripper' is inf \\(not finite\\)"),
    ("images/agentview", np.zeros((1, 1, 1, 1, 3), np.uint8), "has shape \\(1, 1, 1, 1, 3\\); at most 4 dimensions"),
    ("images/wide", np.zeros((1, 5000), np.uint8), "has shape \\(1, 5000\\); at most 4 dimensions of at most 4096"),
    ("many", [np.zeros(1)] * 70, "more than 64 arrays in one request"),
    ("deep", {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 1}}}}}}}}, "nested deeper than 8 levels"),
])
def test_bad_observations_are_refused_with_one_line_and_the_connection_goes_on(server, caplog, field, value,
                                                                                  message):
    with _connected(server.port) as client, caplog.at_level("INFO", logger="r2a.serve.policy_server"):
        caplog.clear()
        with pytest.raises(PolicyServerError, match=f"refused the request: bad request: .*{message}"):
            client.infer({**_obs(), field: value})
        assert server.policy.seen == []                                   # never reached the policy
        assert client.infer(_obs())["actions"].shape == (4, 7)            # the same connection answers
    (refusal,) = [r for r in caplog.records if "refused" in r.getMessage()]
    assert refusal.levelname == "WARNING" and "\n" not in refusal.getMessage() and not refusal.exc_info


def test_openpi_reference_client_gets_a_clear_refusal_and_can_go_on(server):
    wcp = pytest.importorskip("openpi_client.websocket_client_policy")
    client = wcp.WebsocketClientPolicy(host="127.0.0.1", port=server.port)
    with pytest.raises(RuntimeError, match="bad request: 'observation/state' has 1 non-finite"):
        client.infer({"observation/state": np.array([1.0, np.inf, 3.0]), "prompt": "go"})
    assert client.infer({"observation/state": np.array([1.0, 2.0, 3.0]), "prompt": "go"})["actions"].shape == (4, 7)


def test_a_request_that_is_not_msgpack_numpy_is_refused(server):
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{server.port}") as ws:
        ws.recv()
        for bad in (b"\xc1", b"\x93\x01\x02\x03", "text frame"):
            ws.send(bad)
            assert ws.recv(timeout=30).startswith("bad request: ")
    assert server.policy.seen == []


class _SlowPolicy(EchoPolicy):
    """Blocks inside ``infer`` until released, so a test can act while an inference is under way."""

    def __init__(self):
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def infer(self, obs):
        self.entered.set()
        assert self.release.wait(timeout=120), "never released"
        return super().infer(obs)


def test_healthz_and_new_clients_are_answered_during_a_slow_inference():
    policy = _SlowPolicy()
    replies = []
    with PolicyServer(policy, host="127.0.0.1", port=0) as srv:
        first = _connected(srv.port)
        worker = threading.Thread(target=lambda: replies.append(first.infer(_obs())))
        worker.start()
        try:
            assert policy.entered.wait(timeout=60)
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
            conn.request("GET", "/healthz")  # answered while the inference is still blocked
            assert conn.getresponse().status == 200
            conn.close()
            with _connected(srv.port) as second:  # so is a new client's handshake and metadata
                assert second.metadata["r2a_reset"] is True
            assert replies == [] and worker.is_alive()
        finally:
            policy.release.set()
            worker.join(timeout=60)
            first.close()
    assert replies[0]["actions"].shape == (4, 7)
