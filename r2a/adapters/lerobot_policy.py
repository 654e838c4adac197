"""A LeRobot ``PreTrainedPolicy`` (ACT, Diffusion, pi0, SmolVLA, …) from a local checkpoint, as our Policy.

lerobot is an optional extra (``pip install 'r2a[lerobot]'``) imported only here and only when a policy is
built: its releases pin older torch and Python versions than this project (docs/architecture.md, "Platform
notes"), so it usually lives in its own environment — serve the policy there with
:class:`~r2a.serve.policy_server.PolicyServer` and connect with ``--policy openpi:…``. Only local directories
are loaded; nothing is ever downloaded.

The observation mapping is two pure steps, testable without lerobot: a :class:`KeyMap` renames our keys to
lerobot's (``observation.images.<cam>``, ``observation.state``, ``task``; :func:`default_lerobot_keymap`
derives one from the checkpoint's ``config.json``), then :func:`to_lerobot_batch` converts values to a batch
of one (images float CHW in [0, 1]). lerobot ≥ 0.4 keeps normalization in processor pipelines saved next to the
weights (``policy_preprocessor.json``); they are applied when present.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from r2a.adapters.keymap import ActionMap, ImageMap, KeyMap
from r2a_core.errors import R2AInputError
from r2a_core.provenance import artifact
from r2a_core.types import OSC_POSE_DELTA, PROMPT, ActionSpace, image_key

log = logging.getLogger(__name__)

INSTALL_HINT = ("lerobot is not installed: pip install 'r2a[lerobot]' (it pins older torch/Python than r2a, "
                "see docs/architecture.md, 'Platform notes'; or run it in its own environment behind "
                "r2a.serve.policy_server.PolicyServer and use --policy openpi:ws://HOST:PORT)")
#: lerobot camera names → ours, for the default key map (LIBERO datasets call them image / image2)
CAMERA_ALIASES = {"agentview": "agentview", "image": "agentview", "front": "agentview", "top": "agentview",
                  "wrist": "wrist", "wrist_image": "wrist", "image2": "wrist", "eye_in_hand": "wrist"}
#: observation.state layouts we can build, by length: 8 = LIBERO's (eef pos, axis-angle, finger joints)
STATE_LAYOUTS = {8: ("state/ee_pos", "state/ee_axis_angle", "state/gripper_fingers")}
#: policy types whose predict_action_chunk needs no observation queue filled by select_action first
CHUNK_POLICY_TYPES = ("act", "pi0", "pi05", "pi0fast", "smolvla")


def to_lerobot_batch(mapped: Mapping[str, Any]) -> dict[str, Any]:
    """A batch of one: images (H, W, 3) uint8 → (1, 3, H, W) float32 in [0, 1]; arrays → (1, …) float32;
    strings (the ``task``) → a list of one string."""
    batch: dict[str, Any] = {}
    for key, value in mapped.items():
        if isinstance(value, str):
            batch[key] = [value]
        elif key.startswith("observation.image"):
            img = np.asarray(value)
            if img.ndim != 3 or img.shape[-1] != 3:
                raise R2AInputError(f"lerobot input '{key}' has shape {img.shape}, expected an (H, W, 3) image")
            scale = 255.0 if img.dtype == np.uint8 else 1.0
            batch[key] = (img.astype(np.float32) / scale).transpose(2, 0, 1)[None]
        else:
            batch[key] = np.asarray(value, dtype=np.float32)[None]
    return batch


def default_lerobot_keymap(config: Mapping[str, Any], where: str = "config.json") -> KeyMap:
    """A key map from a checkpoint's ``input_features``/``output_features`` (cameras by name, a known state
    layout, the prompt as ``task``); anything else asks for an adapter YAML."""
    images: dict[str, ImageMap] = {}
    state: dict[str, tuple[str, ...]] = {}
    for key, feature in (config.get("input_features") or {}).items():
        shape = list(feature.get("shape") or [])
        if feature.get("type") == "VISUAL":
            cam = key.rsplit(".", 1)[-1]
            if cam not in CAMERA_ALIASES:
                raise R2AInputError(f"{where}: camera input '{key}' has no default mapping (known camera names: "
                                    f"{', '.join(CAMERA_ALIASES)}); write an adapter YAML with 'images:'")
            images[key] = ImageMap(source=image_key(CAMERA_ALIASES[cam]), size=tuple(shape[1:3]) or None)
        elif key == "observation.state" and len(shape) == 1 and shape[0] in STATE_LAYOUTS:
            state[key] = STATE_LAYOUTS[shape[0]]
        else:
            raise R2AInputError(f"{where}: input '{key}' (shape {shape}) has no default mapping; write an "
                                f"adapter YAML with 'state:' (known state lengths: {sorted(STATE_LAYOUTS)})")
    action_shape = ((config.get("output_features") or {}).get("action") or {}).get("shape") or [None]
    return KeyMap(images=images, state=state, copy={"task": PROMPT}, source=f"default key map of {where}",
                  actions=ActionMap(model_dim=action_shape[0]))


def lerobot_keymap(config: Mapping[str, Any], keymap: KeyMap | None, where: str = "config.json") -> KeyMap:
    """The key map a checkpoint is fed: an adapter YAML's, or the checkpoint's default where the YAML maps no
    observation — a YAML that only says where the checkpoint is and which device serves it (its ``actions:`` and
    ``state_dtype:``, if any, still apply) — so that serving on a GPU does not silently feed the model nothing."""
    if keymap is not None and (keymap.images or keymap.state or keymap.copy or keymap.keep_unmapped):
        return keymap
    default = default_lerobot_keymap(config, where)
    if keymap is None:
        return default
    actions = replace(keymap.actions, model_dim=keymap.actions.model_dim or default.actions.model_dim)
    return replace(default, actions=actions, state_dtype=keymap.state_dtype,
                   source=f"{default.source} ({keymap.source} maps no observation)")


#: where ``lerobot-train`` puts the latest weights below its ``--output_dir`` (and below one checkpoint's directory)
TRAINING_RUN_LAYOUT = ("checkpoints/last/pretrained_model", "pretrained_model")


def read_checkpoint_config(checkpoint_dir: str | Path) -> tuple[Path, dict[str, Any]]:
    """The checkpoint directory and its ``config.json``; a missing directory or file is an R2AInputError.

    A ``lerobot-train`` output directory (or one of its ``checkpoints/NNNNNN``) stands for its latest
    ``pretrained_model``."""
    path = Path(checkpoint_dir).expanduser()
    if not path.is_dir():
        raise R2AInputError(f"lerobot checkpoint {path}: not a directory (only local checkpoints are loaded; "
                            f"download one first, e.g. with huggingface-cli download --local-dir)")
    if not (path / "config.json").is_file():
        inner = next((path / sub for sub in TRAINING_RUN_LAYOUT if (path / sub / "config.json").is_file()), None)
        if inner is not None:
            log.info("lerobot checkpoint %s: a training run; loading %s", path, inner)
            path = inner
    config_path = path / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise R2AInputError(f"lerobot checkpoint {path}: no config.json (expected a directory written by "
                            f"lerobot's save_pretrained, e.g. .../checkpoints/last/pretrained_model)") from None
    except json.JSONDecodeError as err:
        raise R2AInputError(f"{config_path}: not valid JSON ({err})") from None
    if not isinstance(config, dict) or not isinstance(config.get("type"), str):
        raise R2AInputError(f"{config_path}: no policy 'type' (e.g. \"act\", \"diffusion\", \"pi0\")")
    return path, config


def _import_lerobot() -> tuple[Callable[[str], Any], Callable[..., Any] | None]:
    """lerobot's ``get_policy_class`` and (lerobot ≥ 0.4) ``make_pre_post_processors``, imported lazily."""
    try:
        from lerobot.policies import factory  # lerobot >= 0.4
    except ImportError:
        try:
            from lerobot.common.policies import factory  # older layout
        except ImportError:
            raise R2AInputError(INSTALL_HINT) from None
    return factory.get_policy_class, getattr(factory, "make_pre_post_processors", None)


def _executed_steps(config: Mapping[str, Any], mode: str, where: str) -> int | None:
    """How many actions of each chunk to execute: the checkpoint's own ``n_action_steps`` (what lerobot's
    ``select_action`` executes between predictions), so that the benchmark, a served client and R2A re-plan as
    lerobot does; None in select mode (each reply is one action)."""
    if mode != "chunk":
        return None
    steps, chunk = config.get("n_action_steps"), config.get("chunk_size")
    if steps is None:
        return None
    if not isinstance(steps, int) or steps < 1 or (isinstance(chunk, int) and steps > chunk):
        raise R2AInputError(f"{where}: n_action_steps={steps!r}, expected an integer in 1..chunk_size ({chunk})")
    return steps


class LeRobotPolicy:
    """A lerobot policy behind our contract: ``infer`` returns an (H, A) chunk for our action space.

    ``mode`` "chunk" calls ``predict_action_chunk`` (H = the model's chunk; our ChunkBroker executes it),
    "select" calls ``select_action`` (H = 1; the policy keeps its own action queue, which ``reset`` clears);
    "auto" uses chunks for the types in :data:`CHUNK_POLICY_TYPES` (Diffusion and VQ-BeT must go through
    ``select_action``, which fills their observation queues). In chunk mode ``n_action_steps`` (also in
    ``metadata``, which ``r2a serve`` announces) is the checkpoint's own.
    """

    def __init__(self, checkpoint_dir: str | Path, keymap: KeyMap | None = None,
                 action_space: ActionSpace = OSC_POSE_DELTA, device: str = "cpu", mode: str = "auto") -> None:
        if mode not in ("auto", "chunk", "select"):
            raise R2AInputError(f"LeRobotPolicy mode '{mode}': expected auto, chunk or select")
        self.path, config = read_checkpoint_config(checkpoint_dir)
        self.keymap = lerobot_keymap(config, keymap, str(self.path / "config.json"))
        self.action_space, self.device, self.type = action_space, device, config["type"]
        get_policy_class, make_processors = _import_lerobot()
        self.policy = get_policy_class(self.type).from_pretrained(str(self.path), local_files_only=True)
        self.policy.to(device)
        self.policy.eval()
        self._pre, self._post = self._processors(make_processors)
        chunked = hasattr(self.policy, "predict_action_chunk") and self.type in CHUNK_POLICY_TYPES
        self.mode = ("chunk" if chunked else "select") if mode == "auto" else mode
        self.n_action_steps = _executed_steps(config, self.mode, str(self.path / "config.json"))
        self.metadata = {"policy": "lerobot", "type": self.type, "checkpoint": str(self.path), "mode": self.mode,
                         "chunk_size": config.get("chunk_size"), "n_action_steps": self.n_action_steps,
                         # what it loaded (r2a_core.provenance): runs and fits hold a server to the same checkpoint
                         "artifacts": {"base_checkpoint": artifact(self.path)}}
        log.info("loaded lerobot %s policy from %s (%s mode, device %s, %s actions per query)", self.type, self.path,
                 self.mode, device, self.n_action_steps or "every")

    def _processors(self, make_processors: Callable[..., Any] | None) -> tuple[Callable, Callable]:
        """lerobot ≥ 0.4 normalizes in saved processor pipelines; older versions inside the policy."""
        if make_processors is None or not (self.path / "policy_preprocessor.json").is_file():
            return (lambda batch: batch), (lambda action: action)
        return make_processors(self.policy.config, pretrained_path=str(self.path),
                               preprocessor_overrides={"device_processor": {"device": self.device}})

    def reset(self) -> None:
        self.policy.reset()

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        import torch

        batch = {k: torch.from_numpy(v).to(self.device) if isinstance(v, np.ndarray) else v
                 for k, v in to_lerobot_batch(self.keymap.map_obs(obs)).items()}
        batch = self._pre(batch)
        with torch.inference_mode():
            if self.mode == "chunk":
                actions = self.policy.predict_action_chunk(batch)  # (1, H, A)
            else:
                actions = self.policy.select_action(batch)[:, None]  # (1, 1, A)
            actions = self._post(actions)
        chunk = actions.detach().float().cpu().numpy()[0]
        return {"actions": self.keymap.map_actions(chunk, self.action_space)}
