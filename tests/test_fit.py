"""``r2a fit`` end to end at toy scale on the built-in base (real MuJoCo, real training of every part), the result
wrapped by ``--policy r2a:OUT``; its config's seed rule and its resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from demos.dataset import load_episodes
from fit.config import FitConfig
from r2a_core.errors import R2AInputError
from training.retriever.queries import load_query_set

pytest.importorskip("robosuite")

TOY = dict(base="builtin", tasks=["Lift"], graph_episodes=3, heldout_episodes=2, image_size=64, shifts=["light:2"],
           harmonize_factors=["light"], retriever_steps=4, dagger_rounds=1, dagger_shifts=["camera:2"],
           dagger_episodes=1, workers=1, gate_overrides=["holdout_every=2", "epochs=3"])


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    from fit.pipeline import fit

    out = tmp_path_factory.mktemp("fit") / "lift"
    config = FitConfig.from_dict(TOY)
    return config, out, fit(config, out, progress=False)


def _wrap_and_run(fit_dir, steps: int = 24):
    """``r2a:FIT_DIR`` driving Lift for ``steps`` steps: (the wrapper, the episode's summary)."""
    from demos.rollout import run_episode
    from r2a.policies import make_policy
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    sim = make_sim(SimConfig(task="Lift", image_size=64))
    try:
        policy = make_policy(f"r2a:{fit_dir}", sim, 0)
        return policy, run_episode(sim, policy, seed=7, record=False, max_steps=steps)[1]
    finally:
        sim.close()


def test_a_toy_fit_makes_every_part_and_a_config_that_wraps_the_base(fitted):
    config, out, manifest = fitted
    assert list(manifest["steps"]) == ["graph", "heldout", "statistics", "retriever", "gate", "config"]
    for part in ("graph/manifest.json", "retriever/model.safetensors", "gate/model.safetensors", "image_stats.json",
                 "harmonize_stats.json", "r2a.yaml", "work/dagger/round1/Lift_camera2.hdf5"):
        assert (out / part).exists(), part
    assert set(manifest["parts"]) == {"graph", "retriever", "gate", "image_stats.json", "harmonize_stats.json"}
    assert manifest["base"] == "builtin" and manifest["config"] == config.to_dict()
    assert manifest["steps"]["graph"]["seconds"] > 0 and all(s["seconds"] >= 0 for s in manifest["steps"].values())
    assert not list((out / "work" / "step_clocks").iterdir())  # every step finished: no clock left running
    # the base was asked each held-out episode's frames once (by the retriever; the gate rounds read them back) and
    # each DAgger rollout's once
    queried = load_query_set(out / "work" / "runs" / "retriever" / "queries.npz").episode.max() + 1
    rollouts = sum(len(load_episodes(f)) for f in (out / "work" / "dagger").rglob("*.hdf5"))
    assert len(list((out / "work" / "base_chunks").iterdir())) == queried + rollouts
    gate = json.loads((out / "gate" / "manifest.json").read_text())
    assert max(gate["provenance"]["seeds"]) < 100_000  # training seeds only, DAgger round 1's among them
    moved = out.parent / "moved"  # the fitted directory works from anywhere: its paths are relative to r2a.yaml
    shutil.copytree(out, moved)
    policy, summary = _wrap_and_run(moved)
    assert summary["steps"] == 24 and np.isfinite(summary["trace"]["ee_pos"]).all()
    artifacts = policy.metadata["artifacts"]
    assert {"graph", "retriever", "gate", "harmonize_stats"} <= set(artifacts), artifacts
    assert all(artifacts[k]["path"].startswith(str(moved)) for k in ("graph", "retriever", "gate", "harmonize_stats"))


def test_a_fit_resumes_and_refuses_another_config_in_its_directory(fitted, monkeypatch):
    from fit.pipeline import fit

    config, out, manifest = fitted
    _refuse_work(monkeypatch)
    again = fit(config, out, progress=False)  # every output exists: nothing is redone (_refuse_work raises if so)
    assert again["parts"] == manifest["parts"] and again["steps"].keys() == manifest["steps"].keys()
    with pytest.raises(R2AInputError, match="another config .*retriever_steps"):
        fit(FitConfig.from_dict({**TOY, "retriever_steps": 5}), out, progress=False)
    assert fit(FitConfig.from_dict({**TOY, "workers": 2}), out, progress=False)["parts"] == manifest["parts"]
    with pytest.raises(R2AInputError, match="differs in base.*only fields a step that has not run yet reads"):
        fit(FitConfig.from_dict({**TOY, "base": "builtin:?n_action_steps=4"}), out, progress=False)  # retriever read it
    with pytest.raises(R2AInputError, match="differs in deploy"):  # the config step wrote r2a.yaml with it
        fit(FitConfig.from_dict({**TOY, "deploy": ["harmonize.enabled=false"]}), out, progress=False)


def test_a_fit_resumes_only_against_the_checkpoint_its_data_was_asked_of(fitted, tmp_path):
    """The same spec loading other files (a server restarted with a retrained policy) is another base."""
    from fit.pipeline import MANIFEST, fit

    config, out, manifest = fitted
    assert set(manifest["base_artifacts"]) == {"base_checkpoint"}  # the built-in base declares its checkpoint
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    recorded = json.loads((copy / MANIFEST).read_text())
    recorded["base_artifacts"]["base_checkpoint"]["sha256"] = "0" * 64
    (copy / MANIFEST).write_text(json.dumps(recorded))
    with pytest.raises(R2AInputError, match=r"differs in base \(its spec, or the files it loads"):
        fit(config, copy, progress=False)


class Redone(Exception):
    """Raised by a trainer or collector that a resumed fit should not have called."""


def _refuse_work(monkeypatch) -> None:
    import demos.collect
    import gating.train
    import graph_builder.build
    import training.retriever.train
    from fit.pipeline import Fitting

    def refuse(*args, **kwargs):
        raise Redone

    for module, name in ((demos.collect, "collect"), (gating.train, "train_gate"),
                         (graph_builder.build, "build_graph_from_paths"),
                         (training.retriever.train, "train_retriever")):
        monkeypatch.setattr(module, name, refuse)

    def no_new_files(self, jobs, what):  # re-renders and DAgger rollouts run in spawned workers the patches miss
        missing = [kwargs["out"] for _, kwargs in jobs if not Path(kwargs["out"]).exists()]
        if missing:
            raise Redone(f"{what}: {missing}")

    monkeypatch.setattr(Fitting, "_parallel", no_new_files)


def test_a_resumed_fit_redoes_nothing_that_finished(fitted, tmp_path, monkeypatch):
    """A fit stopped after its gate's training runs finished but before the gate was shipped: the resume ships it
    from the finished run — no collection, no training."""
    from fit.pipeline import fit

    config, out, manifest = fitted
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "gate")
    (copy / "r2a.yaml").unlink()
    _refuse_work(monkeypatch)
    again = fit(config, copy, progress=False)
    assert again["parts"]["gate"] == manifest["parts"]["gate"]
    assert (copy / "r2a.yaml").exists()


def test_a_resumed_fit_keeps_a_hand_edited_r2a_yaml(fitted, tmp_path, monkeypatch):
    """The config step writes r2a.yaml once: a user's edit (a gate threshold, a comment) survives a rerun."""
    from fit.pipeline import fit

    config, out, manifest = fitted
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    edited = (copy / "r2a.yaml").read_text() + "# tuned by hand\n"
    (copy / "r2a.yaml").write_text(edited)
    _refuse_work(monkeypatch)
    again = fit(config, copy, progress=False)
    assert (copy / "r2a.yaml").read_text() == edited and again["parts"] == manifest["parts"]


def test_a_step_killed_midway_keeps_its_seconds_for_the_next_attempt(tmp_path, monkeypatch):
    from fit import pipeline

    now = [100.0]
    monkeypatch.setattr(pipeline.time, "perf_counter", lambda: now[0])
    gate, retriever = tmp_path / "gate.json", tmp_path / "retriever.json"
    with pytest.raises(KeyboardInterrupt), pipeline.StepClock(gate, "gate", every=3600):
        now[0] += 40.0
        raise KeyboardInterrupt
    assert json.loads(gate.read_text()) == {"step": "gate", "seconds": 40.0}
    with pipeline.StepClock(retriever, "retriever", every=3600) as other:  # another step counts on its own
        now[0] += 5.0
    assert other.seconds == 5.0 and not retriever.exists() and gate.exists()
    with pipeline.StepClock(gate, "gate", every=3600) as clock:
        now[0] += 2.5
    now[0] += 100.0  # what fit.json records is the step's time, not the time until it is read
    assert clock.seconds == 42.5 and not gate.exists()


def test_a_step_clock_that_cannot_be_read_is_named_and_counts_from_zero(tmp_path, caplog):
    from fit.pipeline import StepClock

    path = tmp_path / "gate.json"
    path.write_text("{torn")
    with caplog.at_level("WARNING", logger="fit.pipeline"):
        assert StepClock(path, "gate").carried == 0.0
    assert f"{path}: not a step clock" in caplog.text


def test_a_step_clock_ticks_while_the_step_runs(tmp_path):
    import time

    from fit.pipeline import StepClock

    path = tmp_path / "work" / "step_clocks" / "graph.json"
    with StepClock(path, "graph", every=0.01):
        for _ in range(500):
            if path.exists():
                break
            time.sleep(0.01)
        assert json.loads(path.read_text())["step"] == "graph"  # a kill now would keep it
    assert not path.exists()


def test_a_fit_stopped_after_its_graph_resumes_at_the_next_step(tmp_path, monkeypatch):
    from fit.pipeline import MANIFEST, Fitting, fit

    def stop(self):
        raise Redone("heldout")

    config, out = FitConfig.from_dict(TOY), tmp_path / "fit"
    no_server = "openpi:ws://127.0.0.1:9"  # a policy still training: nothing answers there yet
    fit(FitConfig.from_dict({**TOY, "base": no_server}), out, progress=False, until="graph")  # not even built
    recorded = json.loads((out / MANIFEST).read_text())
    assert list(recorded["steps"]) == ["graph"] and recorded["base_artifacts"] is None
    # the graph never queried the base: the fit goes on with another one (the data's base is recorded), and with
    # other settings that only later steps read (not with one the graph read)
    with pytest.raises(R2AInputError, match="differs in graph_episodes"):
        fit(FitConfig.from_dict({**TOY, "graph_episodes": TOY["graph_episodes"] + 1}), out, progress=False)
    config = FitConfig.from_dict({**TOY, "deploy": ["harmonize.enabled=false"], "retriever_steps": 7})
    monkeypatch.setattr(Fitting, "heldout", stop)
    _refuse_work(monkeypatch)  # the graph and its demos are there: a second run goes straight to the held-out step
    with pytest.raises(Redone, match="heldout"):
        fit(config, out, progress=False)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["base"] == "builtin" and manifest["data_made_for_base"] == no_server
    assert set(manifest["base_artifacts"]) == {"base_checkpoint"}  # built now: the base the steps to come ask
    with pytest.raises(R2AInputError, match="until='train'"):
        fit(config, out, progress=False, until="train")


def test_the_base_free_steps_run_to_statistics_while_nothing_serves_the_base(tmp_path):
    """The documented workflow: a fit's data made while the policy still trains (its server not up)."""
    from fit.pipeline import MANIFEST, fit

    out = tmp_path / "fit"
    manifest = fit(FitConfig.from_dict({**TOY, "base": "openpi:ws://127.0.0.1:9"}), out, progress=False,
                   until="statistics")
    assert list(manifest["steps"]) == ["graph", "heldout", "statistics"] and manifest["base_artifacts"] is None
    assert json.loads((out / MANIFEST).read_text())["steps"] == manifest["steps"]
    assert (out / "image_stats.json").exists() and (out / "harmonize_stats.json").exists()
    assert not list((out / "work").rglob("base_chunks/*"))  # nothing asked of the base
    assert not (out / "r2a.yaml").exists() and not (out / "retriever").exists()


@pytest.mark.parametrize("path", sorted(Path("configs/fit").glob("*.yaml")), ids=lambda p: p.name)
def test_a_shipped_fit_config_passes_the_checks_a_fit_runs_before_its_first_step(path, monkeypatch):
    """Its shifts, the gate's split, the retriever's and R2A's configs and its base (the shipped checkpoint). Without
    LIBERO (``make test`` does not install it) the check refuses naming the install; the rest is checked past it."""
    import sim.envs.libero_env as libero_env

    config = FitConfig.from_yaml(path, [])
    try:
        libero_env.libero_assets_dir()
    except R2AInputError:
        with pytest.raises(R2AInputError, match="make install-libero"):
            config.check_parts()
        monkeypatch.setattr(libero_env, "libero_assets_dir", lambda: Path("."))
    artifacts = config.check_parts()
    assert set(artifacts) == {"base_checkpoint"} and len(artifacts["base_checkpoint"]["sha256"]) == 64


@pytest.mark.parametrize("field, value, what", [("heldout_seed", 99_999, "heldout_seed"),
                                                 ("dagger_seed", 99_000, "dagger_seed \\(round 1\\)"),
                                                 ("shift_seed", 100_000, "shift_seed")])
def test_a_fit_never_draws_a_test_seed(field, value, what):
    with pytest.raises(R2AInputError, match=f"{what}: draws seeds .*training seeds only"):
        FitConfig.from_dict({**TOY, field: value, "heldout_episodes": 2})


@pytest.mark.parametrize("change, message", [
    ({"tasks": []}, "tasks: give at least one task"),
    ({"tasks": ["Lift", "Lift"]}, r"tasks: \['Lift'\] appear more than once"),
    ({"dagger_tasks": ["Stack"]}, r"dagger_tasks \['Stack'\]: not among tasks"),
    ({"workers": 0}, "each must be >= 1"),
    ({"dagger_rounds": 1, "dagger_episodes": 0}, "with rounds, episodes >= 1"),
    ({"dagger_episodes": 1001}, "dagger_episodes=1001: at most 1000"),
    ({"graph_seed": 20001}, r"heldout_seed \(20000…20001\) and graph_seed \(20001…20003\) overlap"),
    ({"shifts": ["light2"]}, "shift 'light2': expected FACTOR:LEVEL"),
    ({"shifts": ["layout:2"], "harmonize_factors": ["light"]}, r"shifts \['layout'\]: the detectors are fitted"),
])
def test_a_fit_config_that_cannot_be_fitted_is_refused_by_name(change, message):
    with pytest.raises(R2AInputError, match=message):
        FitConfig.from_dict({**TOY, **change})


def test_a_fit_refuses_a_shift_its_gate_would_refuse_before_any_step(tmp_path):
    from fit.pipeline import fit

    with pytest.raises(R2AInputError, match=r"\['layout:3'\]: not in the gate's training split"):
        fit(FitConfig.from_dict({**TOY, "shifts": ["light:2", "layout:3"]}), tmp_path / "out", progress=False,
            until="graph")
    assert not (tmp_path / "out").exists()


def test_a_fit_refuses_an_out_that_holds_something_else(tmp_path):
    from fit.pipeline import MANIFEST, fit

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(R2AInputError, match="exists and holds no fit.json; give an empty or new --out"):
        fit(FitConfig.from_dict(TOY), out, progress=False, until="graph")
    (out / MANIFEST).write_text(json.dumps({"format": "r2a.fit", "version": 99}))
    with pytest.raises(R2AInputError, match="version"):
        fit(FitConfig.from_dict(TOY), out, progress=False, until="graph")
    assert (out / "notes.txt").read_text() == "mine"


def test_the_command_takes_set_and_until_and_says_what_it_made(tmp_path, capsys):
    import yaml

    from fit.pipeline import MANIFEST
    from r2a_cli.main import main

    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump(TOY))
    out = tmp_path / "out"
    args = ["fit", "--config", str(config), "--out", str(out), "--no-progress"]
    assert main([*args, "--set", "graph_episodes=2", "--set", "base=openpi:ws://127.0.0.1:9", "--until", "graph"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert list(said["steps"]) == ["graph"] and said["policy"] == f"r2a:{out}"
    recorded = json.loads((out / MANIFEST).read_text())
    assert recorded["config"]["graph_episodes"] == 2 and recorded["base"] == "openpi:ws://127.0.0.1:9"
    assert main([*args, "--set", "graph_episode=2"]) == 2
    assert "graph_episode" in capsys.readouterr().err


def test_fields_a_resumed_fit_may_change_are_fields_read_only_from_a_later_step():
    from dataclasses import fields

    from fit.config import BASE_FREE_STEPS, EXECUTION_FIELDS, FIRST_READ_BY, STEPS

    names = {f.name for f in fields(FitConfig)}
    assert set(FIRST_READ_BY) <= names and not set(FIRST_READ_BY) & set(EXECUTION_FIELDS)
    assert set(FIRST_READ_BY.values()) <= set(STEPS) - {STEPS[0]}  # the first step reads every other field
    assert STEPS[:len(BASE_FREE_STEPS)] == BASE_FREE_STEPS  # the base-free steps run first, then the base's
    assert FIRST_READ_BY["base"] not in BASE_FREE_STEPS and FIRST_READ_BY["deploy"] == "config"


def test_the_shipped_fit_configs_load():
    from r2a_core.config import shipped_path

    for path in sorted(shipped_path("configs/fit").glob("*.yaml")):
        config = FitConfig.from_yaml(path)
        assert config.tasks and all(last < 100_000 for _, _, last in config.seed_ranges()), path


def test_a_fit_checks_its_base_before_any_step(tmp_path):
    from fit.pipeline import fit

    config = FitConfig.from_dict({**TOY, "base": f"lerobot:{tmp_path / 'no_checkpoint'}"})
    with pytest.raises(R2AInputError, match="no_checkpoint: not a directory"):
        fit(config, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.slow
def test_a_fit_around_a_served_base_queries_it_only_over_the_protocol_and_wraps_it(tmp_path):
    """Bring-your-own-VLA at toy scale (~3 min): the base is a server the fit reaches only over the openpi protocol,
    as a LeRobot ACT in its own venv is — the retriever's chunks and DAgger's closed loop (two workers, two
    connections to one server) go through it, and the fitted directory wraps the same address."""
    from fit.pipeline import fit
    from r2a.policies import make_policy
    from r2a.serve.policy_server import PolicyServer

    server = PolicyServer(make_policy("builtin", sim=None, seed=0), port=0)
    base = f"openpi:ws://127.0.0.1:{server.start()}"
    try:
        config = FitConfig.from_dict({**TOY, "base": base, "workers": 2, "dagger_episodes": 2})
        manifest = fit(config, tmp_path / "fit", progress=False)
        assert manifest["base"] == base and list(manifest["steps"])[-1] == "config"
        assert (tmp_path / "fit" / "work" / "dagger" / "round1" / "Lift_camera2.hdf5").is_file()
        _, summary = _wrap_and_run(tmp_path / "fit")
    finally:
        server.stop()
    assert summary["steps"] == 24 and np.isfinite(summary["trace"]["ee_pos"]).all()
