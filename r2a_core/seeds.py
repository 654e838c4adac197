"""The seed rule, stated once (docs/architecture.md, "Seeds"): benchmark test seeds start at ``TEST_SEED_START``;
training, tuning and calibration stay below it; seeds from ``HELD_OUT_SEED_START`` on are reserved for held-out
evaluation and nothing may train, tune or calibrate on them."""

TEST_SEED_START = 100_000
HELD_OUT_SEED_START = 500_000

__all__ = ["HELD_OUT_SEED_START", "TEST_SEED_START"]
