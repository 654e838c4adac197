"""`r2a bench run --executor ray --ray-address ADDR` where no Ray cluster answers: it fails within seconds with one
line naming the address and exit status 2, and a SIGTERM while it joins ends it at once.

Everything stays on the loopback interface: the silent "cluster" is a socket on 127.0.0.1 that accepts and never
answers, and RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps Ray from swapping 127.0.0.1 for this machine's own address.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import eval.ray_executor as rx
from r2a_core.errors import R2AInputError

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SilentListener:
    """A TCP port on 127.0.0.1 that accepts connections and never says a word (not a Ray GCS)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = threading.Event()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._held.append(conn)
            self.accepted.set()

    def close(self) -> None:
        for conn in self._held:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent():
    listener = SilentListener()
    yield listener
    listener.close()


def _bench(address: str, out: Path, **env: str) -> subprocess.Popen:
    environment = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **env}
    environment.pop("RAY_ADDRESS", None)
    return subprocess.Popen([sys.executable, "-m", "r2a_cli", "bench", "run", "--config", "smoke", "--policy", "expert",
                             "--executor", "ray", "--ray-address", address, "--out", str(out)],
                            cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, limit: float) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        _, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"still running after {limit} s")
    return proc.returncode, err, time.monotonic() - start


def test_an_address_where_nothing_listens_fails_at_once_with_exit_2(tmp_path):
    address = f"127.0.0.1:{_free_port()}"
    code, err, _ = _finish(_bench(address, tmp_path / "run"), limit=30)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and address in lines[0] and "no Ray cluster" in lines[0], err
    assert not (tmp_path / "run").exists()  # nothing written


def test_a_port_that_never_answers_fails_at_the_deadline(silent, tmp_path):
    address = f"127.0.0.1:{silent.port}"
    proc = _bench(address, tmp_path / "run", R2A_RAY_CONNECT_TIMEOUT_S="4")
    code, err, _ = _finish(proc, limit=60)
    assert silent.accepted.is_set()  # the probe (and Ray) reached the port, which never answered
    assert code == 2, err
    assert f"the Ray cluster at {address} did not answer within 4 s" in err.splitlines()[-1], err
    assert not (tmp_path / "run").exists()


def test_sigterm_while_joining_ends_the_command_at_once(silent, tmp_path):
    proc = _bench(f"127.0.0.1:{silent.port}", tmp_path / "run", R2A_RAY_CONNECT_TIMEOUT_S="120")
    assert silent.accepted.wait(60), "the command never reached the port"
    time.sleep(1.0)  # past the probe: inside ray.init, blocked in Ray's C++ client
    proc.send_signal(signal.SIGTERM)
    code, err, waited = _finish(proc, limit=10)
    # 143 from the join's watchdog; 130 if Python's own handler got there first (r2a's Ctrl-C unwinding)
    assert waited < 5 and code in (128 + signal.SIGTERM, 130) and "interrupted" in err, (code, waited, err)


@pytest.mark.parametrize("address, expected", [("head:6379", ("head", 6379)), ("[::1]:6380", ("::1", 6380)),
                                               ("ray://head", ("head", 10001)), ("ray://10.0.0.5:9999",
                                                                                 ("10.0.0.5", 9999)),
                                               ("auto", None), ("local", None)])
def test_addresses_are_split_like_ray_reads_them(address, expected):
    assert rx.split_address(address) == expected


@pytest.mark.parametrize("address", ["head", "head:port", "http://head:80", "head:70000", ":6379"])
def test_a_malformed_address_is_refused_with_the_expected_form(address):
    with pytest.raises(R2AInputError, match="expected HOST:PORT"):
        rx.split_address(address)
