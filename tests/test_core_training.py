"""The training toolkit (r2a_core.training) shared by the VLA, retriever and gate trainers: device choice, the
learning-rate schedule and the one directory rule for wandb runs."""

from __future__ import annotations

import sys
import types

import pytest

from r2a_core.errors import R2AInputError
from r2a_core.training import schedule_progress, training_device, training_wandb_run, warmup_cosine_lr


def test_training_device_names_are_checked():
    torch = pytest.importorskip("torch")

    assert training_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert training_device("cpu", local_rank=3).type == "cpu"  # a local rank only picks among CUDA devices
    with pytest.raises(R2AInputError, match="not a torch device"):
        training_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(R2AInputError, match="no CUDA"):
            training_device("cuda")


def test_the_schedule_warms_up_linearly_then_decays_by_a_cosine_to_its_floor():
    peak, warm, total = 1e-3, 10, 110
    lrs = [warmup_cosine_lr(peak, s, warm, schedule_progress(s, warm, total), floor=1e-5) for s in range(total + 5)]
    assert lrs[0] == pytest.approx(peak / warm) and lrs[warm - 1] == pytest.approx(peak)
    assert lrs[warm] == pytest.approx(peak)  # the cosine starts at the peak
    assert lrs[warm + 50] == pytest.approx(1e-5 + (peak - 1e-5) / 2)  # half way: half way down
    assert all(a >= b for a, b in zip(lrs[warm:], lrs[warm + 1:]))
    assert lrs[total] == lrs[-1] == pytest.approx(1e-5)  # past the end it stays at the floor
    assert warmup_cosine_lr(peak, 200, warm, 1.0) == 0.0  # floor 0 by default
    assert warmup_cosine_lr(peak, 5, 0, 0.0) == peak  # no warm-up


def test_progress_by_time_when_a_time_limit_is_further_along():
    assert schedule_progress(60, 10, 110) == pytest.approx(0.5)
    assert schedule_progress(60, 10, 110, elapsed_s=45.0, time_limit_s=60.0) == pytest.approx(0.75)
    assert schedule_progress(60, 10, 110, elapsed_s=10.0, time_limit_s=60.0) == pytest.approx(0.5)
    assert schedule_progress(60, 10, 110, elapsed_s=999.0, time_limit_s=60.0) == 1.0
    assert schedule_progress(60, 10, 110, elapsed_s=999.0) == pytest.approx(0.5)  # no limit: steps only
    assert schedule_progress(3, 0, 1) == 1.0


def test_a_wandb_run_keeps_its_files_beside_the_checkpoint(tmp_path, monkeypatch):
    calls = []
    fake = types.ModuleType("wandb")
    fake.init = lambda **kw: calls.append(kw) or "run"
    monkeypatch.setitem(sys.modules, "wandb", fake)
    out = tmp_path / "runs" / "gate-a"
    assert training_wandb_run("r2a-gate", out, {"lr": 0.1}, None) is None
    assert training_wandb_run("r2a-gate", out, {"lr": 0.1}, "disabled") is None
    assert not calls
    assert training_wandb_run("r2a-gate", out, {"lr": 0.1}, "offline") == "run"
    assert calls == [{"project": "r2a-gate", "name": "gate-a", "mode": "offline", "dir": str(tmp_path / "runs"),
                      "config": {"lr": 0.1}}]
    assert (tmp_path / "runs").is_dir() and not out.exists()  # the checkpoint directory is the trainer's to write
