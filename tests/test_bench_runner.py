"""The benchmark runner end to end on the smoke config: real MuJoCo, pairing, resume, report, bad configs."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from PIL import Image

from eval.bench_config import BenchConfig
from eval.runner import RESULTS, plan_jobs, report_from_dir, run_benchmark
from r2a_core.errors import R2AInputError

pytest.importorskip("robosuite")
SMOKE = Path(__file__).resolve().parents[1] / "configs" / "bench" / "smoke.yaml"
VOLATILE = ("wall_s",)


def _records(out: Path) -> dict[tuple, dict]:
    rows = [json.loads(line) for line in (out / RESULTS).read_text().splitlines()]
    return {(r["policy"], r["task"], r["factor"], r["level"], r["episode"]):
            {k: v for k, v in r.items() if k not in VOLATILE} for r in rows}


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "smoke"
    config = BenchConfig.from_yaml(SMOKE)
    run_benchmark(config, ["expert", "expert_noisy:0.6"], out, workers=2, progress=False)
    return config, out


def test_every_job_is_recorded_once_with_a_clean_integrity_table(smoke_run):
    config, out = smoke_run
    records = _records(out)
    assert len(records) == len(plan_jobs(config, ["expert", "expert_noisy:0.6"])) == 12
    integrity = _summary(out)["integrity"]
    assert integrity["valid"] == 12 and integrity["missing"] == 0 and integrity["errors"] == 0
    assert integrity["hash_mismatch"] == 0 and integrity["seed_mismatch"] == 0
    for path in ("report.md", "sr_heatmap.png", "failure_depth.png", "uplift.png"):
        assert (out / path).stat().st_size > 0, path
    # the expert's ΔSR is exactly 0 and expert_noisy is screened out: nothing to draw, and the report says so
    assert not (out / "delta_sr.png").exists()
    assert "`delta_sr.png` is left out: ΔSR is 0 with a zero-width interval" in (out / "report.md").read_text()


def test_pairs_share_seeds_and_the_observation_only_fingerprint(smoke_run):
    _, out = smoke_run
    records = _records(out)
    for ep in range(2):
        clean = records[("expert", "Lift", "clean", 0, ep)]
        camera = records[("expert", "Lift", "camera", 1, ep)]
        noisy = records[("expert_noisy:0.6", "Lift", "camera", 1, ep)]
        assert clean["env_seed"] == camera["env_seed"] == noisy["env_seed"]
        assert clean["fingerprint"] == camera["fingerprint"] == noisy["fingerprint"]
        # a state-based expert ignores the camera: the shifted run is the clean run, step for step
        assert camera["success"] == clean["success"] and camera["steps"] == clean["steps"]
        assert camera["ee_summary"] == clean["ee_summary"]
        assert records[("expert", "Lift", "robot_init", 1, ep)]["ee_summary"]["start"] != clean["ee_summary"]["start"]


def test_resume_after_an_interruption_equals_the_uninterrupted_run(smoke_run, tmp_path):
    config, full = smoke_run
    part = tmp_path / "resumed"
    part.mkdir()
    shutil.copy(full / "run.json", part / "run.json")
    lines = (full / RESULTS).read_text().splitlines(keepends=True)
    (part / RESULTS).write_text("".join(lines[:5]) + lines[5][: len(lines[5]) // 2])  # torn write
    run_benchmark(config, ["expert", "expert_noisy:0.6"], part, workers=1, progress=False)
    assert _records(part) == _records(full)
    assert _summary(part)["conditions"] == _summary(full)["conditions"]
    assert _summary(part)["uplift"] == _summary(full)["uplift"]


def test_run_and_summary_record_provenance(smoke_run):
    import importlib.metadata

    _, out = smoke_run
    pinned = json.loads((out / "run.json").read_text())
    prov = pinned["provenance"]
    for package, dist in (("robosuite", "robosuite"), ("mujoco", "mujoco"), ("torch", "torch"), ("numpy", "numpy"),
                          ("faiss", "faiss-cpu"), ("torch_geometric", "torch-geometric")):
        assert prov["versions"][package] == importlib.metadata.version(dist), package
    assert set(prov["git"]) == {"commit", "dirty"} and set(prov["machine"]) >= {"cpu", "cores", "gpu"}
    assert prov["machine"]["cores"] == os.cpu_count() and prov["command"] and prov["cwd"]
    assert prov["artifacts"] == {"expert": {}, "expert_noisy:0.6": {}}  # the experts load no file
    assert prov["shift_levels"]["path"].endswith("configs/bench/factors.yaml")
    assert len(prov["shift_levels"]["sha256"]) == 64
    assert _summary(out)["provenance"] == prov
    assert "## Provenance" in (out / "report.md").read_text()


def _with_errored_record(full: Path, out: Path, key: tuple) -> dict:
    """A copy of a finished run in which the record of ``key`` ended with an error; returns the true record."""
    out.mkdir()
    shutil.copy(full / "run.json", out / "run.json")
    lines, true = [], None
    for line in (full / RESULTS).read_text().splitlines():
        rec = json.loads(line)
        if (rec["policy"], rec["task"], rec["factor"], rec["level"], rec["episode"]) == key:
            true = rec
            rec = {k: v for k, v in rec.items() if k in ("schema", "schema_version", "policy", "task", "factor",
                                                         "level", "episode", "env_seed", "policy_seed")}
            rec.update(success=False, error="RuntimeError: the simulator blew up", traceback="Traceback ...")
        lines.append(json.dumps(rec) + "\n")
    (out / RESULTS).write_text("".join(lines))
    return true


def test_exit_status_counts_errors_and_a_resume_retries_only_errored_jobs(smoke_run, tmp_path, capsys):
    from r2a_cli.main import main

    _, full = smoke_run
    out = tmp_path / "errored"
    key = ("expert", "Lift", "camera", 1, 1)
    _with_errored_record(full, out, key)
    args = ["bench", "run", "--config", str(SMOKE), "--policy", "expert", "--policy", "expert_noisy:0.6",
            "--out", str(out)]
    assert main([*args, "--no-retry-errors"]) == 1  # nothing is run again: 11 of 12 valid
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("r2a bench run: 11 of 12 episodes valid — 1 errored (tracebacks: the 'traceback' "
                           f"field of their records in {out / RESULTS}")
    assert len((out / RESULTS).read_text().splitlines()) == 12
    assert "## Errors" in (out / "report.md").read_text()
    assert main(args) == 0  # --retry-errors is the default: only the errored job runs again
    lines = (out / RESULTS).read_text().splitlines()
    assert len(lines) == 13 and json.loads(lines[-1])["error"] is None
    assert _records(out) == _records(full)
    resumes = json.loads((out / "run.json").read_text())["provenance"]["resumes"]
    assert len(resumes) == 1 and resumes[0]["pending_jobs"] == 1


def test_resume_with_other_policy_files_is_refused(smoke_run, tmp_path):
    config, full = smoke_run
    out = tmp_path / "other-files"
    out.mkdir()
    pinned = json.loads((full / "run.json").read_text())
    pinned["provenance"]["artifacts"]["expert"] = {"base_checkpoint": {"path": "ckpt", "sha256": "ab" * 32}}
    (out / "run.json").write_text(json.dumps(pinned))
    with pytest.raises(R2AInputError, match=r"policy 'expert' now loads other files \(base_checkpoint \(ckpt\): "
                                            r"sha256 abababababab when the run started, none now\)"):
        run_benchmark(config, ["expert", "expert_noisy:0.6"], out, progress=False)


def test_a_file_gained_or_changed_since_the_run_started_is_another_model(tmp_path):
    from eval.episode_job import _check_artifacts
    from eval.runner import _check_same_artifacts

    graph = {"path": "g", "sha256": "1" * 64}
    before = {"r2a:FIT": {"graph": graph}}
    _check_same_artifacts(tmp_path, before, {"r2a:FIT": {"graph": dict(graph)}})  # the same files: resumes
    gained = {"r2a:FIT": {"graph": graph, "gate": {"path": "gate", "sha256": "2" * 64}}}
    with pytest.raises(R2AInputError, match=r"gate \(gate\): sha256 none when the run started, 222222222222"):
        _check_same_artifacts(tmp_path, before, gained)
    with pytest.raises(R2AInputError, match=r"graph \(g\): sha256 111111111111 when the run started, 333333333333"):
        _check_same_artifacts(tmp_path, before, {"r2a:FIT": {"graph": {"path": "g", "sha256": "3" * 64}}})

    class Worker:
        metadata = {"artifacts": gained["r2a:FIT"]}

    _check_artifacts("r2a:FIT", Worker(), {"graph": "1" * 64, "gate": "2" * 64})
    _check_artifacts("r2a:FIT", Worker(), None)  # a job run on its own: no driver to agree with
    with pytest.raises(RuntimeError, match="loaded other files here .*gate"):
        _check_artifacts("r2a:FIT", Worker(), {"graph": "1" * 64})  # a worker's policy loaded one more file


def test_failure_frames_are_saved_beside_their_clean_twins(tmp_path):
    from eval.frames import MAX_SIDE, N_FRAMES

    config = BenchConfig.from_dict({**BenchConfig.from_yaml(SMOKE).to_dict(), "factors": {"camera": [1]},
                                    "episodes": 1, "save_trajectories": True})
    out = tmp_path / "frames"
    summary = run_benchmark(config, ["expert", "expert_noisy:0.6"], out, save_frames="failures", progress=False)
    records = _records(out)
    failed = records[("expert_noisy:0.6", "Lift", "camera", 1, 0)]
    clean = records[("expert_noisy:0.6", "Lift", "clean", 0, 0)]
    assert not failed["success"] and len(failed["frame_steps"]) == N_FRAMES
    assert failed["frame_steps"][0] == 0 and failed["frame_steps"][-1] == failed["steps"] - 1
    assert "frames" not in records[("expert", "Lift", "camera", 1, 0)]    # a success: no strip
    assert "frames" in records[("expert", "Lift", "clean", 0, 0)]        # a clean run: a twin
    for rec in (failed, clean):
        with Image.open(out / rec["frames"]) as strip:  # WebP (PNG where Pillow lacks it), as its suffix says
            assert strip.format.lower() == Path(rec["frames"]).suffix[1:] and strip.format in ("WEBP", "PNG")
            width, height = strip.size
        assert height == config.image_size <= MAX_SIDE and width == N_FRAMES * config.image_size + 2 * (N_FRAMES - 1)
    row = next(r for r in summary["failure_frames"] if r["factor"] == "camera" and r["policy"] == "expert_noisy:0.6")
    assert row["frames"] == failed["frames"] and row["clean_frames"] == clean["frames"]
    report = (out / "report.md").read_text()
    assert f"![failed]({failed['frames']})" in report and f"![clean twin]({clean['frames']})" in report
    assert len(list((out / "trajectories").glob("*.npz"))) == 4                # brought back and written too


def test_report_regenerates_from_results(smoke_run, tmp_path):
    _, out = smoke_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for name in ("summary.json", "report.md"):
        (copy / name).unlink()
    summary = report_from_dir(copy)
    assert (copy / "report.md").exists() and summary["conditions"] == _summary(out)["conditions"]


def test_resume_with_another_config_is_refused(smoke_run):
    config, out = smoke_run
    other = BenchConfig.from_dict({**config.to_dict(), "episodes": 3})
    with pytest.raises(R2AInputError, match="different config"):
        run_benchmark(other, ["expert", "expert_noisy:0.6"], out, progress=False)


@pytest.mark.parametrize("override, message", [
    ({"factors": {"camra": [1]}}, "unknown shift factor 'camra' \\(did you mean 'camera'\\?\\)"),
    ({"factors": {"camera": [7]}}, "level\\(s\\) \\[7\\]"),
    ({"tasks": []}, "'tasks' is empty"),
    ({"tasks": ["Lfit"]}, "unknown task 'Lfit'"),
    ({"episodez": 3}, "unknown field"),
])
def test_bad_configs_fail_before_any_episode(override, message):
    raw = {"name": "bad", "tasks": ["Lift"], "factors": {"camera": [1]}, "episodes": 1}
    with pytest.raises(R2AInputError, match=message):
        BenchConfig.from_dict({**raw, **override})


def test_cli_bad_config_exits_2_without_output(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("tasks: [Lift]\nfactors: {camera: [7]}\n")
    done = subprocess.run([sys.executable, "-m", "r2a_cli", "bench", "run", "--config", str(config), "--policy",
                           "expert", "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 2 and "levels are 1, 2 or 3" in done.stderr
    assert not (tmp_path / "out").exists()
    done = subprocess.run([sys.executable, "-m", "r2a_cli", "bench", "run", "--config", str(SMOKE), "--policy",
                           "exprt", "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 2 and "unknown policy 'exprt' (did you mean 'expert'?); valid policies:" in done.stderr
    assert "diagnostics (not deployable / measurement only): expert, expert_noisy" in done.stderr


#: ``r2a bench run`` whose result writer stops after writing (and fsync'ing) ``argv[1]`` records: it touches the
#: file ``argv[2]`` and blocks there, while the workers go on with the jobs in flight, so a kill lands at a known
#: point however fast the machine is. The rest of argv is the command line.
_STOP_AFTER_N_RECORDS = """
import sys, threading
from pathlib import Path
import eval.runner
from r2a_cli.main import main

n, marker, argv = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
results = eval.runner._local_results

def stop_after_n(*args, **kwargs):
    for i, record in enumerate(results(*args, **kwargs), 1):
        yield record
        if i == n:  # the writer asks for record n + 1: record n is on disk
            marker.touch()
            threading.Event().wait()

eval.runner._local_results = stop_after_n
sys.exit(main(argv))
"""


@pytest.mark.slow
def test_kill_dash_9_loses_only_episodes_in_flight(smoke_run, tmp_path):
    _, full = smoke_run
    out, marker, kept = tmp_path / "killed", tmp_path / "written", 4
    args = ["bench", "run", "--config", str(SMOKE), "--policy", "expert", "--policy", "expert_noisy:0.6",
            "--out", str(out), "--workers", "2"]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-c", _STOP_AFTER_N_RECORDS, str(kept), str(marker), *args],
                                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    try:
        while not marker.exists():  # no deadline: pytest's timeout guards a hang
            assert proc.poll() is None, f"the benchmark exited early:\n{(tmp_path / 'stderr.txt').read_text()}"
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the writer and its pool workers, mid-episode or done
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = (out / RESULTS).read_text()
    assert len(before.splitlines()) == kept and before.endswith("\n")
    assert _records(out).items() <= _records(full).items()  # what was written survived, intact
    done = subprocess.run([sys.executable, "-m", "r2a_cli", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    after = (out / RESULTS).read_text()
    assert after.startswith(before) and len(after.splitlines()) == 12  # the rerun ran exactly the other 8 jobs
    assert _records(out) == _records(full)


@pytest.mark.slow
def test_ray_executor_on_a_local_instance_gives_the_same_records(smoke_run, tmp_path, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # else Ray writes a token to ~/.ray (docs/architecture.md)
    config, full = smoke_run
    out = tmp_path / "ray"
    run_benchmark(config, ["expert", "expert_noisy:0.6"], out, workers=2, executor="ray", progress=False)
    assert _records(out) == _records(full)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A real Ray cluster on this machine, started like a user would (``ray start --head --num-cpus 2``, on
    loopback, every port chosen free), and stopped — only it — at the end: ``--block`` keeps ``ray start`` in
    the foreground, and SIGTERM to it stops the processes it started. Yields its address and the workers'
    artifact cache."""
    pytest.importorskip("ray")
    ray_cli = Path(sys.executable).with_name("ray")
    temp = Path(tempfile.mkdtemp(prefix="r2a-ray-"))  # short: Ray's socket paths must fit in 107 bytes
    cache = tmp_path_factory.mktemp("artifact-cache")
    port = _free_port()
    ports = [f"--{name}={_free_port()}" for name in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                                     "metrics-export-port", "runtime-env-agent-port")]
    # token auth off on both sides: a ~/.ray/auth_token left by any earlier local Ray instance would switch the
    # cluster to tokens, which a driver joining by address does not send (docs/architecture.md, "Platform notes")
    env = {**os.environ, "R2A_ARTIFACT_CACHE": str(cache), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    log_path = temp / "ray-start.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([str(ray_cli), "start", "--head", "--block", "--num-cpus", "2", "--port", str(port),
                                 "--node-ip-address", "127.0.0.1", "--include-dashboard=false",
                                 "--disable-usage-stats", "--object-store-memory", str(200 << 20),
                                 "--temp-dir", str(temp), *ports],
                                stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    driver_env = pytest.MonkeyPatch()
    driver_env.setenv("RAY_AUTH_MODE", "disabled")
    try:
        while "Ray runtime started" not in log_path.read_text():  # no deadline: pytest's timeout guards a hang
            assert proc.poll() is None, f"ray start failed:\n{log_path.read_text()}"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", cache
    finally:
        driver_env.undo()
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)


def test_smoke_run_through_a_real_ray_cluster_joined_by_address(smoke_run, ray_cluster, tmp_path, monkeypatch):
    address, _ = ray_cluster
    config, full = smoke_run
    out = tmp_path / "cluster"
    monkeypatch.setenv("RAY_ADDRESS", address)  # as after `ray start --head`: no num_cpus may be passed
    run_benchmark(config, ["expert", "expert_noisy:0.6"], out, workers=1, executor="ray", progress=False)
    assert _records(out) == _records(full)


def test_a_checkpoint_reaches_the_cluster_through_the_object_store(ray_cluster, tmp_path, monkeypatch):
    """The driver's checkpoint directory is deleted as soon as it has been shipped: the job succeeds only if the
    worker built its policy from the copy unpacked into its own cache."""
    import eval.ray_executor
    from r2a.vla.policy import BUILTIN_CHECKPOINT
    from r2a_cli.main import main
    from r2a_core.provenance import sha256_dir

    address, cache = ray_cluster
    ckpt = tmp_path / "ckpt"
    shutil.copytree(BUILTIN_CHECKPOINT, ckpt)
    digest = sha256_dir(ckpt)
    ship = eval.ray_executor.ship_artifacts

    def ship_then_delete(*args, **kwargs):
        shipped = ship(*args, **kwargs)
        shutil.rmtree(ckpt)
        return shipped

    monkeypatch.setattr(eval.ray_executor, "ship_artifacts", ship_then_delete)
    out = tmp_path / "builtin"
    code = main(["bench", "run", "--config", str(SMOKE), "--set", "factors={}", "--set", "episodes=1",
                 "--policy", f"builtin:{ckpt}", "--out", str(out), "--executor", "ray", "--ray-address", address])
    (record,) = _records(out).values()
    assert code == 0 and record["error"] is None and not ckpt.exists()
    assert sha256_dir(cache / digest / "ckpt") == digest
    artifacts = json.loads((out / "run.json").read_text())["provenance"]["artifacts"]
    assert artifacts == {f"builtin:{ckpt}": {"base_checkpoint": {"path": str(ckpt), "sha256": digest}}}
