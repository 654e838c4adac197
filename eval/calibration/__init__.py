"""Calibrating the shift levels on the evaluated policy: ``r2a bench calibrate`` (docs/shifts/README.md)."""
