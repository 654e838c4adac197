"""Key maps: observation keys → model keys (images resized with numpy, state concatenated), actions back."""

from pathlib import Path

import numpy as np
import pytest

from r2a.adapters.keymap import (
    ADAPTER_DIR,
    ActionMap,
    ImageMap,
    KeyMap,
    adapter_yaml,
    load_adapter_config,
    load_keymap,
    resize_image,
)
from r2a_core.errors import R2AInputError
from r2a_core.rotations import axis_angle_to_quat
from r2a_core.types import OSC_POSE_DELTA


def _obs(size: int = 32) -> dict:
    rng = np.random.default_rng(0)
    return {"images/agentview": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            "images/wrist": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            "state/ee_pos": np.array([0.1, -0.2, 0.9]), "state/ee_quat": axis_angle_to_quat(np.array([0.0, 0.0, 0.5])),
            "state/gripper": np.array([0.5]), "state/joint_pos": np.zeros(7), "state/step": 3, "prompt": "lift it"}


def test_openpi_libero_yaml_maps_to_openpi_keys():
    config = load_adapter_config(ADAPTER_DIR / "openpi_libero.yaml")
    assert config.url == "ws://localhost:8000"
    out = config.keymap.map_obs(_obs())
    assert sorted(out) == ["observation/image", "observation/state", "observation/wrist_image", "prompt"]
    assert out["observation/image"].shape == (224, 224, 3) and out["observation/image"].dtype == np.uint8
    state = out["observation/state"]
    assert state.dtype == np.float64 and state.shape == (8,)  # LIBERO's float64, as openpi's example sends it
    # without LIBERO's own keys (tests/test_adapters_openpi_libero.py has them) they are derived from ours:
    np.testing.assert_allclose(state[:3], [0.1, -0.2, 0.9], atol=1e-6)
    np.testing.assert_allclose(state[3:6], [0.0, 0.0, 0.5 + np.pi / 2], atol=1e-6)  # the hand: the site + 90° yaw
    np.testing.assert_allclose(state[6:], [0.02, -0.02], atol=1e-6)  # fingers for a half-open gripper
    assert out["prompt"] == "lift it"


def test_identity_yaml_passes_everything_unchanged():
    obs = _obs()
    out = load_keymap(ADAPTER_DIR / "identity.yaml").map_obs(obs)
    assert out.keys() == obs.keys() and all(out[k] is obs[k] for k in obs)
    chunk = np.ones((3, 7), np.float32)
    np.testing.assert_array_equal(KeyMap.identity().map_actions(chunk, OSC_POSE_DELTA), chunk)


def test_missing_key_names_it_and_lists_present_keys():
    keymap = KeyMap(images={"observation/image": ImageMap("images/front")}, source="my.yaml")
    with pytest.raises(R2AInputError, match=r"my.yaml: .*'images/front'.*'observation/image'.*"
                                            r"keys present: images/agentview, images/wrist, prompt"):
        keymap.map_obs(_obs())
    derived = KeyMap(state={"s": ("state/ee_axis_angle",)})
    with pytest.raises(R2AInputError, match="derived from 'state/ee_quat'"):
        derived.map_obs({"prompt": "x"})


def test_state_concatenation_order_and_unmapped_keys():
    keymap = KeyMap(state={"s": ("state/gripper", "state/ee_pos")}, copy={"task": "prompt"}, keep_unmapped=True)
    out = keymap.map_obs(_obs())
    np.testing.assert_allclose(out["s"], [0.5, 0.1, -0.2, 0.9], atol=1e-6)
    assert out["task"] == "lift it" and "prompt" not in out and "state/ee_pos" not in out
    assert "state/joint_pos" in out and "images/wrist" in out


def test_resize_nearest_and_area():
    img = np.arange(16, dtype=np.uint8).reshape(4, 4, 1).repeat(3, axis=2)
    np.testing.assert_array_equal(resize_image(img, (2, 2), "nearest")[..., 0], [[5, 7], [13, 15]])
    np.testing.assert_array_equal(resize_image(img, (2, 2), "area")[..., 0], [[2, 4], [10, 12]])  # 2.5→2, 4.5→4
    up = resize_image(img, (8, 8), "nearest")
    np.testing.assert_array_equal(up[::2, ::2], img)
    flat = np.full((5, 7, 3), 200, np.uint8)
    assert (resize_image(flat, (3, 11), "area") == 200).all()  # non-integer ratios keep a flat image flat
    assert resize_image(flat, (3, 11), "area").shape == (3, 11, 3)


def test_flip_then_resize_and_bad_image_shape():
    obs = _obs(8)
    out = KeyMap(images={"im": ImageMap("images/agentview", flip="horizontal")}).map_obs(obs)
    np.testing.assert_array_equal(out["im"], obs["images/agentview"][:, ::-1])
    obs["images/agentview"] = np.zeros((8, 8))
    with pytest.raises(R2AInputError, match=r"shape \(8, 8\), expected \(H, W, 3\)"):
        KeyMap(images={"im": ImageMap("images/agentview")}).map_obs(obs)


def test_actions_slice_pad_flip_and_scale():
    chunk = np.arange(2 * 8, dtype=np.float32).reshape(2, 8) / 10
    sliced = KeyMap(actions=ActionMap(model_dim=8)).map_actions(chunk, OSC_POSE_DELTA)
    np.testing.assert_allclose(sliced, chunk[:, :7])
    padded = KeyMap(actions=ActionMap(model_dim=3)).map_actions(chunk[:, :3], OSC_POSE_DELTA)
    assert padded.shape == (2, 7) and (padded[:, 3:] == 0).all()
    flipped = KeyMap(actions=ActionMap(model_dim=7, flip_gripper=True, scale=2.0)).map_actions(
        chunk[:, :7], OSC_POSE_DELTA)
    np.testing.assert_allclose(flipped[:, :6], 2 * chunk[:, :6])
    np.testing.assert_allclose(flipped[:, 6], -chunk[:, 6])  # the gripper is flipped, not scaled
    single = KeyMap(actions=ActionMap(model_dim=7)).map_actions(np.zeros(7), OSC_POSE_DELTA)
    assert single.shape == (1, 7)
    with pytest.raises(R2AInputError, match=r"shape \(2, 8\), expected \(H, 7\) \(actions.model_dim\)"):
        KeyMap(actions=ActionMap(model_dim=7)).map_actions(chunk, OSC_POSE_DELTA)
    with pytest.raises(R2AInputError, match="actions.scale has 2 factors, expected 7"):
        KeyMap(actions=ActionMap(scale=(1.0, 2.0))).map_actions(chunk[:, :7], OSC_POSE_DELTA)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "adapter.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("format_version: 1\nimagez: {}\n", r"unknown key 'imagez' \(did you mean 'images'\?\)"),
    ("format_version: 2\n", "format_version 2 is not supported"),
    ("format_version: 1\nimages: {im: {from: images/wrist, size: [224]}}\n", r"images.im: size must be"),
    ("format_version: 1\nimages: {im: {from: images/wrist, resize: cubic}}\n", "resize 'cubic' unknown"),
    ("format_version: 1\nstate: {s: state/ee_pos}\n", "state.s: expected a non-empty list"),
    ("format_version: 1\nactions: {model_dim: -1}\n", "actions.model_dim: expected a positive integer"),
    ("format_version: 1\nactions: {flip_griper: true}\n", "unknown key 'flip_griper' .*did you mean 'flip_gripper'"),
    ("format_version: 1\ntimeout: soon\n", "'timeout' must be a positive number"),
    ("format_version: 1\nimages: [a, b]\n", "'images' must be a mapping"),
    ("[1, 2", "not valid YAML"),
])
def test_yaml_errors_name_the_file_and_field(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(R2AInputError, match=message) as err:
        load_adapter_config(path)
    assert str(path) in str(err.value)


def test_missing_yaml_and_bare_names(tmp_path):
    with pytest.raises(R2AInputError, match=f"{tmp_path}/nope.yaml: file not found"):
        load_adapter_config(tmp_path / "nope.yaml")
    assert adapter_yaml("openpi_libero") == ADAPTER_DIR / "openpi_libero.yaml"
    config = load_adapter_config(_write(tmp_path, "format_version: 1\ncheckpoint: ~/ckpt\ndevice: cuda\n"))
    assert config.checkpoint == Path("~/ckpt").expanduser() and config.device == "cuda"


def test_map_present_writes_only_what_the_observation_holds_as_map_obs_would():
    """The R2A proxy overlays what its wrapper changed (a harmonized camera) on the client's own request: those keys
    must come out flipped and resized exactly as map_obs does, and nothing else may be derived or invented."""
    keymap = load_adapter_config(ADAPTER_DIR / "openpi_libero.yaml").keymap
    full = keymap.map_obs(_obs())
    only_camera = keymap.map_present({"images/agentview": _obs()["images/agentview"]})
    assert list(only_camera) == ["observation/image"]
    np.testing.assert_array_equal(only_camera["observation/image"], full["observation/image"])
    # the LIBERO state's sources are LIBERO's own keys: from ours alone map_obs derives them, map_present does not
    assert "observation/state" not in keymap.map_present({k: v for k, v in _obs().items() if k.startswith("state/")})
    assert keymap.map_present({"prompt": "open it"}) == {"prompt": "open it"}
    identity = load_keymap(ADAPTER_DIR / "identity.yaml")  # keep_unmapped: every key passes as it is
    assert identity.map_present({"state/step": 4, "x": 1}) == {"state/step": 4, "x": 1}


def test_an_image_the_proxy_recovers_goes_back_upstream_bit_for_bit_and_a_harmonized_pixel_where_it_belongs():
    """Behind ``r2a serve --upstream`` with openpi's LIBERO keys, R2A reads the client's images with the flip undone
    (upright, at the model's size) and a harmonized camera is mapped back over the client's request: unchanged, that
    round trip must give the client's image exactly; changed, the change must land at the flipped position."""
    keymap = load_adapter_config(ADAPTER_DIR / "openpi_libero.yaml").keymap
    request = keymap.map_obs(_obs())  # what openpi's example client sends: 224 px, our upright view mirrored
    ours = keymap.unmap_images(request)
    assert sorted(ours) == ["images/agentview", "images/wrist"] and ours["images/agentview"].shape == (224, 224, 3)
    back = keymap.map_present(ours)
    for model_key in ("observation/image", "observation/wrist_image"):
        np.testing.assert_array_equal(back[model_key], request[model_key])
    harmonized = ours["images/agentview"].copy()
    harmonized[10, 20] = 255 - harmonized[10, 20]  # one upright pixel changed, near the top left
    forwarded = keymap.map_present({"images/agentview": harmonized})["observation/image"]
    differs = np.argwhere((forwarded != request["observation/image"]).any(axis=-1))
    assert differs.tolist() == [[10, 223 - 20]]  # LIBERO's bottom-up rows turned 180°: only the columns reverse


def test_changed_keys_are_what_the_wrapper_changed_from_the_clients_observation():
    from r2a.serve.upstream import CLIENT_OBS, CLIENT_OURS, changed_keys

    before = _obs()
    harmonized = before["images/agentview"].copy()
    harmonized[0, 0] ^= 1
    obs = {**before, "images/agentview": harmonized, "state/step": np.int64(3), "state/extra": 1.0,
           CLIENT_OBS: {"observation/image": None}, CLIENT_OURS: before}
    # the same step as a 0-d array counts as the same; an image one pixel apart and a key the client lacked differ
    assert sorted(changed_keys(obs)) == ["images/agentview", "state/extra"]
    same_values_other_dtype = {**before, "images/wrist": before["images/wrist"].astype(np.float32),
                               CLIENT_OURS: before}
    assert list(changed_keys(same_values_other_dtype)) == ["images/wrist"]
