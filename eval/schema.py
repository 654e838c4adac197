"""Names and versions of what the benchmark writes, defined once: readers and writers import them from here."""

from __future__ import annotations

from pathlib import Path

from sim.shifts.base import CLEAN, LEVELS

#: a results directory's files: the episode records (appended), the pinned run, the summary
RESULTS, RUN_FILE, SUMMARY = "results.jsonl", "run.json", "summary.json"
#: a published results directory's records (``r2a bench publish``, :mod:`eval.publish`): the same lines, gzipped
RESULTS_GZ = RESULTS + ".gz"
#: one line of ``results.jsonl``: one episode of one job
EPISODE_SCHEMA = "r2a.bench.episode"
#: the version the runner writes (2: the ``r2a`` and ``harmonize`` summaries carry a per-query ``trace``)
EPISODE_SCHEMA_VERSION = 2
#: episode record versions the report reads
EPISODE_SCHEMA_VERSIONS = frozenset({1, 2})
#: ``summary.json``
SUMMARY_SCHEMA = "r2a.bench.summary"
SUMMARY_SCHEMA_VERSION = 2  # 2: uplift per factor (level null) and on clean; the overall row is factor "all"; headline
#: the fields that key a job, in the order of :attr:`eval.episode_job.Job.key`
JOB_FIELDS = ("policy", "task", "factor", "level", "episode")


def results_file(run_dir: str | Path) -> Path:
    """The episode records of a results directory, to read: the one place a reader gets their path from.

    ``results.jsonl`` in a run being written (the runner and ``r2a bench merge`` append to it), ``results.jsonl.gz``
    in a published one (:mod:`eval.publish`); :func:`eval.report.load_records` reads either. A directory with both,
    or with neither, is a one-line :class:`R2AInputError` saying what to do.
    """
    from r2a_core.errors import R2AInputError

    run_dir = Path(run_dir)
    plain, packed = run_dir / RESULTS, run_dir / RESULTS_GZ
    if plain.is_file() and packed.is_file():
        raise R2AInputError(f"{run_dir}: holds both {RESULTS} and {RESULTS_GZ}, so which records count is unclear; "
                            f"an interrupted 'r2a bench publish {run_dir}' leaves both: run it again (it starts "
                            f"from {RESULTS}), else delete the one that is out of date")
    if packed.is_file():
        return packed
    if plain.is_file():
        return plain
    raise R2AInputError(f"{plain}: no such file (nor {RESULTS_GZ}, a published run's); {run_dir} is not a results "
                        "directory of 'r2a bench run' or 'r2a bench merge'")


__all__ = ["CLEAN", "EPISODE_SCHEMA", "EPISODE_SCHEMA_VERSION", "EPISODE_SCHEMA_VERSIONS", "JOB_FIELDS", "LEVELS",
           "RESULTS", "RESULTS_GZ", "RUN_FILE", "SUMMARY", "SUMMARY_SCHEMA", "SUMMARY_SCHEMA_VERSION",
           "results_file"]
