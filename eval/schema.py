"""Names and versions of what the benchmark writes, defined once: readers and writers import them from here."""

from __future__ import annotations

from sim.shifts.base import CLEAN, LEVELS

#: a results directory's files: the episode records (appended), the pinned run, the summary
RESULTS, RUN_FILE, SUMMARY = "results.jsonl", "run.json", "summary.json"
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

__all__ = ["CLEAN", "EPISODE_SCHEMA", "EPISODE_SCHEMA_VERSION", "EPISODE_SCHEMA_VERSIONS", "JOB_FIELDS", "LEVELS",
           "RESULTS", "RUN_FILE", "SUMMARY", "SUMMARY_SCHEMA", "SUMMARY_SCHEMA_VERSION"]
