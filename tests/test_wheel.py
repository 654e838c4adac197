"""`pip install .` gives a working r2a: the wheel carries every module, shipped config and asset, and installed in
a fresh virtualenv — no checkout on sys.path, the working directory elsewhere — it finds them through
importlib.util.find_spec: a shipped config by its bare name (``--config smoke``), an asset by the relative path the
shipped YAMLs give (``r2a/assets/r2a_gate``).

The fast tests build the wheel (seconds) and check its file list and the installed package's lookups; the slow one
runs the real commands from outside the checkout: a smoke benchmark of the shipped R2A, a demo collection and its
graph, a policy server answering a query.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what a build does not read: version control, environments, outputs, and the tests and docs it does not package
NOT_BUILT = shutil.ignore_patterns(".git", ".venv", "runs", "out", "data", "wandb", "build", "*.egg-info",
                                   "__pycache__", ".pytest_cache", ".benchmarks", "tests", "docs")
#: checkout folder → where its files lie in the wheel
SHIPPED = {"configs": "r2a_configs", "r2a/assets": "r2a/assets"}
CODE = ("r2a", "r2a_core", "sim", "demos", "graph_builder", "training", "gating", "eval", "r2a_cli")


def _run(command: list[str], timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, (f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                                  f"{done.stderr[-3000:]}")
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """``pip wheel .`` of a copy of the checkout (a build in place leaves build/ behind, whose stale files would
    enter later wheels), with this environment's setuptools and no network."""
    pytest.importorskip("setuptools", reason="building the wheel without build isolation needs setuptools")
    tmp = tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, tmp / "src", ignore=NOT_BUILT)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(tmp / "dist"), str(tmp / "src")], cwd=tmp)
    (built,) = (tmp / "dist").glob("r2a-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict:
    """A fresh virtualenv holding only the wheel; its dependencies are this environment's site-packages (one .pth
    line, so nothing is downloaded, no other torch), never the checkout. The venv and how to run its commands."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
          str(wheel)])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return {"venv": venv, "site": site, "env": env, "cwd": tmp_path_factory.mktemp("elsewhere")}


def _in(installed: dict, command: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``command`` run with the venv's executables, in a directory outside the checkout."""
    return _run(command, timeout=timeout, cwd=installed["cwd"], env=installed["env"])


def test_the_wheel_holds_every_module_shipped_config_and_asset(wheel):
    with zipfile.ZipFile(wheel) as archive:
        record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        listed = {line.split(",")[0] for line in archive.read(record).decode().splitlines()}
    expected = {f"{dest}/{p.relative_to(ROOT / src).as_posix()}" for src, dest in SHIPPED.items()
                for p in (ROOT / src).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    expected |= {p.relative_to(ROOT).as_posix() for package in CODE for p in (ROOT / package).rglob("*.py")}
    missing = sorted(expected - listed)
    assert not missing, f"not in the wheel (add their pattern to pyproject.toml's package-data): {missing}"
    assert not [n for n in listed if n.startswith(("tests/", "configs/"))]


#: run in the installed venv: where every shipped file is found, and every shipped config loaded by its bare name
LOOKUPS = """
import json
import r2a, r2a_core.config as c
from eval.bench_config import BenchConfig
from eval.calibration.config import CalibrationConfig
from gating.config import GateTrainConfig
from graph_builder.config import GraphConfig
from training.retriever.config import RetrieverTrainConfig
from training.vla.config import TrainConfig
from r2a.wrapper.config import R2AConfig
from r2a.adapters.keymap import ADAPTER_DIR, adapter_yaml
from r2a.vla.policy import BUILTIN_CHECKPOINT
from sim.shifts.config import DEFAULT_FACTORS_YAML, load_factor_levels
from sim.shifts.language import LANGUAGE_DIR, load_instructions

for name in ("smoke", "quick", "standard", "quickstart", "clean", "full"):
    assert BenchConfig.from_yaml(name).episodes >= 1
for cls, name in ((CalibrationConfig, "calibration"), (GateTrainConfig, "default"), (GraphConfig, "default"),
                  (RetrieverTrainConfig, "default"), (TrainConfig, "builtin")):
    cls.from_yaml(name)
r2a_config = R2AConfig.from_yaml("builtin")
assets = [r2a_config.graph, r2a_config.retriever, r2a_config.gate.checkpoint, r2a_config.gate.image_stats,
          r2a_config.harmonize.image_stats]
load_factor_levels()
load_instructions("StackThree")
paths = [r2a.__file__, c.shipped_config("smoke", "bench"), c.resolve_path("configs/bench/quick.yaml"),
         ADAPTER_DIR, adapter_yaml("openpi_libero"), BUILTIN_CHECKPOINT, DEFAULT_FACTORS_YAML, LANGUAGE_DIR]
paths += [c.resolve_path(a) for a in assets]
print(json.dumps([str(p) for p in paths]))
"""


def test_the_installed_package_finds_its_configs_and_assets_from_any_directory(installed):
    paths = [Path(p) for p in json.loads(_in(installed, ["python", "-c", LOOKUPS]).stdout.splitlines()[-1])]
    for path in paths:
        assert path.is_relative_to(installed["site"]) and path.exists(), f"{path}: not the installed package's"


@pytest.mark.slow
def test_bench_graph_and_serve_run_from_outside_the_checkout(installed):
    cwd, site = installed["cwd"], installed["site"]
    # the shipped R2A on the shipped smoke config, named as a user outside the checkout would
    _in(installed, ["r2a", "bench", "run", "--config", "smoke", "--policy", "r2a", "--set", "episodes=1",
                    "--out", "bench"])
    assert len((cwd / "bench" / "results.jsonl").read_text().splitlines()) == 3
    artifacts = json.loads((cwd / "bench" / "run.json").read_text())["provenance"]["artifacts"]["r2a"]
    assert sorted(artifacts) == ["base_checkpoint", "gate", "graph", "image_stats", "retriever"]
    assert all(Path(a["path"]).is_relative_to(site) for a in artifacts.values()), artifacts
    # a tiny graph from scripted demos, with the shipped graph config by name
    _in(installed, ["r2a", "demos", "collect", "--task", "Lift", "--episodes", "2", "--out", "lift.hdf5"])
    _in(installed, ["r2a", "graph", "build", "lift.hdf5", "--out", "graph", "--config", "default"])
    _in(installed, ["r2a", "graph", "info", "graph", "--verify"])
    # the shipped R2A served over openpi's protocol answers a query
    _serve_answers_one_query(installed)


def _serve_answers_one_query(installed: dict) -> None:
    from r2a.adapters.openpi_policy import OpenPIWebsocketPolicy

    server = subprocess.Popen(["r2a", "serve", "--policy", "r2a", "--port", "0"], cwd=installed["cwd"],
                              env=installed["env"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in server.stderr], daemon=True).start()
    try:
        port, log = None, []
        while port is None:
            log.append(lines.get(timeout=120))
            found = re.search(r"on ws://127\.0\.0\.1:(\d+) \(", log[-1])
            port = int(found.group(1)) if found else None
        graph = ROOT / "r2a" / "assets" / "r2a_graph" / "arrays"
        rng = np.random.default_rng(0)
        obs = {"images/agentview": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
               "images/wrist": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
               "state/ee_pos": np.load(graph / "node_ee_pos.npy")[0],
               "state/ee_quat": np.load(graph / "node_ee_quat.npy")[0],
               "state/gripper": np.float32(1.0), "state/joint_pos": np.zeros(7), "state/step": 0,
               "prompt": "pick up the red cube"}
        with OpenPIWebsocketPolicy(f"ws://127.0.0.1:{port}") as client:
            actions = client.infer(obs)["actions"]
        assert actions.shape == (8, 7) and np.isfinite(actions).all()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    assert server.returncode in (0, 130), "".join(log)
