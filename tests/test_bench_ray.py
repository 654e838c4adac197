"""The Ray executor's parts that need no cluster: bounded submission, artifacts through the object store, the
spec a worker builds, a dead worker recorded as an error. (The real cluster: tests/test_bench_runner.py.)"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

import eval.ray_executor as rx
from eval.bench_config import BenchConfig
from eval.episode_job import Job, JobOptions, JobResult
from r2a_core.provenance import sha256_dir


class _Ref:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args


class FakeRay:
    """Just enough of Ray: tasks run when their result is fetched; counts how many were in flight at most."""

    class exceptions:  # noqa: N801 - mirrors ray.exceptions
        RayError = RuntimeError

    def __init__(self, cpus: int) -> None:
        self.cpus, self.in_flight, self.max_in_flight, self.puts = cpus, 0, 0, []

    def is_initialized(self) -> bool:
        return True

    def cluster_resources(self) -> dict:
        return {"CPU": float(self.cpus)}

    def put(self, value):
        self.puts.append(value)
        return ("ref", len(self.puts) - 1)

    def remote(self, num_cpus: int):
        ray = self

        def decorate(fn):
            class Remote:
                def remote(self, *args):
                    ray.in_flight += 1
                    ray.max_in_flight = max(ray.max_in_flight, ray.in_flight)
                    return _Ref(fn, args)

            return Remote()

        return decorate

    def wait(self, refs, num_returns: int = 1, timeout: float | None = None):
        self.in_flight -= 1
        return refs[:1], refs[1:]

    def get(self, ref):
        return ref.fn(*ref.args)


def _executor(ray: FakeRay) -> rx.RayExecutor:
    ex = rx.RayExecutor(workers=1)
    ex._ray = ray
    return ex


def test_submission_is_bounded_and_every_job_comes_back(monkeypatch):
    seen = []

    def fake_job(job, config, options, shipped):
        seen.append(job)
        return JobResult({"episode": job.episode})

    monkeypatch.setattr(rx, "_remote_job", fake_job)
    ray = FakeRay(cpus=3)
    jobs = [Job("Lift", i, "clean", 0, "expert") for i in range(50)]
    results = list(_executor(ray).results(jobs, BenchConfig(), {"expert": JobOptions()}, {"expert": {}}))
    assert sorted(r.record["episode"] for r in results) == list(range(50)) and len(seen) == 50
    assert ray.max_in_flight == rx.IN_FLIGHT_PER_CPU * 3


def test_a_dead_worker_becomes_an_error_record(monkeypatch):
    def crash(job, config, options, shipped):
        raise FakeRay.exceptions.RayError("the worker died unexpectedly")

    monkeypatch.setattr(rx, "_remote_job", crash)
    (result,) = _executor(FakeRay(1)).results([Job("Lift", 0, "clean", 0, "expert")], BenchConfig(),
                                              {"expert": JobOptions()}, {"expert": {}})
    assert result.record["error"] == "RuntimeError: the worker died unexpectedly"
    assert result.record["success"] is False and result.record["policy"] == "expert"


def _checkpoint(tmp_path):
    ckpt = tmp_path / "runs" / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "manifest.json").write_text("{}")
    (ckpt / "sub" / "w.bin").write_bytes(b"\x01" * 100)
    return ckpt


def test_only_artifacts_named_in_the_spec_are_shipped(tmp_path):
    ckpt = _checkpoint(tmp_path)
    digest = sha256_dir(ckpt)
    ray = FakeRay(1)
    found = {"base_checkpoint": {"path": str(ckpt), "sha256": digest},
             "shipped_with_r2a": {"path": "/site-packages/r2a/assets/x", "sha256": "0" * 64}}
    shipped = rx.ship_artifacts(ray, f"builtin:{ckpt}?n_action_steps=4", found)
    assert [(text, d, name) for text, d, name, _ in shipped] == [(str(ckpt), digest, "ckpt")]
    assert len(ray.puts) == 1


def test_a_worker_unpacks_once_into_its_cache_and_builds_from_the_copy(tmp_path, monkeypatch):
    ckpt = _checkpoint(tmp_path)
    digest = sha256_dir(ckpt)
    data = rx.pack_artifact(ckpt, "ckpt")
    cache = tmp_path / "cache"
    monkeypatch.setenv(rx.CACHE_ENV, str(cache))
    fetched = []
    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(get=lambda ref: fetched.append(ref) or data))
    shipped = [(str(ckpt), digest, "ckpt", ["ref"])]
    spec = rx._localized_spec(f"builtin:{ckpt}?n_action_steps=4", shipped)
    assert spec == f"builtin:{cache / digest / 'ckpt'}?n_action_steps=4"
    assert sha256_dir(cache / digest / "ckpt") == digest
    rx._localized_spec(f"builtin:{ckpt}", shipped)          # the second job on this node fetches nothing
    assert fetched == ["ref"]
    with pytest.raises(RuntimeError, match="does not match sha256"):
        rx.unpack_artifact(data, "f" * 64, "ckpt", cache)
    assert not (cache / ("f" * 64)).exists()                 # nothing half-unpacked is left behind


def test_joining_a_cluster_passes_no_cpu_count(monkeypatch):
    calls = []
    fake = SimpleNamespace(is_initialized=lambda: False, init=lambda **kw: calls.append(kw), shutdown=lambda: None,
                           cluster_resources=lambda: {"CPU": 8.0})
    probed = []
    monkeypatch.setattr(rx, "require_module", lambda name: fake)
    monkeypatch.setattr(rx, "check_reachable", probed.append)  # the TCP probe: tests/test_bench_ray_connect.py
    monkeypatch.setenv("RAY_ADDRESS", "cluster-head:6379")  # never contacted: init is faked
    with rx.RayExecutor(workers=2):
        pass
    monkeypatch.delenv("RAY_ADDRESS")
    with rx.RayExecutor(workers=2, address="head:6379"):
        pass
    with rx.RayExecutor(workers=2):
        pass
    assert calls == [{"address": "cluster-head:6379", "log_to_driver": False},
                     {"address": "head:6379", "log_to_driver": False},
                     {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}]
    assert probed == ["cluster-head:6379", "head:6379", None]
