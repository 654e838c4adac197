"""Where a result came from: the source commit, package versions, the machine, the command line, and content
hashes of the files a policy loaded (docs/architecture.md, "On-disk formats").

Recorded next to every benchmark result (``run.json``, ``summary.json``) and meant for every other result r2a
writes (checkpoints, gates). Every field is best effort: what cannot be found is ``None``, never an error, so
that recording provenance can never fail a run.

The artifact convention: a policy may expose ``metadata["artifacts"]``, a mapping role → ``{"path": str,
"sha256": str}`` of every checkpoint, graph or index it loaded (``path`` as the policy was given it);
wrappers forward their inner policy's. :func:`sha256_path` computes the digest of a file or a directory: the one
content hash of the project (a file's is what ``sha256sum`` prints; graphs, checkpoints, image statistics and
benchmark runs record it for the files they come from).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

if TYPE_CHECKING:
    from r2a_core.types import Episode

#: the project's source tree (the parent of the r2a_core package): a git checkout when installed editable
SOURCE_ROOT = Path(__file__).resolve().parents[1]
#: label → distribution names to try (the first installed one is reported)
PACKAGES: dict[str, tuple[str, ...]] = {
    "r2a": ("r2a",), "robosuite": ("robosuite",), "mujoco": ("mujoco",), "torch": ("torch",),
    "numpy": ("numpy",), "faiss": ("faiss-cpu", "faiss-gpu-cu12", "faiss-gpu", "faiss"),
    "torch_geometric": ("torch-geometric", "torch_geometric"),
}
#: the versions that decide whether two simulator runs can be compared episode by episode
SIMULATOR_PACKAGES = ("robosuite", "mujoco")
#: the CPU flags numerical kernels dispatch on (recorded as ``machine.cpu_features``)
CPU_FEATURES = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "avx512_fp16", "amx_tile")
_CHUNK = 1 << 20


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of one file's bytes: what ``sha256sum FILE`` prints."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_dir(path: str | Path) -> str:
    """Hex sha256 of a directory's content: of the lines ``relative/path<NUL>sha256-of-file<LF>`` of every
    regular file under it, sorted by path. Renaming, adding, removing or changing a file changes it; file
    times and permissions do not. Hidden temporaries of an interrupted atomic write (``.name.tmp-…``) count too,
    so hash a directory only when nothing is writing it."""
    root = Path(path)
    digest = hashlib.sha256()
    for file in sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.relative_to(root).as_posix()):
        digest.update(f"{file.relative_to(root).as_posix()}\0{sha256_file(file)}\n".encode())
    return digest.hexdigest()


def sha256_path(path: str | Path) -> str:
    """:func:`sha256_file` of a file, :func:`sha256_dir` of a directory (a LeRobot dataset is one)."""
    return sha256_dir(path) if Path(path).is_dir() else sha256_file(path)


def legacy_source_sha256(path: str | Path) -> str:
    """The digest r2a recorded for a demonstration source until issue 47 — in graph manifests (``sources``), VLA
    checkpoints (``provenance.sources``), retriever checkpoints (``provenance.demos``) and image statistics
    (``sources[].fingerprint``), the shipped assets' included: the sha256 of a file's *name* followed by its bytes
    (of a directory: each file's relative path followed by its bytes, files sorted), not what ``sha256sum`` prints.
    Nothing writes it any more; readers that compare a recorded source digest with a file accept it beside
    :func:`sha256_path` (:func:`source_digests`), so the files r2a wrote before keep their meaning."""
    root = Path(path)
    digest = hashlib.sha256()
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(root) if root.is_dir() else file.name).encode())
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(_CHUNK), b""):
                digest.update(block)
    return digest.hexdigest()


def source_digests(path: str | Path) -> tuple[str, str]:
    """The digests a record may hold for a demonstration source: ``(sha256_path, legacy_source_sha256)``."""
    return sha256_path(path), legacy_source_sha256(path)


def episodes_sha256(episodes: Iterable[Episode]) -> str:
    """Hex sha256 of what a list of :class:`~r2a_core.types.Episode` holds — every field, array and image, in order
    — not of the file it was read from. Two files with the same episodes give the same digest whatever their layout
    (an HDF5 file's bytes depend on the order its objects were written); a training run's resume compares it where
    file bytes differ (re-collected demos on a new machine)."""
    digest = hashlib.sha256()

    def put(name: str, value: Any) -> None:
        if value is None:
            digest.update(f"{name}:None;".encode())
            return
        array = np.ascontiguousarray(value)
        digest.update(f"{name}:{array.dtype.str}{array.shape};".encode())
        digest.update(array if array.size else b"")

    for number, ep in enumerate(episodes):
        header = {"task": ep.task, "instruction": ep.instruction, "success": bool(ep.success), "meta": ep.meta}
        digest.update(f"episode {number}:{json.dumps(header, sort_keys=True, default=str)};".encode())
        for name in ("actions", "ee_pos", "ee_quat", "gripper", "joint_pos", "gripper_qpos", "sim_states",
                     "robot_states", "label_chunks"):
            put(name, getattr(ep, name))
        for camera in sorted(ep.images):
            put(f"images/{camera}", ep.images[camera])
    return digest.hexdigest()


def artifact(path: str | Path) -> dict[str, str]:
    """The ``{"path", "sha256"}`` entry of a policy's ``metadata["artifacts"]`` for ``path``."""
    return {"path": str(path), "sha256": sha256_path(path)}


def policy_artifacts(policy: Any) -> dict[str, dict[str, str]]:
    """A policy's ``metadata["artifacts"]`` (role → path and sha256), or ``{}`` when it declares none."""
    metadata = getattr(policy, "metadata", None)
    found = metadata.get("artifacts") if isinstance(metadata, Mapping) else None
    return {str(role): dict(entry) for role, entry in found.items()} if isinstance(found, Mapping) else {}


def artifact_digests(found: Any) -> dict[str, str]:
    """role → sha256 of a ``metadata["artifacts"]`` mapping (``{}`` when there is none or it is not a mapping; an
    entry without a digest reads ``""``): the one view every check that asks "does this policy still load the same
    files?" compares — a resumed fit, a reconnecting client, a cache key, a resumed run, a worker."""
    if not isinstance(found, Mapping):
        return {}
    return {str(role): str(entry.get("sha256") or "") for role, entry in found.items() if isinstance(entry, Mapping)}


def digests_shown(digests: Mapping[str, str], empty: str = "none") -> str:
    """``role 0123456789ab, …`` (roles sorted, each digest's first 12 characters; ``(no sha256)`` for an entry without
    one): how messages show :func:`artifact_digests`."""
    return ", ".join(f"{role} {digest[:12] or '(no sha256)'}" for role, digest in sorted(digests.items())) or empty


def git_state(root: str | Path = SOURCE_ROOT) -> dict[str, Any]:
    """``{"commit", "dirty"}`` of the git checkout at ``root``; both None when it is not one (an installed
    wheel) or git is missing. ``dirty``: tracked changes or untracked files not ignored by ``.gitignore``. Read
    with ``--no-optional-locks``: it never writes the checkout's index."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args], capture_output=True,
                                  text=True, timeout=10, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    inside = git("rev-parse", "--show-toplevel")
    if inside is None or Path(inside.strip()).resolve() != Path(root).resolve():
        return {"commit": None, "dirty": None}  # not a checkout of its own (e.g. site-packages inside one)
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")  # untracked files count: code the commit does not have
    return {"commit": commit.strip() if commit else None, "dirty": bool(status.strip()) if status is not None else None}


def package_versions(labels: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (by :data:`PACKAGES` label or distribution name); None when absent."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for label in labels:
        versions[label] = None
        for dist in PACKAGES.get(label, (label,)):
            try:
                versions[label] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def cpu_model() -> str | None:
    """The CPU model from /proc/cpuinfo (``platform.processor()`` is empty on most Linux systems)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_features() -> str | None:
    """The instruction-set extensions of :data:`CPU_FEATURES` this CPU has (from /proc/cpuinfo), space-separated.

    torch (ATen, oneDNN, MKL), numpy and glibc's libm choose their kernels by these, so two machines that differ
    here compute other last bits and replay other trajectories; a VM's model name alone ("Intel(R) Xeon(R)
    Processor") does not tell (docs/architecture.md, "Reproducibility")."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return " ".join(f for f in CPU_FEATURES if f in flags)
    except OSError:
        pass
    return None


def gpu_name() -> str | None:
    """The first CUDA device torch sees, or None (no torch, a CPU build, or no device). Imports torch only when
    it is installed."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - a broken driver must not fail a run that records where it ran
        return None


def machine_info() -> dict[str, Any]:
    """The machine: host name, OS, architecture, CPU model and instruction-set features, core count (all and
    usable), GPU."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"hostname": platform.node() or None, "system": f"{platform.system()} {platform.release()}".strip(),
            "arch": platform.machine() or None, "cpu": cpu_model(), "cpu_features": cpu_features(),
            "cores": os.cpu_count(), "cores_usable": usable, "gpu": gpu_name()}


def command_line(argv: Iterable[str] | None = None) -> str:
    """The command line as a shell would need it typed (``sys.argv`` by default)."""
    return shlex.join(list(sys.argv if argv is None else argv))


def collect_provenance(argv: Iterable[str] | None = None) -> dict[str, Any]:
    """Everything above in one JSON-ready dict: ``git``, ``versions``, ``machine``, ``command``, ``cwd``."""
    return {"git": git_state(), "versions": package_versions(), "machine": machine_info(),
            "command": command_line(argv), "cwd": os.getcwd()}


def provenance_differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """What makes two results not comparable episode by episode: a different commit (or a dirty tree),
    simulator versions, or machine (CPU, its instruction-set features when both recorded them, cores, GPU). One
    line per difference; empty when they agree or when either side has no provenance."""
    if not a or not b:
        return []
    out = []
    ga, gb = a.get("git") or {}, b.get("git") or {}
    if (ga.get("commit"), ga.get("dirty")) != (gb.get("commit"), gb.get("dirty")):
        out.append(f"git commit {_commit(ga)} vs {_commit(gb)}")
    va, vb = a.get("versions") or {}, b.get("versions") or {}
    out += [f"{name} {va.get(name)} vs {vb.get(name)}" for name in SIMULATOR_PACKAGES if va.get(name) != vb.get(name)]
    ma, mb = a.get("machine") or {}, b.get("machine") or {}
    out += [f"machine {key} {ma.get(key)!r} vs {mb.get(key)!r}" for key in ("cpu", "cores", "gpu")
            if ma.get(key) != mb.get(key)]
    if "cpu_features" in ma and "cpu_features" in mb and ma["cpu_features"] != mb["cpu_features"]:
        out.append(f"machine cpu_features {ma['cpu_features']!r} vs {mb['cpu_features']!r}")
    return out


def _commit(git: Mapping[str, Any]) -> str:
    commit = git.get("commit")
    return "unknown" if not commit else commit[:12] + (" (dirty)" if git.get("dirty") else "")


__all__ = ["PACKAGES", "SIMULATOR_PACKAGES", "artifact", "artifact_digests", "collect_provenance", "command_line",
           "cpu_model", "digests_shown", "git_state", "gpu_name", "machine_info", "package_versions",
           "policy_artifacts", "provenance_differences", "legacy_source_sha256", "sha256_dir", "sha256_file",
           "sha256_path", "source_digests"]
