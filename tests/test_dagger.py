"""DAgger collection: the learner drives, the scripted expert (in relabel mode) labels, training keeps failures."""

import json
import subprocess
import sys

import numpy as np
import pytest

from r2a.adapters.callable_policy import CallablePolicy
from r2a_core.errors import R2AInputError
from training.dagger import LearnerControl, LearnerExecutor

LABEL = np.zeros(7, np.float32)


def _control(beta: float, n_action_steps: int = 2, seed: int = 0) -> LearnerControl:
    learner = CallablePolicy(lambda obs: np.full((4, 7), 0.5, np.float32), 7)
    return LearnerControl(learner, 7, beta=beta, seed=seed, n_action_steps=n_action_steps)


def test_the_learner_drives_and_the_expert_label_is_untouched():
    control = _control(beta=0.0)
    executed = [control(LABEL, t, {}) for t in range(6)]
    assert all(np.all(a == 0.5) for a in executed) and np.all(LABEL == 0)
    assert control.summary() == {"learner": "learner", "beta": 0.0, "learner_steps": 6, "expert_steps": 0}
    expert_only = _control(beta=1.0)
    assert all(np.all(expert_only(LABEL, t, {}) == 0) for t in range(6))
    assert expert_only.summary()["expert_steps"] == 6


def test_the_mixture_hands_over_whole_chunks_reproducibly():
    def sources(seed: int) -> list[bool]:
        control = _control(beta=0.5, n_action_steps=3, seed=seed)
        return [bool(control(LABEL, t, {})[0] == 0) for t in range(60)]

    by_expert = sources(seed=4)
    chunks = np.array(by_expert).reshape(20, 3)
    assert np.all(chunks == chunks[:, :1])  # a chunk is executed by one of the two, never split
    assert 0 < chunks[:, 0].sum() < 20 and by_expert == sources(seed=4) and by_expert != sources(seed=5)


@pytest.mark.parametrize("beta", [-0.1, 1.5])
def test_beta_outside_zero_one_is_an_input_error(beta):
    with pytest.raises(R2AInputError, match="0 <= beta <= 1"):
        _control(beta=beta)
    with pytest.raises(R2AInputError, match="0 <= beta <= 1"):
        LearnerExecutor("builtin", beta)


def test_an_unknown_learner_lists_the_valid_policies():
    with pytest.raises(R2AInputError, match="unknown policy 'bulitin'.*builtin"):
        LearnerExecutor("bulitin:ckpt")


# ----------------------------------------------------------------------------------------- real simulator
@pytest.fixture
def idle_learner(tmp_path, monkeypatch) -> str:
    """A learner that never moves: every state it reaches is the initial one, for the expert to label."""
    (tmp_path / "r2a_test_idle.py").write_text("import numpy as np\n\ndef idle(obs):\n    return np.zeros(7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "callable:r2a_test_idle:idle"


def _sim(task: str = "Lift"):
    pytest.importorskip("robosuite")
    from sim.envs.robosuite_env import SimConfig, SimEnv

    return SimEnv(SimConfig(task=task, cameras=()))


def test_relabel_expert_skips_ahead_when_the_cube_is_already_in_hand():
    from demos.experts.scripted import make_expert

    sim = _sim()
    obs, driver = sim.reset(3), make_expert(sim)
    for _ in range(150):
        if driver.phase.name == "lift" and sim.is_grasped("cube"):
            break
        obs = sim.step(driver.infer(obs)["actions"][0])
    assert sim.is_grasped("cube")
    fresh, relabel = make_expert(sim).infer(obs), make_expert(sim, relabel=True).infer(obs)
    assert fresh["phase"] == "hover" and fresh["actions"][0, 6] == -1.0  # a script from the start: open
    assert relabel["phase"] == "lift" and relabel["actions"][0, 6] == 1.0  # follows the state: keep holding
    sim.close()


def test_relabel_expert_goes_on_to_releasing_when_the_learner_already_placed_the_cube():
    from demos.experts.scripted import make_expert

    sim = _sim("Stack")
    obs, driver = sim.reset(2), make_expert(sim)
    for _ in range(200):
        if driver.phase.name == "retreat":
            break
        obs = sim.step(driver.infer(obs)["actions"][0])
    assert sim.evaluate()[0]["stacked"] and not sim.is_grasped("cubeA")
    fresh, relabel = make_expert(sim).infer(obs), make_expert(sim, relabel=True).infer(obs)
    assert fresh["phase"] == "hover"  # a script from the start: pick the red cube (off the tower) again
    assert relabel["phase"] == "release" and relabel["actions"][0, 6] == -1.0
    sim.close()


def test_relabel_expert_falls_back_to_the_waypoint_above_when_the_hand_drifts_sideways():
    from demos.experts.scripted import make_expert

    sim = _sim()
    obs, expert = sim.reset(3), make_expert(sim, relabel=True)
    for _ in range(60):  # drive until the descent starts
        if expert.phase.name == "descend":
            break
        obs = sim.step(expert.infer(obs)["actions"][0])
    assert expert.phase.name == "descend"
    for _ in range(6):  # then push the hand 5 cm sideways
        obs = sim.step(np.array([0, 1.0, 0, 0, 0, 0, -1], np.float32))
    assert expert.infer(obs)["phase"] == "hover"
    sim.close()


def _hover_off_centre(sim, expert, seed: int, sideways: float):
    """Let the (relabel) expert drive Stack until it starts lowering the red cube, then push the hand sideways
    until the cube hangs more than ``sideways`` (m) off centre above the green one."""
    obs = sim.reset(seed)
    for _ in range(200):
        if expert.phase.name == "lower":
            break
        obs = sim.step(expert.infer(obs)["actions"][0])
    assert expert.phase.name == "lower" and sim.is_grasped("cubeA")
    for _ in range(10):
        if np.linalg.norm(sim.object_pos("cubeA")[:2] - sim.object_pos("cubeB")[:2]) > sideways:
            break
        obs = sim.step(np.array([0, 0.4, 0, 0, 0, 0, 1], np.float32))
    return obs


def test_funnel_expert_lowers_and_centres_together_where_the_default_goes_back_up():
    from demos.experts.scripted import FUNNEL_SLOPE, make_expert

    sim = _sim("Stack")
    expert = make_expert(sim, relabel=True, variant="scripted-funnel")
    obs = _hover_off_centre(sim, expert, seed=2, sideways=0.017)
    offset = sim.object_pos("cubeA") - sim.object_pos("cubeB")
    sideways, height = float(np.linalg.norm(offset[:2])), float(offset[2] - 0.045 - 0.005)
    assert 0.016 < sideways < 0.03 and height > FUNNEL_SLOPE * sideways  # off centre, above the funnel
    default = make_expert(sim, relabel=True)
    default._go_to(expert._index)  # the same phase: lowering
    assert default.infer(obs)["phase"] == "carry"  # drifted > 2 x 8 mm: back up to the waypoint above
    label = expert.infer(obs)
    assert label["phase"] == "lower"
    action = label["actions"][0]
    assert action[2] < 0 and float(action[:2] @ -offset[:2]) > 0  # down and back towards the centre at once
    for _ in range(3):  # held low but off centre, the label centres it without lifting it back up
        obs = sim.step(np.array([0, 0, -1, 0, 0, 0, 1], np.float32))
    offset = sim.object_pos("cubeA") - sim.object_pos("cubeB")
    label = expert.infer(obs)
    assert label["phase"] == "lower" and label["actions"][0][2] <= 0.05
    assert float(label["actions"][0][:2] @ -offset[:2]) > 0
    sim.close()


def test_unknown_expert_variant_lists_the_valid_ones():
    from demos.experts.scripted import expert_variant

    with pytest.raises(R2AInputError, match="valid: scripted, scripted-funnel"):
        expert_variant("funnel")


def test_idle_learner_episode_keeps_expert_labels_and_training_keeps_the_failure(idle_learner, tmp_path):
    from demos.collect import CollectConfig, collect
    from demos.hdf5_io import read_hdf5
    from training.vla.data import load_training_episodes

    out = tmp_path / "dagger.hdf5"
    result = collect(CollectConfig(task="Lift", episodes=1, out=out, seed=5, cameras=(),
                                   executor=LearnerExecutor(idle_learner, 0.0)), progress=False)
    (episode,) = read_hdf5(out)
    assert result.successes == 0 and len(episode) == 150  # the robot never moved: the horizon
    assert np.ptp(episode.ee_pos, axis=0).max() < 0.01  # ... it stayed where it started
    assert np.abs(episode.actions[:, :3]).max() > 0.5 and np.all(episode.actions[:, 6] == -1)  # "go, open"
    assert episode.meta["dagger"] == {"learner": idle_learner, "beta": 0.0, "learner_steps": 150,
                                      "expert_steps": 0}
    assert episode.meta["expert"] == "scripted"  # the default variant, recorded
    kept, (source,) = load_training_episodes([out])
    assert len(kept) == 1 and source["on_policy_failures"] == 1 and source["skipped_failures"] == 0


def test_relabel_expert_in_full_control_still_solves_the_task(idle_learner, tmp_path):
    from demos.collect import CollectConfig, collect
    from demos.hdf5_io import read_hdf5

    out = tmp_path / "expert.hdf5"
    result = collect(CollectConfig(task="Lift", episodes=2, out=out, seed=0, cameras=(),
                                   executor=LearnerExecutor(idle_learner, 1.0)), progress=False)
    assert result.successes == 2
    assert all(ep.meta["dagger"]["learner_steps"] == 0 for ep in read_hdf5(out))


def test_dagger_under_a_shift_records_the_shift_and_what_was_executed(idle_learner, tmp_path):
    from demos.collect import CollectConfig, collect
    from demos.hdf5_io import read_hdf5

    out = tmp_path / "shifted.hdf5"
    collect(CollectConfig(task="Lift", episodes=1, out=out, seed=7, cameras=(), shift="robot_init:2",
                          executor=LearnerExecutor(idle_learner, 0.0)), progress=False)
    clean = tmp_path / "clean.hdf5"
    collect(CollectConfig(task="Lift", episodes=1, out=clean, seed=7, cameras=(),
                          executor=LearnerExecutor(idle_learner, 0.0)), progress=False)
    (episode,), (reference,) = read_hdf5(out), read_hdf5(clean)
    assert episode.meta["shift"]["factor"] == "robot_init" and episode.meta["shift"]["seed"] == 7
    assert np.linalg.norm(episode.ee_pos[0] - reference.ee_pos[0]) > 0.01  # the start pose really moved
    executed = np.asarray(episode.meta["executed_actions"])
    assert executed.shape == episode.actions.shape and np.abs(executed[:, :6]).max() == 0.0  # the idle learner's
    with pytest.raises(R2AInputError, match="expected FACTOR:LEVEL"):
        collect(CollectConfig(task="Lift", episodes=1, out=tmp_path / "x.hdf5", shift="robot_init"))


def r2a(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "r2a_cli", *args], capture_output=True, text=True)


def test_policy_dagger_command_with_the_shipped_checkpoint(tmp_path):
    pytest.importorskip("robosuite")
    out = tmp_path / "lift_dagger.hdf5"
    done = r2a("policy", "dagger", "--policy", "builtin", "--task", "Lift", "--episodes", "1", "--beta", "0.5",
               "--seed", "100", "--expert", "scripted-funnel", "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 1 and summary["out"] == str(out)
    from demos.hdf5_io import read_hdf5

    (episode,) = read_hdf5(out)
    dagger = episode.meta["dagger"]
    assert dagger["learner"] == "builtin" and dagger["learner_steps"] + dagger["expert_steps"] == len(episode)
    assert episode.meta["expert"] == "scripted-funnel"
    assert episode.images["agentview"].shape[1:] == (64, 64, 3)
    assert episode.label_chunks.shape == (len(episode), 8, 7)  # lookahead chunk labels by default
    bad = r2a("policy", "dagger", "--policy", "builtin", "--task", "Lift", "--episodes", "1", "--beta", "2",
              "--out", str(tmp_path / "bad.hdf5"))
    assert bad.returncode == 2 and "0 <= beta <= 1" in bad.stderr and not (tmp_path / "bad.hdf5").exists()
