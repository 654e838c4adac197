"""``r2a graph build|info`` end to end, and ``r2a bench perf graph`` on tiny sizes.

The build tests plug a stand-in ``demos.dataset`` into ``sys.modules`` so the CLI wiring (mixed file/directory
inputs, errors, output) is tested independently of the demonstration readers; the last test uses the real
reader when it exists.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from graph_builder.storage import load_graph
from graph_builder.synthetic import line_episode, synthetic_episodes
from r2a_cli.main import main
from r2a_core.provenance import sha256_dir


def _seed_of(path: Path) -> str:
    return (path / "meta" / "info.json").read_text() if path.is_dir() else path.read_text()


def _fake_load_episodes(path, load_images=True):
    spec = _seed_of(Path(path))
    if spec == "8-D":
        return [line_episode(30, action_dim=8)]
    return synthetic_episodes(1000, seed=int(spec))


@pytest.fixture()
def inputs(tmp_path, monkeypatch):
    fake = types.ModuleType("demos.dataset")
    fake.load_episodes = _fake_load_episodes
    monkeypatch.setitem(sys.modules, "demos.dataset", fake)
    hdf5 = tmp_path / "a.hdf5"
    hdf5.write_text("1")
    lerobot = tmp_path / "lerobot_b"
    (lerobot / "meta").mkdir(parents=True)
    (lerobot / "meta" / "info.json").write_text("2")
    return hdf5, lerobot


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_build_mixed_inputs_then_info(tmp_path, inputs, capsys):
    out_dir = tmp_path / "graph"
    code, out, _ = _run(capsys, "graph", "build", *map(str, inputs), "--out", str(out_dir), "--no-progress",
                        "--set", "edges.spatial_k=10")
    assert code == 0
    built = json.loads(out)
    assert built["counts"]["sources"] == 2 and built["counts"]["frames"] == 2000
    assert built["counts"]["edges"]["spatial"] == 10 * built["counts"]["nodes"]
    graph = load_graph(out_dir)
    assert graph.manifest["build_config"]["edges"]["spatial_k"] == 10
    code, out, _ = _run(capsys, "graph", "info", str(out_dir), "--verify")
    info = json.loads(out)
    assert code == 0 and info["verified"] is True
    assert info["counts"] == built["counts"]
    assert [s["path"] for s in info["sources"]] == [str(p) for p in inputs]
    # a source file's recorded digest is its sha256sum; a dataset directory's, r2a_core.provenance.sha256_dir
    sha256sum = subprocess.run(["sha256sum", str(inputs[0])], capture_output=True, text=True, check=True)
    assert [s["sha256"] for s in info["sources"]] == [sha256sum.stdout.split()[0], sha256_dir(inputs[1])]
    assert info["index"]["type"] == "flat" and info["key"]["dims"] == 11
    assert info["size_mb"] > 0


def test_build_refuses_existing_output_unless_forced(tmp_path, inputs, capsys):
    out_dir = tmp_path / "graph"
    assert _run(capsys, "graph", "build", str(inputs[0]), "--out", str(out_dir), "--no-progress")[0] == 0
    code, _, err = _run(capsys, "graph", "build", str(inputs[0]), "--out", str(out_dir), "--no-progress")
    assert code == 2 and "already exists" in err and "--force" in err
    code, _, _ = _run(capsys, "graph", "build", *map(str, inputs), "--out", str(out_dir), "--no-progress",
                      "--force")
    assert code == 0 and load_graph(out_dir).manifest["counts"]["sources"] == 2


@pytest.mark.parametrize("args, message", [
    (["missing.hdf5"], "missing.hdf5: no such file or directory"),
    (["{a}", "{a}"], "given twice"),
    (["{a}", "--set", "edges.k=3"], "unknown field 'k'"),
    (["{a}", "{bad}"], "different action spaces"),
])
def test_build_errors_are_one_line(tmp_path, inputs, capsys, args, message):
    bad = tmp_path / "eight.hdf5"
    bad.write_text("8-D")
    argv = [a.format(a=inputs[0], bad=bad) for a in args]
    code, out, err = _run(capsys, "graph", "build", *argv, "--out", str(tmp_path / "g"), "--no-progress")
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "g").exists()


def test_info_on_a_non_graph(tmp_path, capsys):
    code, _, err = _run(capsys, "graph", "info", str(tmp_path))
    assert code == 2 and "no manifest.json" in err


def test_bench_perf_graph_tiny(capsys, tmp_path):
    from eval.perf.graph_scale import format_table, run_graph_scale_benchmark

    rows = run_graph_scale_benchmark([1000, 2000], isolate=False)
    assert [r["frames"] for r in rows] == [1000, 2000]
    assert rows[0]["cost_ratio"] is None and rows[1]["cost_ratio"] > 0
    assert rows[1]["recall_at_10"] == 1.0 and rows[1]["index_mb"] > 0
    assert "| frames |" in format_table(rows)
    report = tmp_path / "bench.json"
    code, out, _ = _run(capsys, "bench", "perf", "graph", "--sizes", "1000", "--no-isolate", "--json", str(report))
    assert code == 0 and "frames/s" in out
    assert json.loads(report.read_text())[0]["config"]["segmentation"]["stride"] == 5


def test_build_with_the_real_demo_readers(tmp_path, capsys):
    """An r2a HDF5 file and the LeRobot v3 fixture written by the real lerobot, mixed in one build."""
    pytest.importorskip("demos.dataset")
    from demos.hdf5_io import write_hdf5

    hdf5 = write_hdf5(tmp_path / "demos.hdf5", synthetic_episodes(1200, seed=3, failure_rate=0.2),
                      env_args={"env_name": "Lift", "env_kwargs": {}})
    lerobot = Path(__file__).parent / "fixtures" / "lerobot" / "tiny_images"
    out_dir = tmp_path / "g"
    code, out, err = _run(capsys, "graph", "build", str(hdf5), str(lerobot), "--out", str(out_dir), "--no-progress")
    assert code == 0, err
    summary = json.loads(out)
    sources = summary["sources"]
    assert [s["path"] for s in sources] == [str(hdf5), str(lerobot)]
    assert sources[1]["episodes"] == 3 and sources[1]["skipped_failed"] == 0
    assert summary["counts"]["demos"] == sources[0]["kept"] + 3
    assert summary["counts"]["frames"] == sum(load_graph(out_dir).arrays["demo_length"])
    assert "lift_the_red_cube" in summary["per_task"] and summary["action_space"]["kind"] == "delta_ee"
