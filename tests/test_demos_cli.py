"""`r2a demos collect` and `r2a demos info`, end to end through the real command."""

import json
import subprocess
import sys

import numpy as np
import pytest

from demos.hdf5_io import read_hdf5
from r2a_core.provenance import sha256_file

pytest.importorskip("robosuite")


def r2a(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "r2a_cli", *args], capture_output=True, text=True)


def test_collect_with_two_workers_then_info(tmp_path):
    out = tmp_path / "lift.hdf5"
    done = r2a("demos", "collect", "--task", "Lift", "--episodes", "3", "--workers", "2", "--image-size", "32",
               "--seed", "7", "--out", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["episodes"] == 3 and result["successes"] == 3
    episodes = read_hdf5(out)
    assert [ep.meta["seed"] for ep in episodes] == [7, 8, 9]
    assert episodes[0].images["agentview"].shape[1:] == (32, 32, 3) and all(ep.success for ep in episodes)
    assert np.all(np.abs(episodes[0].actions) <= 1.0)

    info = r2a("demos", "info", str(out))
    assert info.returncode == 0, info.stderr
    summary = json.loads(info.stdout)
    assert summary["episodes"] == 3 and summary["successes"] == 3 and summary["frames"] == result["frames"]
    assert summary["tasks"] == {"Lift": 3} and summary["instructions"] == ["pick up the red cube"]
    assert summary["cameras"] == {"agentview": [32, 32, 3], "wrist": [32, 32, 3]}
    assert summary["perturbed"] == {"episodes": 0, "forced_drops": 0, "settings": []}


def test_same_seed_gives_the_same_demonstrations(tmp_path):
    """The same episodes, and — written in episode order whichever worker finishes first — the same file bytes, so
    demos re-collected on the same kind of CPU match the digests a training run recorded."""
    for name, workers in (("a.hdf5", "1"), ("b.hdf5", "2")):
        done = r2a("demos", "collect", "--task", "Lift", "--episodes", "2", "--workers", workers, "--cameras",
                   "--out", str(tmp_path / name))
        assert done.returncode == 0, done.stderr
    a, b = read_hdf5(tmp_path / "a.hdf5"), read_hdf5(tmp_path / "b.hdf5")
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.actions, y.actions)
        np.testing.assert_array_equal(x.sim_states, y.sim_states)
    assert sha256_file(tmp_path / "a.hdf5") == sha256_file(tmp_path / "b.hdf5")


def test_unknown_task_is_a_one_line_error_and_writes_nothing(tmp_path):
    out = tmp_path / "x.hdf5"
    done = r2a("demos", "collect", "--task", "Lfit", "--episodes", "1", "--out", str(out))
    assert done.returncode == 2
    assert ("unknown task 'Lfit' (did you mean 'Lift'?); valid tasks: Lift, Stack, PickPlaceCan, StackThree"
            in done.stderr)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_info_on_bad_files(tmp_path):
    missing = r2a("demos", "info", str(tmp_path / "none.hdf5"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    junk = tmp_path / "junk.hdf5"
    junk.write_bytes(b"not an hdf5 file at all")
    bad = r2a("demos", "info", str(junk))
    assert bad.returncode == 2 and "not a readable HDF5 file" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_top_level_help_and_unknown_group():
    assert r2a("--help").returncode == 0
    done = r2a("demoz")
    assert done.returncode == 2
    assert "valid commands: demos, graph, policy, serve, retriever, gate, fit, bench" in done.stderr


def test_bad_perturbation_is_a_one_line_error_and_writes_nothing(tmp_path):
    out = tmp_path / "x.hdf5"
    done = r2a("demos", "collect", "--task", "Lift", "--episodes", "1", "--perturb-noise", "-0.5", "--out", str(out))
    assert done.returncode == 2 and "perturbation" in done.stderr and "noise >= 0" in done.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_rerender_replaces_only_the_chosen_camera(tmp_path):
    source, out = tmp_path / "lift.hdf5", tmp_path / "again.hdf5"
    done = r2a("demos", "collect", "--task", "Lift", "--episodes", "1", "--image-size", "32", "--out", str(source))
    assert done.returncode == 0, done.stderr
    done = r2a("demos", "rerender", str(source), "--cameras", "agentview", "--out", str(out))
    assert done.returncode == 0, done.stderr
    (old,), (new,) = read_hdf5(source), read_hdf5(out)
    np.testing.assert_array_equal(new.actions, old.actions)
    np.testing.assert_array_equal(new.sim_states, old.sim_states)
    np.testing.assert_array_equal(new.images["wrist"], old.images["wrist"])
    # the same camera renders the same scene: recorded images are sampled a physics substep away from the state
    difference = np.abs(new.images["agentview"].astype(int) - old.images["agentview"].astype(int))
    assert new.images["agentview"].shape == old.images["agentview"].shape and difference.mean() < 3.0
    # the reset frame is exact — and carries no visualization site (robosuite hides those only on reset)
    np.testing.assert_array_equal(new.images["agentview"][0], old.images["agentview"][0])

    bad = r2a("demos", "rerender", str(source), "--cameras", "side", "--out", str(tmp_path / "bad.hdf5"))
    assert bad.returncode == 2 and "records cameras ['agentview', 'wrist']" in bad.stderr
    assert not (tmp_path / "bad.hdf5").exists()


def test_rerender_under_a_shift_changes_only_the_pictures(tmp_path):
    source, out = tmp_path / "lift.hdf5", tmp_path / "light.hdf5"
    done = r2a("demos", "collect", "--task", "Lift", "--episodes", "2", "--image-size", "32", "--out", str(source))
    assert done.returncode == 0, done.stderr
    done = r2a("demos", "rerender", str(source), "--shift", "light:3", "--seed", "5000", "--out", str(out))
    assert done.returncode == 0, done.stderr
    old, new = read_hdf5(source), read_hdf5(out)
    for a, b, seed in zip(old, new, (5000, 5001)):
        np.testing.assert_array_equal(b.actions, a.actions)
        np.testing.assert_array_equal(b.sim_states, a.sim_states)
        assert np.abs(b.images["agentview"].astype(int) - a.images["agentview"]).mean() > 3.0  # the light changed
        assert b.meta["shift"]["factor"] == "light" and b.meta["shift"]["level"] == 3
        assert b.meta["shift"]["seed"] == seed
    assert new[0].meta["shift"]["params"] != new[1].meta["shift"]["params"]  # each episode its own draw
    bad = r2a("demos", "rerender", str(source), "--shift", "robot_init:2", "--out", str(tmp_path / "bad.hdf5"))
    assert bad.returncode == 2 and "changes the simulator state" in bad.stderr
    assert not (tmp_path / "bad.hdf5").exists()
