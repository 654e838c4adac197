"""``r2a bench view``: the static viewer of a results directory, rendered in headless Chromium.

The run is synthetic but written by the benchmark's own writers: frame strips by :class:`eval.frames.FrameStrip`,
records and files by :func:`eval.runner.append_result`, the summary by :func:`eval.runner.report_from_dir`.
Its outcomes are known by construction: per task and shifted condition, episode 0 is S→F (baseline → R2A),
1 F→S, 2 both failed, 3 both succeeded; every clean pair succeeds in both.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from eval.episode_job import Job, JobResult
from eval.frames import FrameStrip
from eval.runner import append_result, report_from_dir
from eval.view import write_view
from r2a_cli.main import main
from r2a_core.errors import R2AInputError

BASE, R2A = "builtin", "r2a-harmonize"
TASKS, SHIFTS, EPISODES = ("Lift", "Stack"), (("camera", 1), ("light", 2)), 4
CONFIG = {"name": "view-test", "tasks": list(TASKS), "factors": {f: [lv] for f, lv in SHIFTS}, "episodes": EPISODES,
          "seed": 100000, "image_size": 64, "n_action_steps": None, "competence_threshold": 0.2,
          "base_policy": BASE, "n_resamples": 200, "save_trajectories": False}
#: episode → (baseline success, R2A success) on every shifted condition
OUTCOMES = {0: (True, False), 1: (False, True), 2: (False, False), 3: (True, True)}
CODES = {0: "SF", 1: "FS", 2: "FF", 3: "SS"}
STAGES = ("reached", "grasped", "lifted")


def _record(job: Job, success: bool) -> dict:
    stages = {name: success or i == 0 for i, name in enumerate(STAGES)}
    rec = {"schema": "r2a.bench.episode", "schema_version": 1, "task": job.task, "episode": job.episode,
           "factor": job.factor, "level": job.level, "policy": job.policy, "env_seed": 100000 + job.episode,
           "policy_seed": 100000 + job.episode, "config_name": "view-test", "success": success,
           "steps": 40 + job.episode if success else 150, "horizon": 150, "fingerprint": f"fp{job.task}{job.episode}",
           "modifies_state": None if job.factor == "clean" else False,
           "shift_params": None if job.factor == "clean" else {"factor": job.factor, "level": job.level},
           "instruction": "pick up the red cube", "stage_names": list(STAGES), "stages": stages,
           "first_incomplete_stage": next((s for s in STAGES if not stages[s]), None),
           "progress": sum(stages.values()) / 3,
           "events": {"object_dropped": int(not success), "wrong_object_grasped": 0},
           "metrics": {}, "error": None, "wall_s": 1.0}
    if job.policy == R2A:
        rec["r2a"] = {"queries": 19, "fallbacks": {"far_from_graph": 2}, "fallback_share": 2 / 19,
                      "mean_gate": [0.1, 0.3, 0.4, 0.2, 0.05, 0.35, 0.0], "mean_seed_distance": 0.78,
                      "recovery_steps": 0, "mean_oracle_gate": [0.5] * 7}  # a key only some variants write
        rec["harmonize"] = {"queries": 19, "active_share": {"agentview": 0.0, "wrist": 1.0}, "any_active_share": 1.0}
        if job.episode != 2:  # schema v2: the per-query trace (episode 2 stays a v1 record without one)
            steps = [3 + 8 * q for q in range(19)]
            rec["schema_version"] = 2
            rec["r2a"]["trace"] = {"step": steps, "gate": [None if q in (4, 9) else [0.1 * (q % 5)] * 6 + [0.0]
                                                           for q in range(19)],
                                   "fallback": ["far_from_graph" if q in (4, 9) else None for q in range(19)],
                                   "seed_distance": [None if q in (4, 9) else 0.5 + 0.01 * q for q in range(19)],
                                   "recovery": [0, 2]}
            rec["harmonize"]["trace"] = {"step": steps, "active": [["wrist"]] * 19}
    return rec


def _strip(shade: int) -> tuple[bytes, list[int]]:
    """A real frame strip of a fake 60-step episode, every frame one grey level."""
    strip = FrameStrip()
    for i in range(60):
        strip(SimpleNamespace(index=i, obs={"images/agentview": np.full((32, 32, 3), (shade + i) % 256, np.uint8)},
                              reply={}))
    return strip.png(), strip.steps


def _job_result(job: Job, success: bool) -> JobResult:
    """What ``run_job --save-frames failures`` returns: a strip of a failed episode or of a clean run."""
    record, files = _record(job, success), {}
    if not success or job.factor == "clean":
        path = f"frames/{job.slug()}.png"
        files[path], record["frame_steps"] = _strip(40 * job.episode)
        record["frames"] = path
    return JobResult(record, files)


def make_run(run: Path) -> Path:
    run.mkdir(parents=True)
    jobs = [Job(task, ep, "clean", 0, policy) for task in TASKS for ep in range(EPISODES) for policy in (BASE, R2A)]
    jobs += [Job(task, ep, factor, level, policy) for task in TASKS for ep in range(EPISODES)
             for factor, level in SHIFTS for policy in (BASE, R2A)]
    with open(run / "results.jsonl", "w") as sink:
        for job in jobs:
            success = True if job.factor == "clean" else OUTCOMES[job.episode][job.policy == R2A]
            append_result(sink, run, _job_result(job, success))
    (run / "run.json").write_text(json.dumps({"config": CONFIG, "policies": [BASE, R2A]}))
    report_from_dir(run)
    return run


@pytest.fixture(scope="module")
def viewer(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("view")
    run = make_run(root / "run")
    return root / "viewer", write_view(run, root / "viewer")


class _Pairs(HTMLParser):
    """Each ``article.pair`` of a DOM dump: its data attributes, the image sources and the text inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.pairs: list[dict] = []
        self.depth = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag == "article" and "pair" in (attrs.get("class") or "").split():
            self.pairs.append({**{k[5:]: v for k, v in attrs.items() if k.startswith("data-")}, "img": [],
                               "text": "", "sides": []})
            self.depth = 1
        elif self.depth:
            self.depth += tag not in ("img", "input", "br")
            if tag == "img":
                self.pairs[-1]["img"].append(attrs["src"])
            if tag == "section":
                self.pairs[-1]["sides"].append(attrs.get("data-policy"))

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.pairs[-1]["text"] += data


def _chromium(*args: str, tmp: Path) -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/install_system_deps.sh installs it)")
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp / 'chromium-profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout


def test_the_page_shows_the_changed_and_failed_pairs_with_their_frames(viewer, tmp_path):
    out, result = viewer
    assert result["pairs"] == len(TASKS) * EPISODES * (1 + len(SHIFTS))
    dom = _chromium("--dump-dom", (out / "index.html").as_uri(), tmp=tmp_path)
    parser = _Pairs()
    parser.feed(dom)
    shown = {(p["task"], p["factor"], int(p["level"]), int(p["episode"])): p for p in parser.pairs}
    expected = {(task, factor, level, ep) for task in TASKS for factor, level in SHIFTS for ep in (0, 1, 2)}
    assert set(shown) == expected                         # the filter starts on S→F, F→S and both failed
    assert "12 of 24 pairs match" in dom
    for (task, factor, level, ep), pair in shown.items():
        assert pair["outcome"] == CODES[ep] and (pair["baseline"], pair["candidate"]) == (BASE, R2A)
        assert pair["sides"] == [BASE, R2A]
        failed = [policy for policy, ok in zip((BASE, R2A), OUTCOMES[ep]) if not ok]
        if ep in (0, 1):                                  # changed: the failed side's strip, copied beside the page
            assert pair["img"] == [f"frames/{Job(task, ep, factor, level, p).slug()}.png" for p in failed]
            assert all((out / src).is_file() for src in pair["img"])
            assert "saved those of failed episodes and clean runs only" in pair["text"]
        else:                                             # both failed: saved, not copied with --frames changed
            assert pair["img"] == [] and pair["text"].count("frames not copied (--frames changed)") == 2
        assert "R2A queries" in pair["text"] and "far_from_graph 2" in pair["text"]
        assert "harmonized100 % of 19 queries" in pair["text"].replace("\n", "")
        assert "mean oracle gate[0.5,0.5" in pair["text"] and "✗ grasped" in pair["text"]
        if ep == 2:                                       # a v1 record: episode means only
            assert "hold no per-query trace" in pair["text"] and "fell back (" not in pair["text"]
        else:                                             # v2: the per-query series, each query's marks
            assert pair["text"].count("fell back (far_from_graph)") == 2 and "step 35: fell back" in pair["text"]
            assert pair["text"].count("harmonized (wrist)") == 19 and "recovery, steps 0–2" in pair["text"]
            assert "gate S, translation" in pair["text"] and "seed distance (dashed" in pair["text"]
            assert '"fallback":' not in pair["text"]  # the trace is drawn, not dumped into the table
    assert result["frames_copied"] == len(list((out / "frames").iterdir())) == len(TASKS) * len(SHIFTS) * 2
    assert "Headline" in dom and "<table>" in dom and "r2a-harmonize" in dom


def test_screenshot(viewer, tmp_path):
    out, _ = viewer
    shot = tmp_path / "view.png"
    _chromium(f"--screenshot={shot}", "--window-size=1280,1600", (out / "index.html").as_uri(), tmp=tmp_path)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_frames_all_or_none_and_the_cli(viewer, tmp_path, capsys):
    out, _ = viewer
    run = out.parent / "run"
    every = write_view(run, tmp_path / "all", frames="all")
    # every strip of a shown pair: clean runs (both sides) and each failed shifted episode
    failed = sum(not ok for ep in range(EPISODES) for ok in OUTCOMES[ep]) * len(TASKS) * len(SHIFTS)
    assert every["frames_copied"] == failed + 2 * len(TASKS) * EPISODES
    assert main(["bench", "view", str(run), "--out", str(tmp_path / "none"), "--frames", "none"]) == 0
    assert json.loads(capsys.readouterr().out)["frames_copied"] == 0
    assert not (tmp_path / "none" / "frames").exists()
    assert write_view(run, tmp_path / "all")["pairs"] == every["pairs"]     # an earlier viewer is replaced


def test_bad_inputs_are_one_line_errors_naming_the_file(viewer, tmp_path):
    out, _ = viewer
    run = out.parent / "run"
    with pytest.raises(R2AInputError, match=f"{tmp_path / 'nope' / 'results.jsonl'}: no such file"):
        write_view(tmp_path / "nope", tmp_path / "v")
    broken = tmp_path / "broken"
    shutil.copytree(run, broken)
    lines = (broken / "results.jsonl").read_text().splitlines()
    (broken / "results.jsonl").write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(R2AInputError, match=f"{broken / 'results.jsonl'}:2: not a JSON record"):
        write_view(broken, tmp_path / "v")
    (broken / "results.jsonl").write_text("\n".join(lines) + "\n")
    (broken / "summary.json").write_text("{")
    with pytest.raises(R2AInputError, match=f"{broken / 'summary.json'}: not valid JSON"):
        write_view(broken, tmp_path / "v")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep me")
    with pytest.raises(R2AInputError, match="is not an earlier 'r2a bench view' output"):
        write_view(run, tmp_path / "other")
    with pytest.raises(R2AInputError, match="not the run's or above it"):
        write_view(run, run)
    assert main(["bench", "view", str(tmp_path / "nope"), "--out", str(tmp_path / "v")]) == 2


def test_the_pages_script_parses(tmp_path):
    """The viewer's JavaScript is a string in eval/view_page.py: a syntax error there shows only in a browser."""
    import re

    from eval.view_page import _PAGE

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = re.search(r"<script>(.*?)</script>", _PAGE, re.S)
    assert script, "the page holds no <script>"
    (tmp_path / "view.js").write_text(script.group(1))
    check = subprocess.run([node, "--check", str(tmp_path / "view.js")], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
