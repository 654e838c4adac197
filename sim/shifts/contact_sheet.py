"""Contact sheet of the shift factors: the agentview image of one episode, clean and under every factor × level.

    python -m sim.shifts.contact_sheet --task Lift --out docs/shifts/
    python -m sim.shifts.contact_sheet --task libero_spatial/0 --wrist --out docs/shifts/

writes ``<out>/contact_sheet_<Task>.png`` (a ``/`` in the task name becomes ``_``:
``contact_sheet_libero_spatial_0.png``): one row per factor, columns clean, L1, L2, L3, all from the same
seed; with ``--wrist`` each factor's row is followed by the wrist camera's. Each cell is captioned with the
sampled parameters (the language row: the instruction the policy receives; robot_init: also the measured
displacement of the grip site). After each shifted image the clean
model is restored and the sheet checks that the clean images come back bit-identical. It also writes
``<out>/noise_types_<Task>.png``: each image corruption of the noise factor at every level (the contact sheet
shows only the one corruption its seed drew).
"""

from __future__ import annotations

import argparse
import logging
import textwrap
from pathlib import Path

import numpy as np

from r2a_core.types import PROMPT, image_key
from sim.envs.tasks import task_file_stem

log = logging.getLogger(__name__)

LABEL_WIDTH = 92
FONT_SCALE = 0.3
CAPTION_CHARS = 20
NOISE_STRIP_SIZE = 96


def _put_text(img: np.ndarray, text: str, origin: tuple[int, int], scale: float = FONT_SCALE,
              colour: tuple[int, int, int] = (255, 255, 255), box: bool = True) -> None:
    import cv2

    font = cv2.FONT_HERSHEY_SIMPLEX
    (w, h), base = cv2.getTextSize(text, font, scale, 1)
    x, y = origin
    if box:
        cv2.rectangle(img, (x - 2, y - h - 2), (x + w + 2, y + base), (0, 0, 0), thickness=-1)
    cv2.putText(img, text, (x, y), font, scale, colour, 1, cv2.LINE_AA)


def _caption(img: np.ndarray, lines: list[str]) -> np.ndarray:
    img = img.copy()
    step = int(11 * img.shape[0] / 128)
    for i, line in enumerate(lines):
        _put_text(img, line, (3, img.shape[0] - 4 - step * (len(lines) - 1 - i)))
    return img


def _levels_status(config: str | Path | None) -> str:
    """What the levels file says of itself: calibrated (on which policy), partly calibrated or provisional."""
    from sim.shifts.config import load_factor_levels

    calibration = load_factor_levels(config).get("calibration") or {}
    status = calibration.get("status") or "provisional"
    base = calibration.get("base_policy")
    policy = base.get("spec") if isinstance(base, dict) else None
    return f"{status} on {policy}" if policy and status != "provisional" else status


def render_contact_sheet(task: str = "Lift", seed: int = 0, size: int = 128,
                         config: str | Path | None = None, wrist: bool = False) -> np.ndarray:
    """The sheet as an RGB uint8 image (with ``wrist``, a wrist-camera row under each factor's row)."""
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig
    from sim.shifts import FACTOR_NAMES, LEVELS, ShiftHooks, get_factor

    cameras = ("agentview", "wrist") if wrist else ("agentview",)
    sim = make_sim(SimConfig(task=task, cameras=cameras, image_size=size))
    keys = [image_key(camera) for camera in cameras]
    key = keys[0]
    try:
        clean_obs = sim.reset(seed)
        clean = {k: clean_obs[k].copy() for k in keys}
        rows = []
        for name in FACTOR_NAMES:
            factor = get_factor(name, config)
            cells = [_cell(clean[key], "clean", clean_obs[PROMPT] if name == "language" else "")]
            wrist_cells = [_cell(clean[k], "clean", "") for k in keys[1:]]
            for level in LEVELS:
                sim.reset(seed)
                ee_before = sim.ee_pos()
                hooks = ShiftHooks(factor, level)
                obs = hooks.transform(hooks.after_reset(sim))
                caption = factor.describe(hooks.params)
                if name == "robot_init":
                    caption += f" dEE {100 * np.linalg.norm(sim.ee_pos() - ee_before):.1f}cm"
                cells.append(_cell(obs[key], f"L{level}", caption))
                wrist_cells += [_cell(obs[k], f"L{level}", "") for k in keys[1:]]
                hooks.close()
                restored = sim.reset(seed)
                if not all(np.array_equal(restored[k], clean[k]) for k in keys):
                    raise RuntimeError(f"factor '{name}' L{level}: undo did not restore the clean images")
            label = np.zeros((size, LABEL_WIDTH, 3), np.uint8)
            _put_text(label, name, (4, size // 2), scale=0.42, box=False)
            _put_text(label, "state" if factor.modifies_state else "obs only", (4, size // 2 + 16), scale=0.35,
                      colour=(170, 170, 170), box=False)
            rows.append(np.concatenate([label, *cells], axis=1))
            if wrist_cells:
                label = np.zeros((size, LABEL_WIDTH, 3), np.uint8)
                _put_text(label, f"{name}", (4, size // 2), scale=0.42, colour=(170, 170, 170), box=False)
                _put_text(label, "wrist camera", (4, size // 2 + 16), scale=0.35, colour=(170, 170, 170), box=False)
                rows.append(np.concatenate([label, *wrist_cells], axis=1))
        header = np.zeros((18, rows[0].shape[1], 3), np.uint8)
        views = "agentview + wrist" if wrist else "agentview"
        _put_text(header, f"{task}  seed {seed}  {views} {size}px  (levels {_levels_status(config)})", (4, 13),
                  scale=0.4, box=False)
        return np.concatenate([header, *rows], axis=0)
    finally:
        sim.close()


def render_noise_types(task: str = "Lift", seed: int = 0, size: int = 128,
                       config: str | Path | None = None) -> np.ndarray:
    """Every image corruption of the noise factor at the middle of each level's severity range (one row each)."""
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig
    from sim.shifts import LEVELS, get_factor, obs_rng
    from sim.shifts.noise import CORRUPTIONS, SEVERITY_KEY, corrupt

    sim = make_sim(SimConfig(task=task, cameras=("agentview",), image_size=size))
    try:
        clean = sim.reset(seed)[image_key("agentview")].copy()
    finally:
        sim.close()
    factor = get_factor("noise", config)
    rows = []
    for kind in CORRUPTIONS:
        cells = [_cell(clean, "clean", "")]
        for level in LEVELS:
            low, high = factor.levels[level][SEVERITY_KEY[kind]]
            params = {"corruption": kind, "severity": (low + high) / 2.0, "angle_deg": 30.0}
            cells.append(_cell(corrupt(clean, params, obs_rng(seed, factor, level)), f"L{level}",
                               f"{kind.replace('gaussian_', '')} {params['severity']:.2g}"))
        label = np.zeros((size, LABEL_WIDTH, 3), np.uint8)
        _put_text(label, kind.replace("gaussian_", "gauss. "), (4, size // 2), scale=0.4, box=False)
        rows.append(np.concatenate([label, *cells], axis=1))
    header = np.zeros((18, rows[0].shape[1], 3), np.uint8)
    _put_text(header, f"noise factor: each corruption at mid-level severity ({task}, seed {seed})", (4, 13),
              scale=0.4, box=False)
    return np.concatenate([header, *rows], axis=0)


def _cell(img: np.ndarray, tag: str, caption: str) -> np.ndarray:
    img = img.copy()
    _put_text(img, tag, (3, 11), scale=0.35)
    if caption:
        img = _caption(img, textwrap.wrap(caption, width=CAPTION_CHARS)[:3])
    img[:, -1] = 0  # a thin separator
    return img


def main(argv: list[str] | None = None) -> int:
    import cv2

    from sim.envs.tasks import canonical_task_name

    parser = argparse.ArgumentParser(prog="python -m sim.shifts.contact_sheet",
                                     description="Render the agentview image clean and under every shift factor "
                                                 "and level (same seed) into one labelled PNG.")
    parser.add_argument("--task", default="Lift", help="task name (default: Lift)")
    parser.add_argument("--seed", type=int, default=0, help="episode seed (default: 0)")
    parser.add_argument("--size", type=int, default=128, help="image side in pixels (default: 128)")
    parser.add_argument("--config", help="shift-level YAML (default: configs/bench/factors.yaml)")
    parser.add_argument("--out", default="docs/shifts", help="output directory (default: docs/shifts)")
    parser.add_argument("--wrist", action="store_true", help="add the wrist camera's row under each factor's row")
    parser.add_argument("--no-noise-types", action="store_true",
                        help="skip noise_types_<Task>.png (the corruptions do not depend on the scene)")
    args = parser.parse_args(argv)
    args.task = canonical_task_name(args.task)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = task_file_stem(args.task)
    # one simulator at a time: each is closed before the next is built
    sheets = {f"contact_sheet_{stem}.png": render_contact_sheet(args.task, args.seed, args.size, args.config,
                                                                wrist=args.wrist)}
    if not args.no_noise_types:
        # smaller cells: pixel noise hardly compresses and the docs' images should stay small
        sheets[f"noise_types_{stem}.png"] = render_noise_types(args.task, args.seed, min(args.size, NOISE_STRIP_SIZE),
                                                               args.config)
    for name, sheet in sheets.items():
        path = out / name
        cv2.imwrite(str(path), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9])
        print(f"wrote {path} ({path.stat().st_size // 1024} kB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
