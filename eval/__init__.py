"""The built-in shift benchmark: pairing, stage tracking, metrics, statistics, the resumable runner, reports,
and performance benchmarks. Nothing imports it except the ``r2a`` command; the simulator and the shift factors
it runs are in :mod:`sim`."""
