"""What a benchmark run checks before its first episode, so that a mistake costs seconds and writes nothing:
every policy is built (or connected to) once, and the optional packages the run will need are importable.

A policy that cannot be built is a one-line :class:`R2AInputError` naming its spec (``r2a bench run`` exits
with code 2); the files the built policy loaded (``metadata["artifacts"]``, r2a_core.provenance) are returned,
for the run's provenance and for the workers, which must load the same ones.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Sequence

from eval.bench_config import BenchConfig
from r2a_core.errors import R2AInputError
from r2a_core.provenance import artifact_digests, digests_shown, policy_artifacts

log = logging.getLogger(__name__)

#: module → (the flag that needs it, the extra that installs it)
OPTIONAL = {"ray": ("--executor ray", "ray"), "wandb": ("--wandb", "wandb")}


def require_module(name: str) -> Any:
    """Import an optional dependency of a flag, or fail with the ``pip install`` line that brings it."""
    flag, extra = OPTIONAL[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        raise R2AInputError(f"{flag} needs {name}, which is not installed: pip install 'r2a[{extra}]'") from None


def build_policies(specs: Sequence[str], config: BenchConfig) -> dict[str, dict[str, dict[str, str]]]:
    """Build every policy once, for the config's first task; return spec → the artifacts it loaded.

    The policies get a camera-less simulator (the scripted experts bind to one); a server policy connects, so a
    server that is down fails here. Each policy is closed again (its connection released) right after.
    """
    from eval.diagnostics import register_diagnostics
    from r2a.policies import make_policy

    register_diagnostics()
    if config.liberoplus_tasks:  # LIBERO-Plus's data, before any simulator is built (one line naming the install)
        from sim.envs.liberoplus_tasks import load_index

        index = load_index()
        for entry in config.liberoplus_tasks:
            index.get(str(entry).partition("/")[2])
    loaded = {}
    sim = _probe_sim(config)
    try:
        for spec in specs:
            try:
                policy = make_policy(spec, sim, config.seed)
            except Exception as err:  # noqa: BLE001 - whatever breaks, the user gets one line naming the spec
                raise R2AInputError(f"policy '{spec}' cannot be used: {_one_line(err)}") from None
            loaded[spec] = policy_artifacts(policy)
            check_split(spec, loaded[spec], config)
            close = getattr(policy, "close", None)
            if callable(close):
                close()
            log.info("policy %s: built; loaded %s", spec, digests_shown(artifact_digests(loaded[spec])))
    finally:
        sim.close()
    return loaded


#: artifact roles whose checkpoints record the seeds they were trained on
TRAINED_ROLES = ("retriever", "gate")


def _trained_manifest(role: str, path: str) -> dict[str, Any]:
    """The manifest of a ``role`` checkpoint, read by its format's reader."""
    if role == "retriever":
        from r2a.retrieval.checkpoint import read_manifest

        return read_manifest(path)
    from r2a.wrapper.gate_checkpoint import read_gate_manifest

    return read_gate_manifest(path)


def check_split(spec: str, artifacts: dict[str, dict[str, str]], config: BenchConfig) -> None:
    """Refuse to score ``spec`` on seeds its retriever or gate checkpoint was trained on (one line, exit 2)."""
    from pathlib import Path

    run = {config.seed + episode for _, episode, _, _ in config.planned()}
    for role in TRAINED_ROLES:
        entry = artifacts.get(role)
        if not entry or not entry.get("path") or not (Path(entry["path"]) / "manifest.json").is_file():
            continue
        seen = run & _seeds_in(_trained_manifest(role, entry["path"]).get("provenance") or {})
        if seen:
            raise R2AInputError(f"policy '{spec}': its {role} checkpoint ({entry['path']}) was trained on "
                                f"{len(seen)} of this run's seeds (e.g. {min(seen)}); score it on seeds it never saw")


def _seeds_in(provenance: Any) -> set[int]:
    """Every integer under a ``seeds`` key anywhere in a checkpoint's provenance."""
    found: set[int] = set()
    if isinstance(provenance, dict):
        for key, value in provenance.items():
            if key == "seeds" and isinstance(value, list):
                found |= {int(v) for v in value if isinstance(v, int)}
            else:
                found |= _seeds_in(value)
    elif isinstance(provenance, list):
        for value in provenance:
            found |= _seeds_in(value)
    return found


def _probe_sim(config: BenchConfig):
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    return make_sim(SimConfig(task=config.tasks[0], cameras=(), image_size=config.image_size))


def _one_line(err: Exception) -> str:
    """The error on one line: a multi-line message (a server's traceback) by its first and last lines."""
    lines = [" ".join(line.split()) for line in str(err).splitlines() if line.strip()] or ["(no message)"]
    text = lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"
    return text if isinstance(err, R2AInputError) else f"{type(err).__name__}: {text}"
