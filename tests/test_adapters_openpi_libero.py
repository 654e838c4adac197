"""openpi's LIBERO convention (configs/adapters/openpi_libero.yaml, r2a/adapters/libero_convention.py).

On LIBERO's own scene our adapter must send exactly what openpi's LIBERO example client (openpi's
examples/libero/main.py, re-implemented below from its few lines, with openpi_client's real image_tools) sends
from LIBERO's raw observation at the same state; and a stand-in for openpi's π0.5-LIBERO server (openpi's wire
format, loopback) must get that request — keys, shapes, dtypes, values — from the bench's ``openpi:openpi_libero``
and from ``r2a serve --upstream``, and its (10, 7) chunk must come back as the actions. The real-scene test needs
the ``libero`` extra and skips with one line without it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from r2a.adapters import libero_convention as lc
from r2a.adapters.keymap import ADAPTER_DIR, load_keymap
from r2a.policies import make_policy
from r2a_core.policy import ChunkBroker
from r2a_core.rotations import axis_angle_to_quat, wxyz_to_xyzw
from r2a_core.types import OSC_POSE_DELTA, gripper_opening
from tests.test_libero import needs_libero

image_tools = pytest.importorskip("openpi_client.image_tools")
openpi_msgpack = pytest.importorskip("openpi_client.msgpack_numpy")

ADAPTER = ADAPTER_DIR / "openpi_libero.yaml"
EXAMPLE_KEYS = ["observation/image", "observation/state", "observation/wrist_image", "prompt"]
RESIZE, REPLAN_STEPS = 224, 5  # the example's Args.resize_size and Args.replan_steps


def robosuite_quat2axisangle(quat: np.ndarray) -> np.ndarray:
    """The example's ``_quat2axisangle`` ("copied from robosuite"): robosuite's own when it is installed."""
    try:
        from robosuite.utils.transform_utils import quat2axisangle
    except ImportError:
        return lc.quat2axisangle(quat)
    return quat2axisangle(np.array(quat, np.float64))


def example_request(raw: dict, prompt: str) -> dict:
    """What examples/libero/main.py sends for LIBERO's raw observation ``raw`` (OpenGL rows, xyzw quaternion)."""
    def image(frame: np.ndarray) -> np.ndarray:
        rotated = np.ascontiguousarray(frame[::-1, ::-1])  # "rotate 180 degrees to match train preprocessing"
        return image_tools.convert_to_uint8(image_tools.resize_with_pad(rotated, RESIZE, RESIZE))

    return {"observation/image": image(raw["agentview_image"]),
            "observation/wrist_image": image(raw["robot0_eye_in_hand_image"]),
            "observation/state": np.concatenate((raw["robot0_eef_pos"],
                                                 robosuite_quat2axisangle(raw["robot0_eef_quat"]),
                                                 raw["robot0_gripper_qpos"])),
            "prompt": str(prompt)}


def assert_same_request(ours: dict, expected: dict) -> None:
    assert sorted(ours) == sorted(expected) == EXAMPLE_KEYS
    for key in ("observation/image", "observation/wrist_image"):
        assert ours[key].shape == expected[key].shape == (RESIZE, RESIZE, 3)
        assert ours[key].dtype == expected[key].dtype == np.uint8
        np.testing.assert_array_equal(ours[key], expected[key])
    state, want = ours["observation/state"], expected["observation/state"]
    assert state.shape == want.shape == (8,) and state.dtype == want.dtype == np.float64
    np.testing.assert_array_equal(state, want)  # the same float64 numbers: no rounding anywhere
    assert isinstance(ours["prompt"], str) and ours["prompt"] == expected["prompt"]


def _raw_of(obs: dict) -> dict:
    """LIBERO's raw observation behind one of our LIBERO-backend observations (our upright rows reversed)."""
    return {"agentview_image": obs["images/agentview"][::-1], "robot0_eye_in_hand_image": obs["images/wrist"][::-1],
            "robot0_eef_pos": obs[lc.LIBERO_EEF_POS], "robot0_eef_quat": wxyz_to_xyzw(obs[lc.LIBERO_EEF_QUAT]),
            "robot0_gripper_qpos": obs[lc.LIBERO_GRIPPER_QPOS]}


# --------------------------------------------------------------------------------- the convention's pieces
def test_the_convention_helpers_match_openpi_and_robosuite():
    rng = np.random.default_rng(0)
    for shape in [(256, 256, 3), (200, 256, 3), (256, 180, 3), (224, 224, 3), (64, 64, 3)]:
        img = rng.integers(0, 256, shape, dtype=np.uint8)
        np.testing.assert_array_equal(lc.resize_with_pad(img, RESIZE, RESIZE),
                                      image_tools.resize_with_pad(img, RESIZE, RESIZE))
    for quat in [rng.normal(size=4) for _ in range(20)] + [np.array([0.9995, -0.02, -0.0235, -0.0044])]:
        quat = quat / np.linalg.norm(quat)  # w of either sign: the angle lies in [0, 2π], as LIBERO's data has it
        np.testing.assert_array_equal(lc.quat2axisangle(quat), robosuite_quat2axisangle(quat))
    np.testing.assert_array_equal(lc.quat2axisangle(np.array([0.0, 0.0, 0.0, 1.0])), np.zeros(3))
    site = axis_angle_to_quat(np.array([2.9, 0.3, -0.2]))
    hand = lc.hand_quat_from_site(site)
    assert hand[1] >= 0  # the sign of LIBERO's start poses
    np.testing.assert_allclose(lc.site_quat_from_hand(hand), site, atol=1e-12)
    np.testing.assert_allclose(lc.site_quat_from_hand(-hand), site, atol=1e-12)


def test_the_libero_backend_names_the_keys_the_adapter_reads():
    from sim.envs.libero_env import LIBERO_STATE_KEYS

    assert tuple(LIBERO_STATE_KEYS) == lc.LIBERO_STATE_KEYS
    assert set(LIBERO_STATE_KEYS.values()) == {"robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos"}


# ------------------------------------------------------------------------------------------ the real scene
@needs_libero
def test_on_libero_the_adapter_sends_what_openpis_example_client_sends():
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig

    keymap = load_keymap(ADAPTER)
    sim = make_sim(SimConfig(task="libero_spatial/0", image_size=256))
    try:
        prompt = sim._suite_task.language  # what the example sends: LIBERO's task.language
        obs = sim.reset(100000)  # LIBERO's init state 0, settled by its 10 no-ops
        assert obs["prompt"] == prompt
        steps = ([0.0] * 6 + [-1.0], [0.4, -0.3, 0.2, 0.1, 0.2, -0.3, 1.0], [-0.2, 0.5, -0.4, 0.0, -0.2, 0.3, 1.0])
        for action in steps:
            obs = sim.step(np.array(action))
            # the raw observation LIBERO's step returned (its observables, unchanged since); LIBERO's own
            # process keeps OpenGL's rows, which reverse ours (checked against a raw render below)
            raw = sim.raw_env._get_observations()
            assert np.array_equal(raw["agentview_image"], obs["images/agentview"])
            libero_raw = {**raw, "agentview_image": raw["agentview_image"][::-1],
                          "robot0_eye_in_hand_image": raw["robot0_eye_in_hand_image"][::-1]}
            assert_same_request(keymap.map_obs(obs), example_request(libero_raw, prompt))

        # at the current state, LIBERO's images straight from MuJoCo's renderer (bottom-up rows, no convention)
        obs = sim.refresh_observation()
        raw = dict(sim.raw_env._get_observations())
        for key, camera in (("agentview_image", "agentview"), ("robot0_eye_in_hand_image", "robot0_eye_in_hand")):
            raw[key] = sim.sim.render(camera_name=camera, height=256, width=256)
        np.testing.assert_array_equal(raw["agentview_image"], obs["images/agentview"][::-1])
        request = keymap.map_obs(obs)
        assert_same_request(request, example_request(raw, prompt))
        upright = obs["images/agentview"]  # the model's view: our upright frame mirrored left-right
        np.testing.assert_array_equal(request["observation/image"],
                                      image_tools.resize_with_pad(np.ascontiguousarray(upright[:, ::-1]), 224, 224))

        # without LIBERO's own keys (another simulator, a real robot) they are derived from ours: close, not exact
        ours_only = {k: v for k, v in obs.items() if not k.startswith("state/libero/")}
        derived = keymap.map_obs(ours_only)["observation/state"]
        exact = request["observation/state"]
        np.testing.assert_allclose(derived[:3], exact[:3], atol=1e-3)   # one physics substep apart
        np.testing.assert_allclose(derived[3:6], exact[3:6], atol=0.01)  # the hand from the grip site, same sign
        np.testing.assert_allclose(derived[6:], exact[6:], atol=1e-3)   # symmetric fingers
    finally:
        sim.close()


# ------------------------------------------------------------------------ a stand-in π0.5-LIBERO server
class StandInUpstream:
    """openpi's policy server as a π0.5-LIBERO checkpoint looks on the wire (openpi_client's msgpack-numpy):
    its metadata first, then one (10, 7) float32 chunk per request; every request is kept. Loopback, a free
    port, messages up to 8 MiB."""

    CHUNK = np.round(np.linspace(-0.9, 0.9, 70, dtype=np.float32).reshape(10, 7), 3)
    CHUNK[:, 6] = np.where(np.arange(10) < 6, -1.0, 1.0)  # LIBERO's gripper: -1 open, +1 close

    def __init__(self) -> None:
        from websockets.sync.server import serve

        self.requests: list[dict] = []
        self._server = serve(self._handle, "127.0.0.1", 0, compression=None, max_size=8 << 20)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"ws://127.0.0.1:{self._server.socket.getsockname()[1]}"

    def _handle(self, connection) -> None:
        connection.send(openpi_msgpack.packb({}))  # pi05_libero's policy metadata
        for message in connection:
            self.requests.append(openpi_msgpack.unpackb(message))
            connection.send(openpi_msgpack.packb({"actions": self.CHUNK, "server_timing": {"infer_ms": 1.0}}))

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)


@pytest.fixture
def upstream():
    server = StandInUpstream()
    yield server
    server.close()


def libero_backend_obs(seed: int = 0) -> dict:
    """An observation as the LIBERO backend makes one at 256 px: ours (float32) plus LIBERO's own (float64)."""
    rng = np.random.default_rng(seed)
    site = axis_angle_to_quat(np.array([2.2, 2.2, 0.05]))  # the grip site pointing down
    hand = lc.hand_quat_from_site(site)
    return {"images/agentview": rng.integers(0, 256, (256, 256, 3), dtype=np.uint8),
            "images/wrist": rng.integers(0, 256, (256, 256, 3), dtype=np.uint8),
            "state/ee_pos": np.array([-0.2, 0.01, 1.17], np.float32), "state/ee_quat": site.astype(np.float32),
            "state/gripper": np.float32(0.96), "state/joint_pos": np.zeros(7, np.float32), "state/step": 0,
            lc.LIBERO_EEF_POS: np.array([-0.2105493, -0.0114551, 1.1748394]), lc.LIBERO_EEF_QUAT: hand,
            lc.LIBERO_GRIPPER_QPOS: np.array([0.0386967, -0.0386805]),
            "prompt": "pick up the black bowl between the plate and the ramekin and place it on the plate"}


def _adapter_at(url: str, tmp_path: Path) -> Path:
    """The shipped adapter, unchanged but for its url (the stand-in's free port)."""
    text = ADAPTER.read_text()
    assert "url: ws://localhost:8000\n" in text
    path = tmp_path / "openpi_libero.yaml"
    path.write_text(text.replace("url: ws://localhost:8000\n", f"url: {url}\n"))
    return path


def test_the_bench_spec_sends_the_example_clients_request_and_executes_five_of_each_chunk(upstream, tmp_path):
    from eval.bench_config import BenchConfig
    from r2a_core.config import load_config

    config = load_config(BenchConfig, "configs/bench/libero_spatial.yaml", [])
    assert config.n_action_steps == REPLAN_STEPS and config.image_size == 256
    policy = make_policy(f"openpi:{_adapter_at(upstream.url, tmp_path)}", SimpleNamespace(action_space=OSC_POSE_DELTA))
    try:
        obs = libero_backend_obs()
        reply = policy.infer(obs)
        assert_same_request(upstream.requests[0], example_request(_raw_of(obs), obs["prompt"]))
        assert reply["actions"].shape == (10, 7) and reply["actions"].dtype == np.float32
        np.testing.assert_array_equal(reply["actions"], StandInUpstream.CHUNK)  # in bounds, LIBERO's convention
        broker = ChunkBroker(policy, 7, config.n_action_steps)  # what the rollout loop does with it
        executed = [broker.act(libero_backend_obs(i)) for i in range(REPLAN_STEPS + 1)]
        assert len(upstream.requests) == 3  # one more query after five actions, as the example replans
        np.testing.assert_array_equal(executed[:REPLAN_STEPS], StandInUpstream.CHUNK[:REPLAN_STEPS])
        np.testing.assert_array_equal(executed[REPLAN_STEPS], StandInUpstream.CHUNK[0])
    finally:
        policy.inner.close()


def test_r2a_serve_upstream_passes_the_example_clients_request_through(upstream, tmp_path, monkeypatch):
    from graph_builder.build import build_graph_from_episodes
    from graph_builder.storage import save_graph
    from graph_builder.synthetic import synthetic_episodes
    from r2a.serve.policy_server import PolicyServer
    from r2a_cli import serve as serve_cli

    wcp = pytest.importorskip("openpi_client.websocket_client_policy")
    graph = save_graph(build_graph_from_episodes(synthetic_episodes(600, seed=0, num_tasks=1, mean_length=60)),
                       tmp_path / "graph")
    # the example executes 5 actions per query; a seed distance no state passes: always the upstream's chunk
    spec = (f"r2a:?graph={graph}&retriever=null&retrieval.mode=knn&recovery.enabled=false&gate.kind=constant"
            f"&executed_steps={REPLAN_STEPS}&fallback.max_seed_distance=0.000001")
    served = []
    monkeypatch.setattr(PolicyServer, "serve_forever", lambda self: served.append(self))
    args = ["--policy", spec, "--upstream", upstream.url, "--keymap", "openpi_libero", "--upstream-wait", "5",
            "--port", "0"]
    assert serve_cli.run(serve_cli.build_parser("r2a serve").parse_args(args)) == 0
    (proxy_server,) = served
    port = proxy_server.start()
    try:
        client = wcp.WebsocketClientPolicy(host="127.0.0.1", port=port)  # openpi's example client's own class
        obs = libero_backend_obs()
        element = example_request(_raw_of(obs), obs["prompt"])
        reply = client.infer(element)
        assert_same_request(upstream.requests[-1], element)  # forwarded to the VLA unchanged
        actions = reply["actions"]
        assert reply["r2a"]["fallback"] == "far_from_graph" and actions.shape == (REPLAN_STEPS, 7)
        np.testing.assert_array_equal(actions, StandInUpstream.CHUNK[:REPLAN_STEPS])
        seen = proxy_server.policy.r2a_observation(element)  # what R2A read: the grip site, our opening
        np.testing.assert_allclose(seen["state/ee_pos"], obs[lc.LIBERO_EEF_POS], atol=1e-12)
        np.testing.assert_allclose(seen["state/ee_quat"], obs["state/ee_quat"], atol=1e-6)
        np.testing.assert_allclose(seen["state/gripper"], gripper_opening(obs[lc.LIBERO_GRIPPER_QPOS]), atol=1e-12)
    finally:
        proxy_server.stop()
        proxy_server.policy.close()
