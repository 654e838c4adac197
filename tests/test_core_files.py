"""The one atomic writer (r2a_core.files): complete or absent, never half-written; JSON-safe data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from r2a_core.files import (
    atomic_dir,
    atomic_path,
    atomic_write,
    remove_stale_temporaries,
    temp_sibling,
    to_json_safe,
    write_json_atomic,
)


def test_atomic_write_replaces_only_on_success(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_write(path) as fh:
            fh.write("half")
            raise RuntimeError("crash mid-write")
    assert path.read_text() == "old"
    with atomic_write(path) as fh:
        fh.write("new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporaries left


def test_atomic_write_binary_and_bad_mode(tmp_path):
    with atomic_write(tmp_path / "b.bin", "wb") as fh:
        fh.write(b"\x00\x01")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    with pytest.raises(ValueError, match="mode"):
        with atomic_write(tmp_path / "c", "a"):
            pass


def test_atomic_path_keeps_the_suffix_for_writers_that_add_one(tmp_path):
    target = tmp_path / "trace.npz"
    with atomic_path(target) as tmp:
        assert tmp.suffix == ".npz" and tmp.parent == tmp_path and tmp != target
        np.savez(tmp, x=np.arange(3))
    np.testing.assert_array_equal(np.load(target)["x"], np.arange(3))
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(tmp_path / "never.npz") as tmp:
            np.savez(tmp, x=np.arange(3))
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.npz"]


def test_atomic_path_gives_each_writer_its_own_temporary(tmp_path):
    """Two writers of one path at once (two processes resuming a run) never share a temporary."""
    target = tmp_path / "rows.npz"
    with atomic_path(target) as first, atomic_path(target) as second:
        assert first != second and first.name.startswith(".rows.npz.tmp-") and first.suffix == ".npz"
        np.savez(first, x=np.arange(2))
        np.savez(second, x=np.arange(3))
    assert len(np.load(target)["x"]) == 2  # the outer block ends last
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.npz"]


def test_remove_stale_temporaries_keeps_a_live_writers(tmp_path):
    """A pool worker killed mid-write leaves its temporary; the next run removes it, never a running writer's."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(dead.stdout)
    stale_file = tmp_path / f".demo.hdf5.tmp-{dead_pid}-d26927fc"
    stale_npz = tmp_path / f".rows.npz.tmp-{dead_pid}-abcdef12.npz"
    stale_dir = tmp_path / f".graph.tmp-{dead_pid}-0123abcd"
    live = temp_sibling(tmp_path / "demo.hdf5")
    for path in (stale_file, stale_npz, live, tmp_path / ".hidden-config-file", tmp_path / "demo.hdf5"):
        path.write_bytes(b"x")
    stale_dir.mkdir()
    (stale_dir / "nodes.npy").write_bytes(b"x")
    removed = remove_stale_temporaries(tmp_path)
    assert sorted(removed) == sorted([stale_file, stale_npz, stale_dir])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, ".hidden-config-file", "demo.hdf5"])
    assert remove_stale_temporaries(tmp_path / "missing") == []


def test_atomic_dir_swaps_a_whole_directory(tmp_path):
    out = tmp_path / "graph"
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("1")
        assert not out.exists()
    assert (out / "a.txt").read_text() == "1"
    with pytest.raises(RuntimeError):
        with atomic_dir(out) as tmp:
            (tmp / "b.txt").write_text("2")
            raise RuntimeError
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"]
    with atomic_dir(out) as tmp:
        (tmp / "c.txt").write_text("3")
    assert sorted(p.name for p in out.iterdir()) == ["c.txt"]
    with pytest.raises(FileExistsError):
        with atomic_dir(out, overwrite=False) as tmp:
            (tmp / "d.txt").write_text("4")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph"]


def test_json_safe_values(tmp_path):
    data = {"nan": math.nan, "inf": np.float32("inf"), "arr": np.arange(2), "t": (1, 2), "p": Path("x"), 3: True}
    assert to_json_safe(data) == {"nan": None, "inf": None, "arr": [0, 1], "t": [1, 2], "p": "x", "3": True}
    path = write_json_atomic(tmp_path / "s.json", data)
    assert json.loads(path.read_text())["nan"] is None


def test_atomic_dir_files_are_readable_like_any_new_file(tmp_path):
    import os
    import stat

    with atomic_dir(tmp_path / "ckpt") as tmp:
        private = tmp / "weights.bin"
        private.write_bytes(b"x")
        private.chmod(0o600)  # what safetensors does
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "ckpt" / "weights.bin").stat().st_mode) == 0o666 & ~umask
