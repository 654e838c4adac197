"""``r2a bench merge``: the frozen base run once, a wrapper run later, one report of both."""

from __future__ import annotations

import json

import pytest

from eval.merge import merge_runs
from r2a_cli.main import main
from r2a_core.errors import R2AInputError

CONFIG = {"name": "t", "tasks": ["Lift"], "factors": {"camera": [1]}, "episodes": 4, "seed": 100000,
          "image_size": 64, "n_action_steps": None, "competence_threshold": 0.2, "n_resamples": 200,
          "base_policy": "base", "save_trajectories": False}


def _record(policy: str, factor: str, episode: int, success: bool, **override) -> dict:
    rec = {"schema": "r2a.bench.episode", "schema_version": 1, "policy": policy, "task": "Lift",
           "factor": factor, "level": 0 if factor == "clean" else 1, "episode": episode,
           "env_seed": 100000 + episode, "policy_seed": 100000 + episode, "fingerprint": f"fp{episode}",
           "shift_params": None if factor == "clean" else {"factor": "camera", "yaw": episode},
           "success": success, "stage_names": ["reached"], "stages": {"reached": success},
           "first_incomplete_stage": None if success else "reached", "progress": float(success),
           "modifies_state": None if factor == "clean" else False, "error": None}
    rec.update(override)
    return rec


def _run_dir(path, policy: str, shifted: list[bool], config: dict | None = None, **override):
    path.mkdir(parents=True)
    recs = [_record(policy, "clean", ep, True) for ep in range(4)]
    recs += [_record(policy, "camera", ep, ok, **(override if ep == 0 else {})) for ep, ok in enumerate(shifted)]
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    prov = {"git": {"commit": policy * 8, "dirty": False}, "versions": {"mujoco": "3.9.0"},
            "machine": {"cpu": "X", "cores": 2, "gpu": None}, "command": f"r2a bench run --policy {policy}"}
    (path / "run.json").write_text(json.dumps({"config": config or CONFIG, "policies": [policy], "provenance": prov}))
    return path


def test_merged_report_pairs_the_base_run_with_the_wrapper_run(tmp_path, capsys):
    base = _run_dir(tmp_path / "base", "base", [False, False, True, True])
    r2a = _run_dir(tmp_path / "r2a", "r2a", [True, True, True, False])
    assert main(["bench", "merge", str(tmp_path / "both"), str(base), str(r2a)]) == 0
    out = capsys.readouterr().out
    assert "uplift r2a vs base: +25.0 SR points pooled over 4 shifted pairs" in out
    summary = json.loads((tmp_path / "both" / "summary.json").read_text())
    assert summary["policies"] == ["base", "r2a"] and summary["integrity"]["problems"] == []
    (h,) = summary["headline"]
    assert (h["baseline"], h["candidate"]) == ("base", "r2a") and h["pooled_uplift"] == pytest.approx(0.25)
    assert h["clean"]["uplift"] == 0.0
    md = (tmp_path / "both" / "report.md").read_text()
    assert "### `" in md and "(base)" in md and "(r2a)" in md          # each run's provenance
    assert (tmp_path / "both" / "uplift_by_factor.png").is_file()


def test_base_policy_can_be_chosen_at_merge_time(tmp_path):
    base = _run_dir(tmp_path / "base", "base", [False, False, True, True])
    r2a = _run_dir(tmp_path / "r2a", "r2a", [True, True, True, False])
    (h,) = merge_runs(tmp_path / "both", [base, r2a], base_policy="r2a")["headline"]
    assert (h["baseline"], h["candidate"]) == ("r2a", "base") and h["pooled_uplift"] == pytest.approx(-0.25)


def test_refuses_runs_of_other_episodes(tmp_path):
    base = _run_dir(tmp_path / "base", "base", [True] * 4)
    other = _run_dir(tmp_path / "r2a", "r2a", [True] * 4, config={**CONFIG, "seed": 90000})
    with pytest.raises(R2AInputError, match="ran other episodes than .*seed 100000 vs 90000"):
        merge_runs(tmp_path / "both", [base, other])
    assert not (tmp_path / "both").exists()


@pytest.mark.parametrize("field,value", [("env_seed", 7), ("fingerprint", "other"),
                                         ("shift_params", {"factor": "camera", "yaw": 99})])
def test_refuses_shared_episodes_that_differ(tmp_path, field, value):
    base = _run_dir(tmp_path / "base", "base", [True] * 4)
    r2a = _run_dir(tmp_path / "r2a", "r2a", [True] * 4, **{field: value})
    with pytest.raises(R2AInputError, match=f"1 shared episode.*Lift/camera/1/0: {field} of r2a"):
        merge_runs(tmp_path / "both", [base, r2a])
    assert not (tmp_path / "both").exists()


def test_refuses_a_policy_in_two_runs_and_bad_directories(tmp_path):
    a = _run_dir(tmp_path / "a", "base", [True] * 4)
    b = _run_dir(tmp_path / "b", "base", [True] * 4)
    with pytest.raises(R2AInputError, match="policy 'base' is in both"):
        merge_runs(tmp_path / "both", [a, b])
    with pytest.raises(R2AInputError, match="at least two"):
        merge_runs(tmp_path / "both", [a])
    with pytest.raises(R2AInputError, match="must not be one of the runs"):
        merge_runs(a, [a, b])
    with pytest.raises(R2AInputError, match="expected run.json and results.jsonl"):
        merge_runs(tmp_path / "both", [a, tmp_path / "missing"])


def test_never_overwrites_a_run_and_rewrites_an_earlier_merge(tmp_path):
    base = _run_dir(tmp_path / "base", "base", [False, False, True, True])
    r2a = _run_dir(tmp_path / "r2a", "r2a", [True, True, True, False])
    r2b = _run_dir(tmp_path / "r2b", "r2b", [True] * 4)
    before = (base / "results.jsonl").read_text()
    with pytest.raises(R2AInputError, match="holds a benchmark run, not an earlier merge"):
        merge_runs(base, [r2a, r2b])                          # OUT and the runs swapped by mistake
    assert (base / "results.jsonl").read_text() == before
    merge_runs(tmp_path / "both", [base, r2a])
    summary = merge_runs(tmp_path / "both", [base, r2a, r2b])  # a merge may be redone with more runs
    assert summary["policies"] == ["base", "r2a", "r2b"]


def test_refuses_records_of_a_policy_the_run_does_not_list(tmp_path):
    base = _run_dir(tmp_path / "base", "base", [True] * 4)
    r2a = _run_dir(tmp_path / "r2a", "r2a", [True] * 4)
    with (base / "results.jsonl").open("a") as f:
        f.write(json.dumps(_record("r2a", "camera", 0, False)) + "\n")
    with pytest.raises(R2AInputError, match="records of policy 'r2a' not in .*run.json's policies"):
        merge_runs(tmp_path / "both", [base, r2a])


def test_pairing_is_checked_against_the_first_valid_record(tmp_path):
    base = _run_dir(tmp_path / "base", "base", [True] * 4, error="simulator diverged")
    r2a = _run_dir(tmp_path / "r2a", "r2a", [True] * 4)
    r2b = _run_dir(tmp_path / "r2b", "r2b", [True] * 4, env_seed=7)
    with pytest.raises(R2AInputError, match="env_seed of r2b"):
        merge_runs(tmp_path / "both", [base, r2a, r2b])


def test_frames_and_trajectories_follow_into_the_merged_directory(tmp_path):
    base = _run_dir(tmp_path / "base", "base", [False, True, True, True], frames="frames/base_cam0.png")
    (base / "frames").mkdir()
    (base / "frames" / "base_cam0.png").write_bytes(b"png")
    (base / "trajectories").mkdir()
    (base / "trajectories" / "base_Lift_camera_1_0.npz").write_bytes(b"npz")
    r2a = _run_dir(tmp_path / "r2a", "r2a", [True] * 4)
    out = tmp_path / "merged" / "both"
    merge_runs(out, [base, r2a])
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    (frames,) = {r["frames"] for r in rows if r.get("frames")}
    assert (out / frames).read_bytes() == b"png"
    assert (out / "trajectories" / "base_Lift_camera_1_0.npz").read_bytes() == b"npz"
    report = (out / "report.md").read_text()
    assert f"`{frames}`" in report and f"]({frames})" not in report  # named, never a broken image once published
    assert "stay in the run directories that saved them" in report


def test_a_merged_directory_is_not_resumed_by_a_run(tmp_path):
    from eval.bench_config import BenchConfig
    from eval.runner import _pin_run

    base = _run_dir(tmp_path / "base", "base", [True] * 4)
    r2a = _run_dir(tmp_path / "r2a", "r2a", [True] * 4)
    merge_runs(tmp_path / "both", [base, r2a])
    with pytest.raises(R2AInputError, match="written by 'r2a bench merge'"):
        _pin_run(tmp_path / "both", BenchConfig.from_dict(CONFIG), ["base", "r2a"], {"artifacts": {}})


def test_refuses_runs_drawn_from_other_shift_levels(tmp_path):
    base = _run_dir(tmp_path / "base", "base", [True] * 4)
    r2a = _run_dir(tmp_path / "r2a", "r2a", [True] * 4)
    for run, sha in ((base, "a" * 64), (r2a, "b" * 64)):
        pinned = json.loads((run / "run.json").read_text())
        pinned["provenance"]["shift_levels"] = {"path": "configs/bench/factors.yaml", "sha256": sha}
        (run / "run.json").write_text(json.dumps(pinned))
    with pytest.raises(R2AInputError, match="shift levels file sha256 aaaaaaaaaaaa vs bbbbbbbbbbbb"):
        merge_runs(tmp_path / "both", [base, r2a])


def test_a_run_is_not_resumed_with_another_levels_file(tmp_path):
    from eval.bench_config import BenchConfig
    from eval.runner import _pin_run

    config = BenchConfig.from_dict(CONFIG)
    assert _pin_run(tmp_path / "run", config, ["base"],
                    {"artifacts": {}, "shift_levels": {"sha256": "a" * 64}}) is False
    assert _pin_run(tmp_path / "run", config, ["base"], {"artifacts": {}, "shift_levels": {"sha256": "a" * 64}})
    with pytest.raises(R2AInputError, match="the shift levels file changed since the run started"):
        _pin_run(tmp_path / "run", config, ["base"], {"artifacts": {}, "shift_levels": {"sha256": "b" * 64}})
