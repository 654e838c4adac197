"""Every YAML config the project ships loads into its typed config and validates: a typo in a field name or a
value of the wrong type in configs/ fails here, not hours into `make results`."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.bench_config import BenchConfig
from eval.calibration.config import CalibrationConfig
from gating.config import GateTrainConfig
from r2a.wrapper.config import R2AConfig, resolve_path
from training.retriever.config import RetrieverTrainConfig
from training.vla.config import TrainConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

#: the bench configs that are runs (factors.yaml holds levels, calibration.yaml the calibration's settings)
BENCH_RUNS = sorted(p for p in (CONFIGS / "bench").glob("*.yaml") if p.stem not in ("factors", "calibration"))
#: diagnostics that run on training seeds on purpose (their policies read the simulator's privileged state)
TRAINING_SEED_RUNS = ("headroom", "libero_strong_headroom")


@pytest.mark.parametrize("path", sorted((CONFIGS / "r2a").glob("*.yaml")), ids=lambda p: p.name)
def test_r2a_configs_load_and_name_shipped_assets(path):
    config = R2AConfig.from_yaml(path)
    config.validate()
    for asset in (config.retriever, config.gate.checkpoint, config.gate.image_stats, config.harmonize.image_stats):
        assert asset is None or resolve_path(asset).exists(), f"{path.name} names {asset}, which is not shipped"


@pytest.mark.parametrize("path", BENCH_RUNS, ids=lambda p: p.name)
def test_bench_configs_load_with_test_seeds(path):
    config = BenchConfig.from_yaml(path)
    if path.stem in TRAINING_SEED_RUNS:
        assert config.seed + config.episodes <= 100000, f"{path.name}: a diagnostic stays below the test seeds"
    else:
        assert config.seed >= 100000, f"{path.name}: benchmark seeds start at 100000"
    assert config.tasks and config.episodes >= 1


@pytest.mark.parametrize("cls, relative", [
    (CalibrationConfig, "bench/calibration.yaml"),
    (GateTrainConfig, "gate/default.yaml"),
    (RetrieverTrainConfig, "retriever/default.yaml"),
    (TrainConfig, "policy/builtin.yaml"),
])
def test_training_configs_load(cls, relative):  # graph/default.yaml: tests/test_graph_config.py
    assert isinstance(cls.from_yaml(CONFIGS / relative), cls)
