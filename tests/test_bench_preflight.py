"""``r2a bench run`` fails before its first episode, with one line and exit code 2 and nothing written, when a
policy cannot be built or reached or an optional package the flags need is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from eval.bench_config import BenchConfig
from eval.preflight import build_policies
from eval.runner import run_benchmark
from r2a.adapters import openpi_policy
from r2a_core.errors import R2AInputError
from r2a_core.provenance import sha256_dir

pytest.importorskip("robosuite")
SMOKE = Path(__file__).resolve().parents[1] / "configs" / "bench" / "smoke.yaml"


def _bench_run(tmp_path, *extra: str) -> int:
    from r2a_cli.main import main

    return main(["bench", "run", "--config", str(SMOKE), "--out", str(tmp_path / "out"), *extra])


def _error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("r2a bench: error:")]


def test_a_policy_that_cannot_be_built_exits_2_before_any_episode(tmp_path, capsys):
    code = _bench_run(tmp_path, "--policy", "expert", "--policy", "builtin:/nonexistent")
    (line,) = _error_lines(capsys)
    assert code == 2 and "policy 'builtin:/nonexistent' cannot be used: /nonexistent: not a built-in VLA" in line
    assert not (tmp_path / "out").exists()


class _InstantClock:
    """The client's ``time``: sleeps advance a fake clock at once, so connect retries cost no wall time."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_server_policy_with_nothing_listening_exits_2(tmp_path, capsys, monkeypatch):
    import socket

    monkeypatch.setattr(openpi_policy, "time", _InstantClock())
    with socket.socket() as sock:  # bound, not listening: every connection attempt is refused
        sock.bind(("127.0.0.1", 0))
        url = f"ws://127.0.0.1:{sock.getsockname()[1]}"
        code = _bench_run(tmp_path, "--policy", f"openpi:{url}")
    (line,) = _error_lines(capsys)
    assert code == 2 and f"policy 'openpi:{url}' cannot be used: policy server {url}: nothing answered" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, module, message", [
    (["--wandb", "offline"], "wandb", "--wandb needs wandb, which is not installed: pip install 'r2a[wandb]'"),
    (["--executor", "ray"], "ray", "--executor ray needs ray, which is not installed: pip install 'r2a[ray]'"),
])
def test_missing_optional_packages_fail_up_front(tmp_path, capsys, monkeypatch, flags, module, message):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    code = _bench_run(tmp_path, "--policy", "expert", *flags)
    assert code == 2 and _error_lines(capsys) == [f"r2a bench: error: {message}"]
    assert not (tmp_path / "out").exists()


def test_ray_address_without_the_ray_executor_is_refused(tmp_path):
    with pytest.raises(R2AInputError, match="--ray-address needs --executor ray"):
        run_benchmark(BenchConfig.from_yaml(SMOKE), ["expert"], tmp_path / "out", ray_address="127.0.0.1:1",
                      progress=False)
    assert not (tmp_path / "out").exists()


def test_build_policies_returns_what_each_policy_loaded():
    config = BenchConfig.from_yaml(SMOKE)
    loaded = build_policies(["expert", "builtin"], config)
    assert loaded["expert"] == {}
    from r2a.vla.policy import BUILTIN_CHECKPOINT

    assert loaded["builtin"]["base_checkpoint"]["sha256"] == sha256_dir(BUILTIN_CHECKPOINT)
