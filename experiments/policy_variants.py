"""Experimental ways to run built-in VLA checkpoints, for the benchmark's callable adapter.

    R2A_CHECKPOINTS=r2a/assets/builtin_vla,runs/train/f2,runs/train/f3 PYTHONPATH=experiments \
        r2a bench run --config configs/bench/clean.yaml --policy callable:policy_variants:ensemble ...
    R2A_CHECKPOINTS=runs/train/mh4 PYTHONPATH=experiments r2a bench run ... --policy callable:policy_variants:coherent

``ensemble`` executes the mean of several checkpoints' chunks (a prediction ensemble, unlike the weight average of
``r2a policy average``). ``coherent`` runs a checkpoint trained with several hypotheses (``action_modes`` > 1) and
picks, at each query, the hypothesis closest to what the previous chunk planned for the same steps (the backward
criterion of Bidirectional Decoding, Liu et al. 2024) instead of the best-scored one. Both execute 8 actions per
query, as the shipped checkpoint does. Each benchmark worker process loads the checkpoints once.
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from r2a.vla.policy import BuiltinVLAPolicy

EXECUTED = 8
_previous: dict = {}


@lru_cache(maxsize=1)
def _policies() -> tuple[BuiltinVLAPolicy, ...]:
    paths = os.environ.get("R2A_CHECKPOINTS", "r2a/assets/builtin_vla").split(",")
    return tuple(BuiltinVLAPolicy(path) for path in paths)


def ensemble(obs: dict) -> np.ndarray:
    chunks = [policy.infer(obs)["actions"] for policy in _policies()]
    return np.mean(chunks, axis=0)[:EXECUTED].astype(np.float32)


def coherent(obs: dict) -> np.ndarray:
    policy = _policies()[0]
    step = int(obs["state/step"])
    if step == 0:
        _previous.clear()
    chunks, scores, _ = policy.predict(obs)  # (K, chunk, 7) in the action space, (K,)
    if _previous:
        planned = _previous["chunk"][step - _previous["step"]:]
        gap = np.abs(chunks[:, :len(planned)] - planned[None])  # (K, overlap, 7)
        best = int((gap[..., :6].mean(axis=(1, 2)) + gap[..., 6].mean(axis=1)).argmin())  # motion + gripper
    else:
        best = int(scores.argmax())
    chunk = chunks[best]
    _previous.update(chunk=chunk, step=step)
    return chunk[:EXECUTED].astype(np.float32)


if __name__ == "__main__":
    print(__doc__)  # a module for --policy callable:policy_variants:NAME; run directly, it says how
