"""Any Python function ``obs -> actions`` as a Policy, so a user's own controller or model needs no class.

``--policy callable:package.module:function`` loads it by name (:func:`load_callable`). The function may
return one action ``(A,)``, a chunk ``(H, A)`` (array-like) or a dict with ``"actions"`` (openpi's form; the
other keys are passed on).
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable

import numpy as np

from r2a_core.errors import R2AInputError

SPEC_FORM = "'package.module:function'"


class CallablePolicy:
    """Wraps ``fn(obs)``; ``reset_fn`` (or ``fn.reset`` when ``fn`` is an object that has one) runs on reset."""

    def __init__(self, fn: Callable[[dict[str, Any]], Any], action_dim: int,
                 reset_fn: Callable[[], None] | None = None, name: str | None = None) -> None:
        if not callable(fn):
            raise R2AInputError(f"CallablePolicy needs a callable, got {type(fn).__name__}")
        self.fn, self.action_dim = fn, int(action_dim)
        self.reset_fn = reset_fn if reset_fn is not None else getattr(fn, "reset", None)
        self.name = name or getattr(fn, "__qualname__", type(fn).__name__)

    def reset(self) -> None:
        if self.reset_fn is not None:
            self.reset_fn()

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        result = self.fn(obs)
        out = dict(result) if isinstance(result, dict) else {"actions": result}
        if "actions" not in out:
            raise R2AInputError(f"callable '{self.name}' returned a dict without 'actions' "
                                f"(keys: {', '.join(map(str, out)) or 'none'})")
        try:
            actions = np.asarray(out["actions"], dtype=np.float32)
        except (TypeError, ValueError):
            raise R2AInputError(f"callable '{self.name}' returned actions that are not a numeric array") from None
        actions = actions[None] if actions.ndim == 1 else actions
        if actions.ndim != 2 or actions.shape[1] != self.action_dim:
            raise R2AInputError(f"callable '{self.name}' returned actions of shape {actions.shape}, "
                                f"expected ({self.action_dim},) or (H, {self.action_dim})")
        out["actions"] = actions
        return out


def load_callable(spec: str) -> Callable[..., Any]:
    """``"package.module:function"`` (the attribute may be dotted, ``module:Class.method``) → the object."""
    module_name, sep, attr = (spec or "").partition(":")
    if not sep or not module_name or not attr:
        raise R2AInputError(f"callable spec '{spec}': expected {SPEC_FORM}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (err.name == module_name or module_name.startswith(err.name + ".")):
            raise R2AInputError(f"callable spec '{spec}': module '{err.name}' not found "
                                f"(is it installed, or on PYTHONPATH?)") from None
        raise R2AInputError(f"callable spec '{spec}': importing '{module_name}' failed: {err}") from None
    obj: Any = module
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            raise _missing_attribute(spec, obj, ".".join([module_name, *attr.split(".")[:i]]), part)
        obj = getattr(obj, part)
    if not callable(obj):
        raise R2AInputError(f"callable spec '{spec}': '{attr}' is not callable (type {type(obj).__name__})")
    return obj


def _missing_attribute(spec: str, owner: Any, owner_name: str, part: str) -> R2AInputError:
    names = [n for n in dir(owner) if not n.startswith("_")]
    hint = difflib.get_close_matches(part, names, n=1)
    suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
    return R2AInputError(f"callable spec '{spec}': '{owner_name}' has no attribute '{part}'{suggestion}")
