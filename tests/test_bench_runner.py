"""The benchmark runner end to end on the smoke config: real MuJoCo, pairing, resume, report, bad configs."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
    for path in ("report.md", "delta_sr.png", "sr_heatmap.png", "failure_depth.png", "uplift.png"):
        assert (out / path).stat().st_size > 0, path


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
    done = subprocess.run([sys.executable, "-m", "r2a.cli", "bench", "run", "--config", str(config), "--policy",
                           "expert", "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 2 and "levels are 1, 2 or 3" in done.stderr
    assert not (tmp_path / "out").exists()
    done = subprocess.run([sys.executable, "-m", "r2a.cli", "bench", "run", "--config", str(SMOKE), "--policy",
                           "exprt", "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 2 and "unknown policy 'exprt' (did you mean 'expert'?); valid policies:" in done.stderr
    assert "expert (the task's scripted expert" in done.stderr


#: ``r2a bench run`` whose result writer stops after writing (and fsync'ing) ``argv[1]`` records: it touches the
#: file ``argv[2]`` and blocks there, while the workers go on with the jobs in flight, so a kill lands at a known
#: point however fast the machine is. The rest of argv is the command line.
_STOP_AFTER_N_RECORDS = """
import sys, threading
from pathlib import Path
import eval.runner
from r2a.cli import main

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
    done = subprocess.run([sys.executable, "-m", "r2a.cli", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    after = (out / RESULTS).read_text()
    assert after.startswith(before) and len(after.splitlines()) == 12  # the rerun ran exactly the other 8 jobs
    assert _records(out) == _records(full)


@pytest.mark.slow
def test_ray_executor_gives_the_same_records(smoke_run, tmp_path):
    pytest.importorskip("ray")
    config, full = smoke_run
    out = tmp_path / "ray"
    run_benchmark(config, ["expert", "expert_noisy:0.6"], out, workers=2, executor="ray", progress=False)
    assert _records(out) == _records(full)
