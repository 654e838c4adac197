"""Writing files so that a reader never sees half of one: the project's one atomic writer, and JSON-safe data.

Everything r2a writes — demonstration files, graphs, checkpoints, reports, benchmark summaries — goes through
:func:`atomic_write` (one file) or :func:`atomic_dir` (a directory): the content is written under a unique
temporary name next to the target, flushed and fsync'ed, then renamed into place. An exception (or Ctrl-C, or
SIGTERM, which the ``r2a`` command turns into one) removes the temporary and leaves the target as it was.
Before any of that, :func:`check_output_path` refuses an output path no writer could complete (a directory where a
file goes, a file where a directory goes, a path under a file) with a one-line error.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np


def temp_sibling(path: Path, kind: str = "tmp", suffix: str = "") -> Path:
    """A unique hidden name next to ``path`` (same filesystem, so the final rename is atomic):
    ``.NAME.KIND-PID-HEX8`` and then ``suffix``, for writers that insist on a file extension."""
    return path.parent / f".{path.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}"


def remove_stale_temporaries(directory: str | Path) -> list[Path]:
    """Remove the temporaries (``.NAME.KIND-PID-…``, files or directories) that writers killed outright left in
    ``directory`` — a SIGKILL, or a pool worker that never got SIGTERM's unwinding — and return them. A temporary
    whose writer's process still runs is kept, so a second writer in the same directory is never cut short (on
    this machine: a writer on another host sharing the directory is not seen)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for entry in sorted(directory.glob(".*-*-*")):
        pid = _temporary_writer_pid(entry.name)
        if pid is None or _process_runs(pid):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def _temporary_writer_pid(name: str) -> int | None:
    """The writer's process id in a :func:`temp_sibling` name (``.NAME.KIND-PID-HEX8``), else None."""
    stem, _, tail = name.rpartition("-")
    head, _, pid = stem.rpartition("-")
    kind = head.rpartition(".")[2]
    if not (name.startswith(".") and kind in ("tmp", "old") and pid.isdigit() and len(tail.split(".")[0]) == 8):
        return None
    return int(pid)


def _process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def fsync_file(path: str | Path) -> None:
    """Flush ``path``'s content to disk (a rename after a crash must not expose an empty file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened for fsync
        fsync_file(path)


def commit_file(tmp: str | Path, path: str | Path) -> Path:
    """fsync ``tmp`` and rename it onto ``path``: for writers that build a file over time (the HDF5 writer)."""
    fsync_file(tmp)
    os.replace(tmp, path)
    _fsync_dir(Path(path).parent)
    return Path(path)


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """``with atomic_write(p) as fh: fh.write(...)`` — ``p`` appears complete or not at all.

    ``mode`` is ``"w"`` (text) or ``"wb"`` (bytes). The file gets the user's umask like any new file.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary file path for writers that open files themselves (h5py, ``np.savez``, matplotlib).

    The temporary keeps ``path``'s suffix (some writers append one otherwise); it is fsync'ed and renamed
    onto ``path`` when the block ends normally, removed when it raises.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path, suffix=path.suffix)
    try:
        yield tmp
        commit_file(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | Path, overwrite: bool = True) -> Iterator[Path]:
    """A temporary directory that becomes ``path`` when the block ends normally (files in it are fsync'ed).

    An existing ``path`` is replaced only when ``overwrite`` is true: it is moved aside, the new directory
    renamed in, and the old one deleted — so ``path`` is never missing while a reader looks.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    tmp.mkdir()
    umask = _umask()
    try:
        yield tmp
        for file in tmp.rglob("*"):
            if file.is_file():
                # some writers (safetensors) create private 0600 files; a result is meant to be shared, so every
                # file gets what any new file gets under the user's umask
                os.chmod(file, 0o666 & ~umask)
                fsync_file(file)
        _swap_in(tmp, path, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(path.parent)


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def _swap_in(tmp: Path, out: Path, overwrite: bool) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    if not overwrite:
        raise FileExistsError(f"{out} already exists")
    old = temp_sibling(out, "old")
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)
        raise
    if old.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically; returns the path."""
    with atomic_write(path) as fh:
        fh.write(text)
    return Path(path)


def write_json_atomic(path: str | Path, data: Any, indent: int | None = 2, sort_keys: bool = False) -> Path:
    """``data`` as JSON (through :func:`to_json_safe`) written atomically, with a final newline."""
    return write_text_atomic(path, json.dumps(to_json_safe(data), indent=indent, sort_keys=sort_keys) + "\n")


def read_manifest_json(directory: str | Path, name: str, fmt: str, version_key: str, versions: tuple[int, ...],
                       what: str, hint: str = "") -> dict[str, Any]:
    """A versioned ``manifest.json``-style file of a directory, checked: the directory and the file present, valid
    JSON, the expected ``format`` and one of ``versions`` under ``version_key`` — else a one-line error saying what
    ``what`` needs, ending in ``hint`` (what to do, e.g. "rebuild the graph with 'r2a graph build'") when given.
    The one reader of every manifest r2a writes; a format whose older versions stay readable upgrades the dict
    it returns."""
    from r2a_core.errors import R2AInputError

    directory = Path(directory)
    file = directory / name
    then = f"; {hint}" if hint else ""
    if not directory.is_dir():
        raise R2AInputError(f"{directory}: not {what} (not a directory, no {name}){then}")
    if not file.is_file():
        raise R2AInputError(f"{directory}: not {what} (no {name}){then}")
    try:
        manifest = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise R2AInputError(f"{file}: not valid JSON ({err}){then}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise R2AInputError(f"{file}: format is {found!r}, expected {fmt!r}{then}")
    if manifest.get(version_key) not in versions:
        raise R2AInputError(f"{file}: format version {manifest.get(version_key)!r} is not supported (this r2a reads "
                            f"{fmt} version {', '.join(map(str, versions))})"
                            + (f"; upgrade r2a or {hint}" if hint else ""))
    return manifest


def to_json_safe(value: Any) -> Any:
    """Plain JSON types only: NaN/inf → None, numpy scalars/arrays → Python, tuples → lists, paths → str."""
    if isinstance(value, Mapping):
        return {str(k): to_json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [to_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value


#: what :func:`check_output_path` checks a path for: a file written there, or a directory made (or filled) there
OUTPUT_KINDS = ("file", "dir")


def check_output_path(path: str | Path, kind: str, name: str = "") -> Path:
    """Refuse, before anything is written, an output path that no writer here could complete; return it as a Path.

    ``kind="dir"``: the path must not be an existing file, nor lie under one (some parent a file); ``kind="file"``:
    it must not be an existing directory, nor lie under a file. A path that does not exist yet is fine: the writers
    make its parents. Nothing is created or changed. The error is a one-line :class:`R2AInputError` that starts
    with ``name`` (the flag, e.g. ``--out``) and the path, and says what was expected. The ``r2a`` command checks
    every output argument with it before the command runs (r2a_cli/outputs.py).
    """
    from r2a_core.errors import R2AInputError

    if kind not in OUTPUT_KINDS:
        raise ValueError(f"kind must be one of {OUTPUT_KINDS}, got {kind!r}")
    path = Path(path)
    label = f"{name} {path}" if name else str(path)
    expected = "a directory" if kind == "dir" else "a file"
    try:
        if kind == "dir" and path.exists() and not path.is_dir():
            raise R2AInputError(f"{label}: is a file; expected a directory (a new one, or one to write into)")
        if kind == "file" and path.is_dir():
            raise R2AInputError(f"{label}: is a directory; expected a file (a new one, or one to replace)")
        blocker = next((parent for parent in path.parents if parent.exists()), None)
    except OSError as err:  # e.g. a parent that may not be searched
        raise R2AInputError(f"{label}: cannot be checked ({err.strerror or err}); expected {expected} path "
                            "that can be written") from None
    if blocker is not None and not blocker.is_dir():
        raise R2AInputError(f"{label}: {blocker} is a file, not a directory; expected {expected} path whose "
                            "parents are directories")
    return path


def link_or_copy(src: str | Path, dst: str | Path) -> None:
    """Hard-link ``src`` to ``dst`` (same filesystem), else copy it: carries a file into a new checkpoint dir."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


__all__ = ["OUTPUT_KINDS", "atomic_dir", "atomic_path", "atomic_write", "check_output_path", "commit_file",
           "fsync_file", "link_or_copy", "read_manifest_json", "remove_stale_temporaries", "temp_sibling",
           "to_json_safe", "write_json_atomic", "write_text_atomic"]
