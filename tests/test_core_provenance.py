"""Provenance: content digests, the git state of a checkout, versions, the machine, and what a policy loaded."""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess

import pytest

from r2a_core.provenance import (
    CPU_FEATURES,
    artifact,
    artifact_digests,
    collect_provenance,
    command_line,
    cpu_features,
    digests_shown,
    episodes_sha256,
    git_state,
    legacy_source_sha256,
    machine_info,
    package_versions,
    policy_artifacts,
    provenance_differences,
    sha256_dir,
    sha256_file,
    sha256_path,
    source_digests,
)


def _tree(root):
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"alpha")
    (root / "sub" / "b.bin").write_bytes(b"\x00\x01")
    return root


def test_file_and_directory_digests(tmp_path):
    root = _tree(tmp_path / "ckpt")
    assert sha256_file(root / "a.txt") == hashlib.sha256(b"alpha").hexdigest()
    lines = "".join(f"{name}\0{hashlib.sha256(data).hexdigest()}\n"
                    for name, data in (("a.txt", b"alpha"), ("sub/b.bin", b"\x00\x01")))
    assert sha256_dir(root) == hashlib.sha256(lines.encode()).hexdigest()
    assert sha256_path(root) == sha256_dir(root) and sha256_path(root / "a.txt") == sha256_file(root / "a.txt")
    assert artifact(root) == {"path": str(root), "sha256": sha256_dir(root)}
    before = sha256_dir(root)
    (root / "a.txt").touch()                                    # times do not count
    assert sha256_dir(root) == before
    (root / "a.txt").rename(root / "c.txt")                     # names do
    assert sha256_dir(root) != before
    (root / "c.txt").rename(root / "a.txt")
    (root / "sub" / "b.bin").write_bytes(b"\x00\x02")           # and content
    assert sha256_dir(root) != before


def test_a_file_digest_is_what_sha256sum_prints(tmp_path):
    path = tmp_path / "demos.hdf5"
    path.write_bytes(bytes(range(256)) * 5000)
    printed = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout.split()[0]
    assert sha256_file(path) == sha256_path(path) == printed


def test_the_legacy_source_digest_is_still_recognized(tmp_path):
    """What graph, VLA and retriever manifests recorded for a demo source until issue 47 (the shipped assets'
    included): the file's name, then its bytes. A reader that compares a recorded source digest with a file accepts
    it beside the plain one (source_digests)."""
    path = tmp_path / "demos.hdf5"
    path.write_bytes(b"episode bytes")
    assert legacy_source_sha256(path) == hashlib.sha256(b"demos.hdf5" + b"episode bytes").hexdigest()
    assert legacy_source_sha256(path) != sha256_file(path)
    assert source_digests(path) == (sha256_file(path), legacy_source_sha256(path))
    root = _tree(tmp_path / "dataset")
    legacy = hashlib.sha256(b"a.txt" + b"alpha" + b"sub/b.bin" + b"\x00\x01").hexdigest()
    assert source_digests(root) == (sha256_dir(root), legacy)


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
                   check=True, capture_output=True)


def test_git_state_of_a_checkout_clean_dirty_and_none(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f.py").write_text("x = 1\n")
    _git(repo, "add", "f.py")
    _git(repo, "commit", "-q", "-m", "first")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert git_state(repo) == {"commit": head.strip(), "dirty": False}
    (repo / "f.py").write_text("x = 2\n")
    assert git_state(repo) == {"commit": head.strip(), "dirty": True}
    (repo / "f.py").write_text("x = 1\n")
    (repo / "new.py").write_text("")                            # untracked code counts as a change
    assert git_state(repo)["dirty"] is True
    (repo / "sub").mkdir()
    assert git_state(repo / "sub") == {"commit": None, "dirty": None}  # inside a checkout, not its top
    assert git_state(tmp_path) == {"commit": None, "dirty": None}      # no checkout at all


def test_versions_machine_and_command_line():
    versions = package_versions()
    assert versions["numpy"] == importlib.metadata.version("numpy") and versions["python"]
    assert set(versions) >= {"robosuite", "mujoco", "torch", "numpy", "faiss", "torch_geometric"}
    assert package_versions(["no-such-package-r2a"])["no-such-package-r2a"] is None
    machine = machine_info()
    assert machine["cores"] >= 1 and set(machine) >= {"cpu", "cores", "gpu"}
    assert command_line(["r2a", "bench", "run", "--set", "tasks=[Lift, Stack]"]) == \
        "r2a bench run --set 'tasks=[Lift, Stack]'"
    full = collect_provenance(["r2a", "x"])
    assert full["command"] == "r2a x" and set(full) == {"git", "versions", "machine", "command", "cwd"}


def test_differences_that_break_episode_pairing():
    a = {"git": {"commit": "a" * 40, "dirty": False}, "versions": {"robosuite": "1.5.2", "mujoco": "3.9.0",
                                                                  "torch": "2.13"},
         "machine": {"cpu": "X", "cores": 2, "gpu": None, "hostname": "one"}}
    assert provenance_differences(a, a) == []
    b = {**a, "versions": {**a["versions"], "torch": "2.14"}, "machine": {**a["machine"], "hostname": "two"}}
    assert provenance_differences(a, b) == []                   # neither torch nor the host name pairs episodes
    c = {"git": {"commit": "b" * 40, "dirty": True}, "versions": {**a["versions"], "mujoco": "3.8.0"},
         "machine": {**a["machine"], "cores": 16, "gpu": "H200"}}
    diffs = provenance_differences(a, c)
    assert diffs[0] == f"git commit {'a' * 12} vs {'b' * 12} (dirty)"
    assert "mujoco 3.9.0 vs 3.8.0" in diffs and "machine cores 2 vs 16" in diffs and len(diffs) == 4
    assert provenance_differences(a, None) == [] and provenance_differences({}, a) == []


def test_cpu_features_tell_apart_machines_with_one_model_name():
    """A VM's generic model name hides the instruction set torch's and libm's kernels dispatch on."""
    features = cpu_features()
    assert features is None or set(features.split()) <= set(CPU_FEATURES)
    assert "cpu_features" in machine_info()
    a = {"machine": {"cpu": "Intel(R) Xeon(R) Processor", "cores": 2, "gpu": None, "cpu_features": "avx2 fma"}}
    b = {"machine": {**a["machine"], "cpu_features": "avx2 fma avx512f"}}
    assert provenance_differences(a, b) == ["machine cpu_features 'avx2 fma' vs 'avx2 fma avx512f'"]
    older = {"machine": {k: v for k, v in a["machine"].items() if k != "cpu_features"}}
    assert provenance_differences(older, b) == []  # a run recorded before the field: nothing to compare


def test_policy_artifacts_convention():
    class Plain:
        metadata = {"policy": "x"}

    class Loaded:
        metadata = {"artifacts": {"graph": {"path": "g", "sha256": "0" * 64}}}

    assert policy_artifacts(object()) == {} and policy_artifacts(Plain()) == {}
    assert policy_artifacts(Loaded()) == {"graph": {"path": "g", "sha256": "0" * 64}}


def test_artifact_digests_are_the_one_view_checks_compare():
    found = {"vla": {"path": "a", "sha256": "a" * 64}, "graph": {"path": "b/", "sha256": "b" * 64},
             "odd": "not an entry", "bare": {"path": "c"}}
    digests = artifact_digests(found)
    assert digests == {"vla": "a" * 64, "graph": "b" * 64, "bare": ""}
    assert artifact_digests({"vla": {"path": "elsewhere", "sha256": "a" * 64}}) == {"vla": "a" * 64}  # path aside
    assert artifact_digests(None) == {} and artifact_digests(["vla"]) == {}
    assert digests_shown(digests) == f"bare (no sha256), graph {'b' * 12}, vla {'a' * 12}"
    assert digests_shown({}) == "none" and digests_shown({}, "none announced") == "none announced"


def test_builtin_vla_declares_its_checkpoint_and_the_guard_forwards_it():
    pytest.importorskip("safetensors")
    from r2a.policies import make_policy
    from r2a.vla.policy import BUILTIN_CHECKPOINT

    policy = make_policy("builtin", None, 0)
    entry = policy_artifacts(policy)["base_checkpoint"]
    assert entry == {"path": str(BUILTIN_CHECKPOINT), "sha256": sha256_dir(BUILTIN_CHECKPOINT)}
    assert policy.metadata is policy.inner.metadata


def test_the_episodes_digest_follows_the_episodes_not_the_file_layout(tmp_path, episodes):
    """The same episodes written in another order are other bytes (an HDF5 file's layout follows the order its
    objects were written) but the same episodes digest; one changed value, a flipped sign of zero included, is
    another digest. A training run resumes on re-collected demos by it (training/vla/train.py: same_sources)."""
    from demos.dataset import load_episodes
    from demos.hdf5_io import HDF5EpisodeWriter

    path = tmp_path / "demos.hdf5"

    def write(order: list[int]) -> tuple[str, str]:
        with HDF5EpisodeWriter(path, {"env_name": "Lift"}) as writer:
            for index in order:
                writer.add(episodes[index], index)
        return sha256_file(path), episodes_sha256(load_episodes(path))

    (bytes_forward, content_forward), (bytes_backward, content_backward) = write([0, 1, 2]), write([2, 1, 0])
    assert bytes_forward != bytes_backward and content_forward == content_backward
    assert episodes_sha256(episodes) == episodes_sha256([*episodes])
    zero = episodes[1].actions[0, 0] = 0.0
    before = episodes_sha256(episodes)
    episodes[1].actions[0, 0] = -zero
    assert episodes_sha256(episodes) != before
    assert episodes_sha256(episodes[:2]) != episodes_sha256(episodes)
