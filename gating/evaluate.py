"""Offline: does the learned gate's blend beat the base chunk and the best constant blend, per shift?

On gate data built from held-out states (``r2a gate data`` on demos and rollouts no gate or retriever trained
on), per (kind, condition): the error against the expert's chunk of the base chunk, the reference, the best
constant blend of the gate's training split (``r2a-fixed``), and the learned blend — translation in mm and rotation
in degrees per executed step, 95 % bootstrap intervals over episodes — and the learned S per motion dimension.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

CHUNKS = ("base", "reference", "fixed", "gate")


def evaluate_gate(gate_dir: str | Path, data_paths: Sequence[str | Path], n_boot: int = 2000,
                  seed: int = 0, validation_only: bool = False) -> list[dict[str, Any]]:
    """Rows per (kind, condition); ``validation_only``: the data are the gate's own training files, and only the
    episodes its training held out (every ``holdout_every``-th) are scored."""
    import torch

    from gating.data import load_gate_data
    from gating.train import feature_matrix
    from r2a.wrapper.gate_checkpoint import load_gate
    from training.retriever.offline import chunk_errors, mean_ci

    ckpt = load_gate(gate_dir)
    data = load_gate_data(data_paths)
    arrays, meta = data["arrays"], data["meta"]
    layout = ckpt.layout
    with torch.no_grad():
        s = ckpt.net(torch.as_tensor(feature_matrix(arrays, layout), dtype=torch.float32)).numpy().astype(np.float64)
    m = list(layout.motion_dims)
    base, ref, expert = (arrays[k].astype(np.float64) for k in ("base", "reference", "expert"))
    scale = arrays["scale"].astype(np.float64)[:, :, None]  # the holding rule, as the wrapper applies it
    fixed_t, fixed_r = ckpt.provenance.get("best_constant", [0.0, 0.0])
    fixed_s = np.zeros(len(m))
    fixed_s[0:3], fixed_s[3:6] = fixed_t, fixed_r
    chunks = {"base": base, "reference": ref}
    for name, gate in (("fixed", np.broadcast_to(fixed_s, s.shape)), ("gate", s)):
        blended = base.copy()
        blended[:, :, m] = base[:, :, m] + scale * gate[:, None, :] * (ref[:, :, m] - base[:, :, m])
        chunks[name] = blended
    errors = {name: np.array([chunk_errors(c, e) for c, e in zip(chunk, expert)]) for name, chunk in chunks.items()}
    cond, kind, episode = np.array(meta["condition"]), np.array(meta["kind"]), arrays["episode"]
    keep = np.ones(len(episode), bool)
    if validation_only:
        every = int(ckpt.train_config.get("holdout_every", 5))
        keep = (episode % every) == every - 1
    rng = np.random.default_rng(seed)
    rows = []
    for k in sorted(set(kind.tolist())):
        for c in sorted(set(cond[kind == k].tolist())):
            sel = (kind == k) & (cond == c) & keep
            if not sel.any():
                continue
            row: dict[str, Any] = {"kind": k, "condition": c, "frames": int(sel.sum()),
                                   "episodes": int(len(np.unique(episode[sel]))),
                                   "S_mean": np.round(s[sel].mean(0), 4).tolist(), "fixed_S": [fixed_t, fixed_r]}
            for name in CHUNKS:
                row[f"{name}_trans_mm"] = mean_ci(errors[name][sel, 0], episode[sel], rng, n_boot)
                row[f"{name}_rot_deg"] = mean_ci(errors[name][sel, 1], episode[sel], rng, n_boot)
            rows.append(row)
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    def f(v: list[float]) -> str:
        return f"{v[0]:.1f} [{v[1]:.1f}, {v[2]:.1f}]"

    lines = ["| states | condition | frames | base mm | reference mm | fixed blend mm | learned blend mm | base ° | "
             "fixed ° | learned ° | learned S (x y z · rx ry rz) |", "|" + "---|" * 11]
    for r in rows:
        s = r["S_mean"]
        lines.append(f"| {r['kind']} | {r['condition']} | {r['frames']} | {f(r['base_trans_mm'])} | "
                     f"{f(r['reference_trans_mm'])} | {f(r['fixed_trans_mm'])} | {f(r['gate_trans_mm'])} | "
                     f"{f(r['base_rot_deg'])} | {f(r['fixed_rot_deg'])} | {f(r['gate_rot_deg'])} | "
                     f"{' '.join(f'{v:.2f}' for v in s[:3])} · {' '.join(f'{v:.2f}' for v in s[3:])} |")
    return "\n".join(lines) + "\n"


__all__ = ["evaluate_gate", "markdown_table"]
