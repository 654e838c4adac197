"""``r2a serve``: R2A as a drop-in proxy between openpi's real client and a real upstream server, on loopback.

The robot side is ``openpi_client.websocket_client_policy.WebsocketClientPolicy`` speaking openpi's LIBERO keys
(configs/adapters/openpi_libero.yaml); the upstream is our PolicyServer serving a deterministic chunk; R2A runs
on a small synthetic graph with plain nearest neighbours (no trained checkpoint).
"""

from __future__ import annotations

import numpy as np
import pytest

from graph_builder.build import build_graph_from_episodes
from graph_builder.storage import save_graph
from graph_builder.synthetic import synthetic_episodes
from r2a.adapters.keymap import ADAPTER_DIR, ActionMap, KeyMap, load_keymap
from r2a.adapters.libero_convention import hand_quat_from_site, quat2axisangle
from r2a.adapters.openpi_policy import OpenPIWebsocketPolicy, PolicyServerError
from r2a.serve.policy_server import PolicyServer
from r2a.serve.proxy import R2AProxyPolicy, build_proxy
from r2a.wrapper.build import build_r2a, load_r2a_config
from r2a_cli import serve as serve_cli
from r2a_core.errors import R2AInputError
from r2a_core.rotations import wxyz_to_xyzw
from r2a_core.types import OSC_POSE_DELTA, PANDA_GRIPPER_MAX_OPENING
from tests.test_adapters_openpi import _reserved_port, takes_over_reserved_port

wcp = pytest.importorskip("openpi_client.websocket_client_policy")

LIBERO = load_keymap(ADAPTER_DIR / "openpi_libero.yaml")
UPSTREAM_METADATA = {"model": "chunk-upstream", "action_horizon": 10}
KNN = ["retriever=null", "retrieval.mode=knn", "recovery.enabled=false"]


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    episodes = synthetic_episodes(3000, seed=0, num_tasks=2, mean_length=80)
    return episodes, save_graph(build_graph_from_episodes(episodes), tmp_path_factory.mktemp("g") / "graph")


class ChunkUpstream:
    """The VLA behind the proxy: one fixed (10, 7) chunk, or the malformed reply the test asks for."""

    CHUNK = (np.tile(np.array([0.5, -0.5, 0.2, 0.1, 0.0, 0.0, 1.0], np.float32), (10, 1))
             + np.linspace(0, 0.1, 10, dtype=np.float32)[:, None] * np.array([1, 1, 1, 0, 0, 0, 0], np.float32))

    def __init__(self) -> None:
        self.mode, self.seen, self.resets = "ok", [], 0

    def reset(self) -> None:
        self.resets += 1

    def infer(self, obs):
        self.seen.append(obs)
        extra = {"note": "passed through"}
        if self.mode == "raise":
            raise ValueError("the model exploded")
        if self.mode == "no_actions":
            return extra
        if self.mode == "wrong_shape":
            return {**extra, "actions": np.zeros((10, 5), np.float32)}
        if self.mode == "nan":
            return {**extra, "actions": np.full((10, 7), np.nan, np.float32)}
        if self.mode == "empty":
            return {**extra, "actions": np.zeros((0, 7), np.float32)}
        if self.mode == "huge":
            return {**extra, "actions": 4 * self.CHUNK}
        return {**extra, "actions": self.CHUNK.copy()}


def _spec(graph_dir, *overrides: str) -> str:
    return "r2a:?" + "&".join([f"graph={graph_dir}", *KNN, *overrides])


def _libero_obs(episodes, index: int = 3, t: int = 20) -> dict:
    """openpi's LIBERO client observation for a synthetic demo frame (near the graph, so R2A blends)."""
    ep = episodes[index]
    half = float(ep.gripper[t]) * PANDA_GRIPPER_MAX_OPENING / 2
    hand = wxyz_to_xyzw(hand_quat_from_site(ep.ee_quat[t]))  # robot0_eef_quat: the hand body, xyzw
    state = np.concatenate([ep.ee_pos[t], quat2axisangle(hand), [half, -half]])
    image = np.arange(32 * 32 * 3, dtype=np.uint8).reshape(32, 32, 3)
    return {"observation/image": image, "observation/wrist_image": image[::-1].copy(), "observation/state": state,
            "prompt": ep.instruction}


def _r2a_obs(ep, t: int) -> dict:
    """A client speaking r2a's own keys (KeyMap.identity()) at a synthetic demo frame."""
    return {"state/ee_pos": ep.ee_pos[t], "state/ee_quat": ep.ee_quat[t], "state/gripper": np.float32(ep.gripper[t]),
            "prompt": ep.instruction, "state/step": t}


class Stack:
    """An upstream server, the proxy in front of it and openpi's client talking to the proxy."""

    def __init__(self, graph_dir, *overrides: str, keymap: KeyMap = LIBERO, port: int = 0, retry: float = 0.5):
        self.upstream = ChunkUpstream()
        self.upstream_server = PolicyServer(self.upstream, port=port, metadata=UPSTREAM_METADATA)
        self.url = f"ws://127.0.0.1:{self.upstream_server.start()}"
        self.proxy = build_proxy(_spec(graph_dir, *overrides), self.url, keymap, connect_timeout=5,
                                 reconnect_timeout=retry)
        self.server = PolicyServer(self.proxy, port=0, metadata=self.proxy.metadata)
        self.port = self.server.start()
        self.client = wcp.WebsocketClientPolicy(host="127.0.0.1", port=self.port)

    def close(self) -> None:
        self.server.stop()
        self.proxy.close()
        self.upstream_server.stop()


@pytest.fixture
def stack(demos):
    s = Stack(demos[1])
    yield s
    s.close()


def test_openpi_client_gets_blended_actions_and_the_upstream_sees_its_observation_unchanged(stack, demos):
    episodes, graph_dir = demos
    obs = _libero_obs(episodes)
    reply = stack.client.infer(obs)
    actions, chunk = reply["actions"], ChunkUpstream.CHUNK
    assert reply["r2a"]["fallback"] is None and actions.shape == (8, 7) and actions.dtype == np.float32
    assert np.isfinite(actions).all() and np.abs(actions).max() <= 1.0
    assert np.abs(actions[:, :6] - chunk[:8, :6]).max() > 1e-3  # R2A moved the chunk toward the demos
    np.testing.assert_array_equal(actions[:, 6], chunk[:8, 6])  # the gripper is the upstream's
    assert reply["note"] == "passed through" and "infer_ms" in reply["upstream_server_timing"]
    seen = stack.upstream.seen[-1]  # forwarded unchanged: same keys, same arrays, same prompt
    assert sorted(seen) == sorted(obs) and seen["prompt"] == obs["prompt"]
    for key in ("observation/image", "observation/wrist_image", "observation/state"):
        np.testing.assert_array_equal(seen[key], obs[key])
    # the same blend as the wrapper in-process around a base that returns the upstream's chunk
    config = load_r2a_config(None, [f"graph={graph_dir}", *KNN])
    base = type("Base", (), {"action_space": OSC_POSE_DELTA, "reset": lambda self: None,
                             "infer": lambda self, o: {"actions": chunk.copy()}})()
    expected = build_r2a(config, base).infer(stack.proxy.r2a_observation(obs))
    np.testing.assert_allclose(actions, expected["actions"], atol=1e-6)


def test_metadata_is_the_upstreams_plus_r2as(stack, demos):
    meta = stack.client.get_server_metadata()
    assert meta["model"] == "chunk-upstream" and meta["action_horizon"] == 10 and meta["n_action_steps"] == 8
    r2a = meta["r2a"]
    assert r2a["upstream"] == stack.url and r2a["config"]["base"] == f"openpi:{stack.url}"
    assert r2a["config"]["retrieval"]["mode"] == "knn" and r2a["adapter"].endswith("openpi_libero.yaml")
    assert r2a["artifacts"]["graph"]["path"].endswith("graph") and len(r2a["artifacts"]["graph"]["sha256"]) == 64


def test_a_fallback_returns_the_upstreams_actions_unchanged(demos):
    s = Stack(demos[1], "fallback.max_seed_distance=0.000001")
    try:
        reply = s.client.infer(_libero_obs(demos[0]))
    finally:
        s.close()
    assert reply["r2a"]["fallback"] == "far_from_graph"
    np.testing.assert_array_equal(reply["actions"], ChunkUpstream.CHUNK[:8])


def test_an_out_of_bounds_upstream_chunk_is_clipped_where_r2a_blends_and_where_it_falls_back(demos):
    for overrides, fallback in (((), None), (("fallback.max_seed_distance=0.000001",), "far_from_graph")):
        s = Stack(demos[1], *overrides)
        s.upstream.mode = "huge"  # up to ±2.4 where the action space ends at ±1
        try:
            reply = s.client.infer(_libero_obs(demos[0]))
        finally:
            s.close()
        assert reply["r2a"]["fallback"] == fallback and np.abs(reply["actions"]).max() <= 1.0
        if fallback:  # the upstream's chunk, only clipped
            np.testing.assert_array_equal(reply["actions"], np.clip(4 * ChunkUpstream.CHUNK[:8], -1, 1))


@pytest.mark.parametrize("mode, message", [
    ("no_actions", r"replied with a map with keys \['note', 'server_timing'\]; expected a map with 'actions'"),
    ("wrong_shape", r"malformed reply: .*actions of shape \(10, 5\), expected \(H, 7\)"),
    ("nan", r"replied with 70 non-finite action value\(s\) of 70"),
    ("empty", r"replied with actions of shape \(0, 7\), expected \(H, 7\) with H >= 1"),
    ("raise", r"failed \(ValueError: the model exploded\)")])
def test_a_bad_upstream_reply_is_a_clear_error_frame_and_the_proxy_keeps_serving(stack, demos, mode, message):
    obs = _libero_obs(demos[0])
    stack.upstream.mode = mode
    with pytest.raises(RuntimeError, match=rf"upstream error: upstream {stack.url}:? {message}"):
        stack.client.infer(obs)
    stack.upstream.mode = "ok"
    reply = stack.client.infer(obs)  # the same client connection, answered again
    assert reply["actions"].shape == (8, 7) and reply["r2a"]["fallback"] is None


@takes_over_reserved_port
def test_upstream_down_is_an_error_frame_then_the_proxy_reconnects(demos):
    obs = _libero_obs(demos[0])
    with _reserved_port() as port:
        s = Stack(demos[1], port=port)
        try:
            assert s.client.infer(obs)["r2a"]["fallback"] is None
            s.upstream_server.stop()
            # found closed when sending (or when receiving), then retried for 0.5 s: an error frame either way
            with pytest.raises(RuntimeError, match=rf"upstream error: upstream ws://127.0.0.1:{port}"):
                s.client.infer(obs)
            with pytest.raises(RuntimeError, match=rf"upstream error: upstream ws://127.0.0.1:{port}: nothing "
                                                   r"answered within 0.5 s"):
                s.client.infer(obs)
            restarted = ChunkUpstream()
            s.upstream_server = PolicyServer(restarted, port=port, metadata=UPSTREAM_METADATA)
            s.upstream_server.start()
            reply = s.client.infer(obs)  # reconnected on this request
            assert reply["actions"].shape == (8, 7) and len(restarted.seen) == 1
        finally:
            s.close()


@takes_over_reserved_port
def test_a_reset_with_the_upstream_down_neither_fails_nor_waits_and_the_next_request_reconnects(demos, caplog):
    """A robot client resets between episodes; an upstream restarting then must not fail the reset (the proxy
    warns, drops the connection and reconnects at the next request)."""
    episodes, graph_dir = demos
    obs = _r2a_obs(episodes[2], 16)
    with _reserved_port() as port:
        s = Stack(graph_dir, keymap=KeyMap.identity(), port=port, retry=0.3)
        try:
            with OpenPIWebsocketPolicy(f"ws://127.0.0.1:{s.port}") as ours:
                ours.infer(obs)
                s.upstream_server.stop()
                with caplog.at_level("WARNING", logger="r2a.serve.upstream"):
                    ours.reset()  # the proxy's reset reaches the wrapper; the upstream's is not delivered
                    ours.reset()  # now known to be down: not tried at all
                assert len(s.proxy.wrapper.history) == 0
                warned = [r.getMessage() for r in caplog.records if r.name == "r2a.serve.upstream"]
                assert len(warned) == 1 and f"upstream ws://127.0.0.1:{port}: the reset was not delivered" in warned[0]
                restarted = ChunkUpstream()
                s.upstream_server = PolicyServer(restarted, port=port, metadata=UPSTREAM_METADATA)
                s.upstream_server.start()
                assert ours.infer(obs)["actions"].shape == (8, 7) and len(restarted.seen) == 1
        finally:
            s.close()


@takes_over_reserved_port
def test_an_upstream_down_at_start_fails_clearly(demos):
    with _reserved_port() as port:
        with pytest.raises(R2AInputError, match=rf"--upstream: policy server ws://127.0.0.1:{port}: nothing "
                                                r"answered within 0.3 s"):
            build_proxy(_spec(demos[1]), f"ws://127.0.0.1:{port}", LIBERO, connect_timeout=0.3)


def test_an_observation_without_what_r2a_needs_is_refused_naming_the_key(stack, demos):
    obs = _libero_obs(demos[0])
    without = {k: v for k, v in obs.items() if k != "observation/state"}
    with pytest.raises(RuntimeError, match=r"bad request: R2A needs state/ee_pos, carried by model key "
                                           r"'observation/state'\[0:3\] \(.*openpi_libero.yaml\); the observation "
                                           r"has keys observation/image, observation/wrist_image, prompt"):
        stack.client.infer(without)
    with pytest.raises(RuntimeError, match=r"bad request: .*'observation/state' has 7 numbers, expected 8"):
        stack.client.infer({**obs, "observation/state": obs["observation/state"][:7]})
    assert stack.upstream.seen == []  # refused before anything went upstream
    assert stack.client.infer(obs)["actions"].shape == (8, 7)


def test_adapters_and_specs_the_proxy_cannot_use_are_refused_before_connecting(demos):
    nowhere = "ws://127.0.0.1:9"  # never contacted
    with pytest.raises(R2AInputError, match="needs state/ee_pos, state/ee_quat, state/gripper from every observation"):
        build_proxy(_spec(demos[1]), nowhere, KeyMap(copy={"prompt": "prompt"}, source="prompt-only.yaml"))
    with pytest.raises(R2AInputError, match="--policy must be r2a, r2a-builtin, r2a-builtin-libero, r2a-builtin-lib"):
        build_proxy("builtin", nowhere)


def test_our_client_resets_the_proxy_and_a_new_prompt_or_an_earlier_step_starts_an_episode(demos):
    episodes, graph_dir = demos
    s = Stack(graph_dir, keymap=KeyMap.identity())  # a client that speaks r2a's own keys
    obs = _r2a_obs(episodes[2], 16)
    try:
        with OpenPIWebsocketPolicy(f"ws://127.0.0.1:{s.port}") as ours:
            assert ours.metadata["r2a"]["spec"].startswith("r2a:") and ours.n_action_steps == 8
            assert ours.infer(obs)["r2a"]["fallback"] is None
            assert len(s.proxy.wrapper.history) > 0
            resets = s.upstream.resets
            ours.reset()  # through the proxy to the wrapper, and on to the upstream (ours takes resets)
            assert len(s.proxy.wrapper.history) == 0 and s.upstream.resets == resets + 1
            ours.infer(obs)
            ours.infer({**obs, "state/step": 24})
            ours.infer({**obs, "state/step": 0})  # the step went back: a new episode
            ours.infer({**obs, "state/step": 8, "prompt": "another task"})  # so is a new prompt
            assert s.upstream.resets == resets + 3
            with pytest.raises(PolicyServerError, match="could not answer: upstream error:"):
                s.upstream.mode = "nan"
                ours.infer(obs)
            s.upstream.mode = "ok"
            assert ours.infer(obs)["actions"].shape == (8, 7)  # our client kept its connection too
    finally:
        s.close()


# ------------------------------------------------------------------------------------------- key mapping

def test_unmap_obs_recovers_the_proprio_from_the_libero_state_and_ignores_images():
    quat = np.array([0.1, 0.9, 0.3, 0.2]) / np.linalg.norm([0.1, 0.9, 0.3, 0.2])
    ours = {"images/agentview": np.zeros((8, 8, 3), np.uint8), "images/wrist": np.zeros((8, 8, 3), np.uint8),
            "state/ee_pos": np.array([0.1, -0.2, 1.0]), "state/ee_quat": quat, "state/gripper": np.float32(0.6),
            "prompt": "lift"}
    back = LIBERO.unmap_obs(LIBERO.map_obs(ours))
    assert sorted(back) == ["prompt", "state/ee_pos", "state/ee_quat", "state/gripper"]
    np.testing.assert_allclose(back["state/ee_pos"], ours["state/ee_pos"], atol=1e-6)
    np.testing.assert_allclose(back["state/ee_quat"], quat, atol=1e-6)
    np.testing.assert_allclose(back["state/gripper"], 0.6, atol=1e-6)
    assert LIBERO.source_of("state/ee_quat") == "model key 'observation/state'[3:6] (state/libero/eef_axis_angle)"
    assert LIBERO.source_of("state/step") is None
    with pytest.raises(R2AInputError, match=r"'observation/state' has 9 numbers, expected 8"):
        LIBERO.unmap_obs({"observation/state": np.zeros(9)})


def test_a_state_with_a_key_of_unknown_width_is_split_from_both_ends():
    km = KeyMap(state={"s": ("state/ee_pos", "state/joint_pos", "state/gripper", "state/step")})
    back = km.unmap_obs({"s": np.arange(12.0)})
    np.testing.assert_array_equal(back["state/ee_pos"], [0, 1, 2])
    np.testing.assert_array_equal(back["state/joint_pos"], np.arange(3.0, 10.0))
    assert float(back["state/gripper"]) == 10.0 and back["state/step"] == 11
    assert km.source_of("state/gripper") == "model key 's'[-2:-1]"
    direct = KeyMap(copy={"q": "state/ee_quat"}, state={"s": ("state/ee_axis_angle",)})
    np.testing.assert_array_equal(direct.unmap_obs({"q": [1.0, 0, 0, 0], "s": [0, 0, 1.0]})["state/ee_quat"],
                                  [1.0, 0, 0, 0])  # found directly beats derived


@pytest.mark.parametrize("model_dim", [6, 7, 8])
def test_unmap_actions_inverts_map_actions(model_dim):
    km = KeyMap(actions=ActionMap(model_dim=model_dim, flip_gripper=True, scale=(2.0, 2, 2, 0.5, 0.5, 0.5, 1)))
    model = np.linspace(-0.4, 0.4, 4 * model_dim, dtype=np.float32).reshape(4, model_dim)
    ours = km.map_actions(model, OSC_POSE_DELTA)
    back = km.unmap_actions(ours, OSC_POSE_DELTA, model)
    np.testing.assert_allclose(back, model, atol=1e-6)
    assert back.dtype == np.float32 and back.shape == (4, model_dim)
    if model_dim == 8:  # a column we do not have: from the model's chunk, else 0
        np.testing.assert_array_equal(km.unmap_actions(ours, OSC_POSE_DELTA)[:, 7], 0.0)


# ------------------------------------------------------------------------------------------------ command

def test_r2a_serve_and_r2a_policy_serve_are_one_command(monkeypatch):
    from r2a_cli import policy as policy_cli
    from r2a_cli.main import group_module

    assert group_module("serve") is serve_cli
    served = []
    monkeypatch.setattr(PolicyServer, "serve_forever", lambda self: served.append(self))
    argv = ["--policy", "callable:tests.test_adapters_openpi:hold_still", "--port", "0", "--api-key", "k",
            "--max-message-mb", "2"]
    assert serve_cli.run(serve_cli.build_parser("r2a serve").parse_args(argv)) == 0
    assert policy_cli.run(policy_cli.build_parser("r2a policy").parse_args(["serve", *argv])) == 0
    a, b = served
    assert (a.host, a.api_key, a.limits, type(a.policy)) == (b.host, b.api_key, b.limits, type(b.policy))
    assert a.host == "127.0.0.1" and a.api_key == "k" and a.limits.max_message_bytes == 2 << 20
    defaults = serve_cli.build_parser("r2a serve").parse_args([])
    assert (defaults.host, defaults.port, defaults.policy, defaults.upstream) == ("127.0.0.1", 8000, None, None)


def test_r2a_serve_upstream_builds_the_proxy_from_the_command_line(demos, monkeypatch, tmp_path):
    served = []
    monkeypatch.setattr(PolicyServer, "serve_forever", lambda self: served.append(self))
    with PolicyServer(ChunkUpstream(), port=0, metadata=UPSTREAM_METADATA) as upstream:
        url = f"ws://127.0.0.1:{upstream.port}"
        parse = serve_cli.build_parser("r2a serve").parse_args
        serve_cli.run(parse(["--policy", _spec(demos[1]), "--upstream", url, "--keymap", "openpi_libero",
                             "--upstream-wait", "5", "--port", "0"]))
        (server,) = served
        assert isinstance(server.policy, R2AProxyPolicy) and server.policy.upstream.url == url
        assert server.metadata["model"] == "chunk-upstream" and server.metadata["r2a"]["upstream"] == url
        assert server.policy.upstream.connect_timeout == 2.0  # --upstream-retry's default, after the start
        server.policy.close()
        (tmp_path / "nourl.yaml").write_text("format_version: 1\nkeep_unmapped: true\n")
        with pytest.raises(R2AInputError, match="nourl.yaml: the adapter has no url:; give --upstream"):
            serve_cli.run(parse(["--policy", _spec(demos[1]), "--keymap", str(tmp_path / "nourl.yaml")]))
        with pytest.raises(R2AInputError, match="--upstream-retry must be positive"):
            serve_cli.run(parse(["--upstream", url, "--upstream-retry", "0"]))


def test_the_upstream_api_key_comes_from_the_flag_the_environment_or_the_adapters_variable(demos, monkeypatch,
                                                                                            tmp_path):
    served = []
    monkeypatch.setattr(PolicyServer, "serve_forever", lambda self: served.append(self))
    monkeypatch.delenv(serve_cli.UPSTREAM_API_KEY_ENV, raising=False)
    monkeypatch.delenv("MY_VLA_KEY", raising=False)
    parse = serve_cli.build_parser("r2a serve").parse_args
    with PolicyServer(ChunkUpstream(), port=0, metadata=UPSTREAM_METADATA, api_key="sesame") as upstream:
        adapter = tmp_path / "keyed.yaml"
        adapter.write_text(f"format_version: 1\nkeep_unmapped: true\nurl: ws://127.0.0.1:{upstream.port}\n"
                           "api_key_env: MY_VLA_KEY\n")
        argv = ["--policy", _spec(demos[1]), "--keymap", str(adapter), "--upstream-wait", "5", "--port", "0"]
        with pytest.raises(R2AInputError, match=r"keyed.yaml: api_key_env names \$MY_VLA_KEY, which is not set"):
            serve_cli.run(parse(argv))
        for where in ("adapter", "environment", "flag"):  # each found key opens the keyed upstream
            extra = ["--upstream-api-key", "sesame"] if where == "flag" else []
            if where == "adapter":
                monkeypatch.setenv("MY_VLA_KEY", "sesame")
            if where == "environment":
                monkeypatch.setenv("MY_VLA_KEY", "wrong")  # the r2a variable comes first
                monkeypatch.setenv(serve_cli.UPSTREAM_API_KEY_ENV, "sesame")
            if where == "flag":
                monkeypatch.setenv(serve_cli.UPSTREAM_API_KEY_ENV, "wrong")  # the flag comes first
            assert serve_cli.run(parse([*argv, *extra])) == 0
            served.pop().policy.close()
        monkeypatch.setenv(serve_cli.UPSTREAM_API_KEY_ENV, "wrong")
        with pytest.raises(R2AInputError, match="API key"):
            serve_cli.run(parse(argv))


def test_proxy_latency_smoke():
    from eval.perf.retrieval_latency import format_table, measure_proxy_latency

    row = measure_proxy_latency(nodes=300, queries=3, warmup=1, image_size=8)
    assert row["queries"] == 3 and row["mode"] in ("knn", "gnn")
    assert row["direct_ms_p50"] > 0 and row["proxy_ms_p50"] > 0 and row["proxy_server_ms_p50"] > 0
    table = format_table({"rows": [], "base": {"query_ms_p50": 1.0, "query_ms_p99": 1.0, "per_step_ms_p50": 1.0},
                          "proxy": row, "target_p99_ms_at_100k": 2.0, "machine": {"cpu": "cpu", "load_avg": [0.0]}})
    assert "| client → R2A proxy → base server |" in table


def test_the_proxy_serves_the_published_r2a_an_episode_step_for_step_as_in_process():
    """The same Lift episode under light:3 (harmonization fires), r2a-harmonize-hold with the shipped parts around
    the built-in VLA served over openpi's protocol: in-process (base openpi:ws://…) and behind `r2a serve
    --upstream` (openpi's client → proxy → the same server) — every executed action and every diagnostic equal."""
    pytest.importorskip("robosuite")
    from demos.rollout import run_episode
    from eval.diagnostics import register_diagnostics
    from r2a.policies import make_policy
    from sim.envs.backends import make_sim
    from sim.envs.robosuite_env import SimConfig
    from sim.shifts import ShiftHooks

    register_diagnostics()  # as r2a serve does
    spec = "r2a-harmonize-hold"
    base_server = PolicyServer(make_policy("builtin"), port=0)
    base_url = f"ws://127.0.0.1:{base_server.start()}"
    proxy = build_proxy(spec, base_url, KeyMap.identity(), connect_timeout=5)
    proxy_server = PolicyServer(proxy, port=0, metadata=proxy.metadata)
    proxy_url = f"ws://127.0.0.1:{proxy_server.start()}"
    sim = make_sim(SimConfig(task="Lift", image_size=64))
    runs = {}
    try:
        for name, policy_spec in (("in-process", f"{spec}:?base=openpi:{base_url}"), ("proxy", f"openpi:{proxy_url}")):
            policy = make_policy(policy_spec, sim, 0)
            steps: list[tuple[np.ndarray, dict | None]] = []
            observer = lambda s, steps=steps: steps.append(  # noqa: E731
                (s.executed.copy(), None if s.reply is None else {k: s.reply.get(k) for k in ("r2a", "harmonize")}))
            _, summary = run_episode(sim, policy, seed=100_003, record=False, max_steps=64,
                                     hooks=ShiftHooks("light", 3), observer=observer)
            policy.close()
            runs[name] = (summary, steps)
    finally:
        sim.close()
        proxy_server.stop()
        proxy.close()
        base_server.stop()
    (ours, ours_steps), (theirs, theirs_steps) = runs["in-process"], runs["proxy"]
    assert ours["steps"] == theirs["steps"] == len(ours_steps) == len(theirs_steps)
    np.testing.assert_array_equal(ours["trace"]["ee_pos"], theirs["trace"]["ee_pos"])
    for (a, da), (b, db) in zip(ours_steps, theirs_steps):
        np.testing.assert_array_equal(a, b)
        assert (da is None) == (db is None)
        if da is not None:
            assert json_equal(da, db)
    fired = [d["harmonize"] for _, d in ours_steps if d is not None and d.get("harmonize")]
    assert fired and any(cam.get("active") for h in fired for cam in h.values())  # the images were harmonized


def json_equal(a, b) -> bool:
    import json

    def plain(x):
        return json.loads(json.dumps(x, default=lambda v: np.asarray(v).tolist()))

    return plain(a) == plain(b)
