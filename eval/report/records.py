"""Reading benchmark records: ``results.jsonl`` (or a published run's ``results.jsonl.gz``) → validated episode
records, the last record of each job, and :class:`Jobs`, the valid records indexed by job with the clean/shifted
pairings every table is built on."""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.schema import CLEAN, EPISODE_SCHEMA, EPISODE_SCHEMA_VERSIONS, JOB_FIELDS
from r2a_core.errors import R2AInputError

log = logging.getLogger(__name__)

REQUIRED_FIELDS = (*JOB_FIELDS, "success")

Record = Mapping[str, Any]
JobKey = tuple[str, str, str, int, int]


def load_records(path: Path, dedupe: bool = True) -> list[dict[str, Any]]:
    """Read ``results.jsonl`` (or a published ``results.jsonl.gz``: :func:`read_records_text`): one episode record per
    line, the last record of a job wins (``dedupe=False``: every record in file order, for files whose jobs are told
    apart by more than the job key — calibration).

    A killed run can leave a truncated last line: it is skipped with a warning (the job is simply re-run on
    resume). A malformed line elsewhere, a record of another schema or of an unknown ``schema_version`` raises
    :class:`R2AInputError` naming the file and line.
    """
    path = Path(path)
    lines = read_records_text(path).splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == last:
                log.warning("%s:%d: skipping a truncated last record (a killed run?): %s", path, i + 1, exc.msg)
                continue
            raise R2AInputError(f"{path}:{i + 1}: not a JSON record ({exc.msg}); fix or delete that line") from exc
        problem = validate_record(rec)
        if problem:
            raise R2AInputError(f"{path}:{i + 1}: {problem}")
        records.append(rec)
    if not dedupe:
        return records
    unique, replaced = dedupe_records(records)
    log.info("%s: %d records, %d jobs (%d superseded by a later record)", path, len(records), len(unique), replaced)
    return unique


def read_records_text(path: Path) -> str:
    """The text of a records file: ``*.gz`` decompressed (a published run's, :mod:`eval.publish`), else as it is."""
    path = Path(path)
    if path.suffix != ".gz":
        return path.read_text(encoding="utf-8")
    try:
        return gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, zlib.error) as exc:  # gzip raises BadGzipFile (an OSError) or EOFError when cut short
        raise R2AInputError(f"{path}: not a complete gzip file ({exc}); publish the run again "
                            "('r2a bench publish DIR' from its results.jsonl)") from exc


def validate_record(rec: Any) -> str | None:
    """What is wrong with an episode record, or None if it can be used."""
    if not isinstance(rec, dict):
        return f"expected a JSON object, got {type(rec).__name__}"
    if rec.get("schema") != EPISODE_SCHEMA:
        return f"not an episode record: schema is {rec.get('schema')!r}, expected {EPISODE_SCHEMA!r}"
    version = rec.get("schema_version")
    if version not in EPISODE_SCHEMA_VERSIONS:
        return (f"unknown {EPISODE_SCHEMA} schema_version {version!r} (this r2a reads "
                f"{sorted(EPISODE_SCHEMA_VERSIONS)}); upgrade r2a or re-run the benchmark with this version")
    missing = [field for field in REQUIRED_FIELDS if field not in rec]
    if missing:
        return f"episode record lacks {', '.join(missing)}"
    if rec["factor"] == CLEAN and rec["level"] != 0:
        return f"a clean run must have level 0, got level {rec['level']!r}"
    return None


def job_key(rec: Record) -> JobKey:
    """The runner's job key: (policy, task, factor, level, episode)."""
    return (str(rec["policy"]), str(rec["task"]), str(rec["factor"]), int(rec["level"]), int(rec["episode"]))


def dedupe_records(records: Iterable[Record]) -> tuple[list[dict[str, Any]], int]:
    """Keep the last record of each job (a resumed or re-run job appends a newer one); also return how many
    records were superseded."""
    by_job: dict[JobKey, dict[str, Any]] = {}
    n = 0
    for rec in records:
        n += 1
        key = job_key(rec)
        by_job.pop(key, None)
        by_job[key] = dict(rec)
    return list(by_job.values()), n - len(by_job)


class Jobs:
    """The valid records indexed by job, and the pairings between them."""

    def __init__(self, records: Sequence[dict[str, Any]]):
        self.all = records
        self.valid = [rec for rec in records if rec.get("error") is None]
        self.any_by_job = {job_key(rec): rec for rec in records}
        self.by_job = {job_key(rec): rec for rec in self.valid}
        self.cells: dict[tuple[str, str, str, int], list[dict[str, Any]]] = defaultdict(list)
        for key in sorted(self.by_job):
            self.cells[key[:4]].append(self.by_job[key])
        self.policies = sorted({rec["policy"] for rec in records})
        self.tasks = sorted({rec["task"] for rec in records})
        self.factors = sorted({rec["factor"] for rec in records if rec["factor"] != CLEAN})

    def clean(self, policy: str, task: str, episode: int) -> dict[str, Any] | None:
        return self.by_job.get((policy, task, CLEAN, 0, episode))

    def cell(self, policy: str, task: str, factor: str, level: int = 0) -> list[dict[str, Any]]:
        """The valid records of one condition (or of the clean run), in episode order."""
        return self.cells.get((policy, task, factor, level), [])

    def clean_cells(self) -> list[tuple[str, str]]:
        return sorted({(r["policy"], r["task"]) for r in self.valid if r["factor"] == CLEAN})

    def conditions(self) -> list[tuple[str, str, str, int]]:
        return sorted({job_key(r)[:4] for r in self.valid if r["factor"] != CLEAN})

    def factor_levels(self) -> list[tuple[str, str, int]]:
        return sorted({(p, f, lvl) for p, _, f, lvl in self.conditions()})

    def clean_pairs(self, shifted: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(clean, shifted) record pairs: same policy, task and episode."""
        pairs = [(self.clean(s["policy"], s["task"], int(s["episode"])), s) for s in shifted]
        return [(c, s) for c, s in pairs if c is not None]


def modifies_state(records: Iterable[Record]) -> bool | None:
    """Whether the records' factor changes the simulator state (as the first record that says so), or None."""
    return next((bool(r["modifies_state"]) for r in records if r.get("modifies_state") is not None), None)


__all__ = ["JobKey", "Jobs", "REQUIRED_FIELDS", "Record", "dedupe_records", "job_key", "load_records", "modifies_state",
           "read_records_text", "validate_record"]
