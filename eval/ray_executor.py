"""Benchmark jobs as Ray tasks, on this machine or on an existing cluster (``r2a bench run --executor ray``).

* **Where.** With an address (``--ray-address`` or ``RAY_ADDRESS``, e.g. a cluster started by ``ray start
  --head``) the driver joins that cluster and uses its resources as they are; without one it starts a local
  Ray instance with ``--workers`` CPUs and shuts it down at the end.
* **No shared filesystem.** A job writes nothing: its record, trajectory and frames come back to the driver
  (:class:`eval.episode_job.JobResult`), which writes them. The files a policy loaded (its
  ``metadata["artifacts"]`` whose path appears in the policy spec, e.g. ``builtin:DIR``) are put into the object
  store once, as a tar archive; on each node the first job that needs one unpacks it into the artifact cache
  (``$R2A_ARTIFACT_CACHE``, default ``<tmp>/r2a-artifacts``, one directory per sha256) and the job builds its
  policy from that copy. Artifacts not named in the spec (the shipped checkpoint of ``builtin``) come from the
  worker's own installation; either way the job checks the sha256 against the driver's. Every node needs r2a
  and the simulator installed, like the driver.
* **Bounded.** At most :data:`IN_FLIGHT_PER_CPU` tasks per cluster CPU are submitted at a time, so a run of
  10,000 jobs does not put 10,000 tasks into the scheduler at once.
* **Fails fast, stops when told.** An address where nothing accepts a connection fails before any policy is built
  (:func:`check_reachable`); joining is bounded (:data:`CONNECT_TIMEOUT_S`: Ray's client retries inside C++ and
  would wait for ever), and SIGTERM ends a join at once. After joining, the caller's SIGTERM handler is back (Ray
  replaces it; r2a's unwinds like Ctrl-C) and the driver waits in short slices, so it runs during a run too.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import socket
import tarfile
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from eval.bench_config import BenchConfig
from eval.episode_job import Job, JobOptions, JobResult, failed_job, run_job
from eval.preflight import require_module
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_dir
from r2a_core.interrupts import bounded_blocking_call
from r2a_core.provenance import sha256_path

log = logging.getLogger(__name__)

#: submitted but unfinished tasks per CPU of the cluster
IN_FLIGHT_PER_CPU = 2
#: environment variable naming the workers' artifact cache
CACHE_ENV = "R2A_ARTIFACT_CACHE"
#: seconds joining a cluster may take (``R2A_RAY_CONNECT_TIMEOUT_S`` overrides); the address answered the probe
CONNECT_TIMEOUT_S = 25.0
#: seconds starting a local Ray instance may take (a loaded 2-core machine needs well under a minute)
LOCAL_START_TIMEOUT_S = 180.0
#: seconds the probe waits for a TCP connection to the address
PROBE_TIMEOUT_S = 5.0
#: Ray client addresses (``ray://HOST[:PORT]``) default to this port
RAY_CLIENT_PORT = 10001
#: the longest the driver waits for a task before Python may run a signal handler
WAIT_SLICE_S = 1.0


def ray_address(explicit: str | None = None) -> str | None:
    """The cluster to join: ``--ray-address``, else ``RAY_ADDRESS``, else None (start a local instance)."""
    return explicit or os.environ.get("RAY_ADDRESS") or None


def split_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``HOST:PORT``, ``[IPv6]:PORT`` or ``ray://HOST[:PORT]``; None for ``auto`` and
    ``local``, which Ray resolves itself (the cluster this machine started, or a new one)."""
    if address in ("auto", "local"):
        return None
    rest, default_port = address, None
    if "://" in address:
        scheme, rest = address.split("://", 1)
        if scheme != "ray":
            raise R2AInputError(f"--ray-address {address}: expected HOST:PORT or ray://HOST[:PORT]")
        default_port = RAY_CLIENT_PORT
    host, sep, port = rest.rpartition(":") if not rest.endswith("]") else (rest, "", "")
    if not sep:
        host, port = rest, str(default_port or "")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise R2AInputError(f"--ray-address {address}: expected HOST:PORT (e.g. 127.0.0.1:6379) or ray://HOST[:PORT]")
    return host, int(port)


def check_reachable(address: str | None, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Fail at once, naming the address, where nothing accepts a TCP connection (a cluster not started, a wrong
    port): Ray itself would retry for many minutes."""
    where = split_address(address) if address else None
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=timeout):
            pass
    except OSError as err:
        reason = "timed out" if isinstance(err, socket.timeout) else (err.strerror or str(err))
        raise R2AInputError(f"--executor ray: no Ray cluster at {address} ({reason}); start one there ('ray start "
                            f"--head --port {where[1]}') or give the address of a running one") from None


def connect_timeout() -> float:
    """Seconds joining may take: ``R2A_RAY_CONNECT_TIMEOUT_S`` or :data:`CONNECT_TIMEOUT_S`."""
    text = os.environ.get("R2A_RAY_CONNECT_TIMEOUT_S")
    try:
        return float(text) if text else CONNECT_TIMEOUT_S
    except ValueError:
        raise R2AInputError(f"R2A_RAY_CONNECT_TIMEOUT_S={text!r}: expected a number of seconds") from None


class RayExecutor:
    """``with RayExecutor(workers, address) as ex: for result in ex.results(jobs, config, options): ...``"""

    def __init__(self, workers: int, address: str | None = None) -> None:
        self.workers, self.address = int(workers), ray_address(address)
        self._ray: Any = None
        self._owns = False

    def __enter__(self) -> "RayExecutor":
        ray = self._ray = require_module("ray")
        if ray.is_initialized():  # the caller connected already: leave the connection to it
            return self
        check_reachable(self.address)
        where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
        seconds = connect_timeout() if self.address else LOCAL_START_TIMEOUT_S
        sigterm = signal.getsignal(signal.SIGTERM)
        late = (f"r2a bench: error: --executor ray: {where} did not answer within {seconds:.0f} s"
                + (" (is it a Ray cluster's GCS port?)" if self.address else ""))
        try:
            with bounded_blocking_call(seconds, late):
                if self.address:
                    ray.init(address=self.address, log_to_driver=False)
                else:
                    ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            hint = ("; if the cluster uses token authentication, set RAY_AUTH_MODE=token here too"
                    if self.address and not os.environ.get("RAY_AUTH_MODE") else "")
            raise R2AInputError(f"--executor ray: cannot connect to {where} ({' '.join(str(err).split())[:300]})"
                                f"{hint}") from None
        finally:
            if sigterm is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, sigterm)  # ray.init put sys.exit there, which skips r2a's unwinding
        self._owns = True
        log.info("Ray: %s, %s CPUs", f"joined the cluster at {self.address}" if self.address else "local instance",
                 self.cpus())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owns:
            self._ray.shutdown()  # a joined cluster keeps running; only this driver disconnects
            self._owns = False

    def cpus(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("CPU", self.workers)))

    def results(self, jobs: Sequence[Job], config: BenchConfig, options: Mapping[str, JobOptions],
                artifacts: Mapping[str, Mapping[str, Mapping[str, str]]]) -> Iterator[JobResult]:
        """Run ``jobs`` (``options`` and ``artifacts`` by policy spec) and yield each result as it finishes."""
        ray = self._ray
        shipped = {spec: ship_artifacts(ray, spec, found) for spec, found in artifacts.items()}
        remote = ray.remote(num_cpus=1)(_remote_job)
        limit = IN_FLIGHT_PER_CPU * self.cpus()
        queue = iter(jobs)
        pending: list[Any] = []
        jobs_of: dict[Any, Job] = {}

        def submit() -> None:
            for job in queue:
                ref = remote.remote(job, config, options[job.policy], shipped.get(job.policy, []))
                pending.append(ref)
                jobs_of[ref] = job
                if len(pending) >= limit:
                    return

        submit()
        while pending:
            finished, rest = ray.wait(pending, num_returns=1, timeout=WAIT_SLICE_S)
            if not finished:  # nothing done yet: back in Python for a moment, so a SIGTERM is handled
                continue
            pending[:] = rest
            submit()
            job = jobs_of.pop(finished[0])
            try:
                yield ray.get(finished[0])
            except ray.exceptions.RayError as err:  # the worker died (a crash, a lost node): record, go on
                yield failed_job(job, config, err)


def ship_artifacts(ray: Any, spec: str, found: Mapping[str, Mapping[str, str]]) -> list[tuple[str, str, str, Any]]:
    """Put each artifact whose path appears in ``spec`` into the object store; returns ``(path text, sha256,
    name, [object ref])`` per artifact (the ref wrapped in a list, so that Ray hands the task the reference and
    not the bytes: a worker fetches them only when its node's cache lacks the artifact)."""
    out = []
    for role, entry in found.items():
        text, digest = str(entry["path"]), str(entry["sha256"])
        if not text or text not in spec:
            continue
        name = Path(text).name or role
        out.append((text, digest, name, [ray.put(pack_artifact(text, name))]))
        log.info("Ray: shipping %s of %s (%s) through the object store", role, spec, text)
    return out


def pack_artifact(path: str | Path, name: str) -> bytes:
    """A file or directory as an uncompressed tar archive (checkpoints and indexes barely compress)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(path), arcname=name)
    return buffer.getvalue()


def unpack_artifact(data: bytes, digest: str, name: str, cache: str | Path | None = None) -> Path:
    """The local copy of an artifact in the cache (``cache/<sha256>/<name>``), unpacked from ``data`` unless it is
    there already; its content is checked against ``digest``."""
    target = Path(cache or cache_root()) / digest
    if not (target / name).exists():
        try:
            with atomic_dir(target, overwrite=False) as tmp:
                with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
                    tar.extractall(tmp, filter="data")  # no absolute paths, links out or devices
                if sha256_path(tmp / name) != digest:
                    raise RuntimeError(f"artifact {name}: the unpacked copy does not match sha256 {digest[:12]}")
        except FileExistsError:
            pass  # another worker on this node unpacked it first
    return target / name


def cache_root() -> Path:
    """This node's artifact cache: ``$R2A_ARTIFACT_CACHE``, else ``<tmp>/r2a-artifacts``."""
    return Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "r2a-artifacts")


def _remote_job(job: Job, config: BenchConfig, options: JobOptions,
                shipped: Sequence[tuple[str, str, str, list[Any]]]) -> JobResult:
    """On a worker: build the policy from this node's copies of the shipped artifacts, then run the job."""
    try:
        spec = _localized_spec(job.policy, shipped)
    except Exception as err:  # noqa: BLE001 - like any job failure: a record with the error, the run goes on
        return failed_job(job, config, err)
    return run_job(job, config, replace(options, build_spec=spec if spec != job.policy else None))


def _localized_spec(spec: str, shipped: Sequence[tuple[str, str, str, list[Any]]]) -> str:
    for text, digest, name, (ref,) in shipped:
        local = cache_root() / digest / name
        if not local.exists():
            import ray

            local = unpack_artifact(ray.get(ref), digest, name)
        spec = spec.replace(text, str(local))
    return spec
