"""A benchmark job's record replays bit for bit on one machine: in another process, and after another job in the
same process — so ``--workers 1`` and ``--workers 2`` (which hand a worker different jobs before a given one) record
the same episodes (docs/architecture.md, "Reproducibility").

Each job runs in a fresh Python process, as a spawned pool worker does; the records are compared field by field
except the wall time, and the per-step EE trace (``save_trajectories``) array by array, bit for bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("robosuite")

ROOT = Path(__file__).resolve().parents[1]
SEED = 90000  # a training seed (the headroom range, docs/architecture.md "Conventions")
#: what legitimately differs between two runs of one job: how long it took
VOLATILE = ("wall_s",)

#: run the jobs given as JSON keys, in order, in this process; print each record with its trace's bytes (hex)
_RUN_JOBS = r"""
import io, json, sys
import numpy as np
from eval.bench_config import BenchConfig
from eval.episode_job import Job, JobOptions, run_job
from r2a_core.files import to_json_safe
config = BenchConfig.from_dict(json.loads(sys.argv[1]))
out = []
for key in json.loads(sys.argv[2]):
    result = run_job(Job(**key), config, JobOptions())
    traces = {}
    for name, data in result.files.items():
        with np.load(io.BytesIO(data)) as npz:
            traces.update({f"{name}:{k}": npz[k].tobytes().hex() for k in npz.files})
    out.append({"record": to_json_safe(result.record), "traces": traces})
print("RECORDS " + json.dumps(out))
"""


def _config(tasks: list[str], factors: dict[str, list[int]]) -> dict:
    return {"name": "reproducible", "tasks": tasks, "factors": factors, "episodes": 2, "seed": SEED,
            "image_size": 64, "n_resamples": 100, "save_trajectories": True}


def _job(policy: str, task: str, factor: str, level: int, episode: int) -> dict:
    return {"policy": policy, "task": task, "factor": factor, "level": level, "episode": episode}


def _start(config: dict, jobs: list[dict]) -> subprocess.Popen:
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
           "PYOPENGL_PLATFORM": os.environ.get("PYOPENGL_PLATFORM", "egl")}
    return subprocess.Popen([sys.executable, "-c", _RUN_JOBS, json.dumps(config), json.dumps(jobs)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _results(proc: subprocess.Popen) -> list[dict]:
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    line = next(line for line in stdout.splitlines() if line.startswith("RECORDS "))
    return json.loads(line[len("RECORDS "):])


def _comparable(result: dict) -> dict:
    record = {k: v for k, v in result["record"].items() if k not in VOLATILE}
    assert record["error"] is None, record.get("traceback")
    return {"record": record, "traces": result["traces"]}


def _assert_replays(config: dict, job: dict, before: dict) -> None:
    """``job`` alone in one process, and after ``before`` in another (both at once, like two pool workers),
    gives the same record and trace."""
    alone, after = _start(config, [job]), _start(config, [before, job])
    first, second = _results(alone)[0], _results(after)[1]
    a, b = _comparable(first), _comparable(second)
    assert a["traces"] and a["traces"] == b["traces"], "the EE trace differs between the two runs"
    differing = sorted(k for k in a["record"].keys() | b["record"].keys() if a["record"].get(k) != b["record"].get(k))
    assert not differing, {k: (a["record"].get(k), b["record"].get(k)) for k in differing}
    assert a["record"]["steps"] > 1


def test_a_job_replays_in_another_process_after_another_job():
    """The frozen base under a light shift (model edits, undone after the episode), once after a layout job on the
    same simulator (a state-changing factor with distractors) and once alone."""
    config = _config(["Lift"], {"light": [2], "layout": [3]})
    _assert_replays(config, _job("builtin", "Lift", "light", 2, 0), before=_job("builtin", "Lift", "layout", 3, 1))


@pytest.mark.slow
def test_the_published_r2a_variant_replays_in_another_process_after_another_job():
    """The published R2A variant (retrieval, harmonization, the learned gate) on Stack under light L2, as in the
    standard run, once after the clean job of another episode and once alone."""
    config = _config(["Stack"], {"light": [2]})
    policy = "r2a-harmonize-hold"
    _assert_replays(config, _job(policy, "Stack", "light", 2, 0), before=_job(policy, "Stack", "clean", 0, 1))
