"""Typed configs: one loader for every config of the project.

A config is a dataclass (nested dataclasses are its sections); every field has a one-line docstring right
below it, which becomes the command-line help. :func:`load_config` takes the defaults, then a YAML file, then
``--set section.field=value`` overrides (values parsed as YAML; a flat config has no section). Every value is
checked against the field's type, and an unknown or mistyped field is a one-line :class:`R2AInputError` that
names the file or override, the field, what was expected and — for a typo — the closest valid name.

Why not pydantic: its errors are multi-line and name internal locations; the few types configs use (numbers,
strings, booleans, Literals, lists, tuples, string-keyed mappings, optional values, nested sections) are
checked here in one place with the messages users see. A class may define ``validate(self)`` for checks that
span fields; it raises :class:`R2AInputError` and the loader prefixes where the config came from.

Shipped files are found from any working directory: ``configs/`` of the checkout installs as the ``r2a_configs``
package (setup.py) and the assets are ``r2a/assets/`` of the ``r2a`` package, both located by
``importlib.util.find_spec``, which finds a package's folder without importing it (:func:`shipped_path`). A
relative path a user or a shipped YAML gives is read as given when it exists, else as the shipped file it names
(:func:`resolve_path`); a bare config name such as ``smoke`` is the shipped ``configs/KIND/smoke.yaml`` of its
config's kind (``SHIPPED_KIND``, :func:`shipped_config`).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib.util
import inspect
import json
import textwrap
import types
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Literal, Mapping, Sequence, TypeVar

import yaml

from r2a_core.errors import R2AInputError
from r2a_core.yaml_io import read_yaml_mapping

T = TypeVar("T")
C = TypeVar("C", bound="TypedConfig")
_MISSING = object()


def did_you_mean(name: str, options: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest option, or an empty string."""
    by_folded = {str(o).casefold(): str(o) for o in options}
    close = difflib.get_close_matches(str(name).casefold(), list(by_folded), n=1)
    return f" (did you mean '{by_folded[close[0]]}'?)" if close else ""


def unknown_name_error(what: str, name: str, valid: Iterable[str], where: str = "",
                       plural: str | None = None) -> R2AInputError:
    """The one error for a name that is not in a registry or schema: the closest match and every valid one.

    ``unknown field 'episdes' (did you mean 'episodes'?); valid fields: name, tasks, ...`` — ``plural`` names
    the valid ones (default: ``what`` + "s").
    """
    valid = [str(v) for v in valid]
    prefix = f"{where}: " if where else ""
    return R2AInputError(f"{prefix}unknown {what} '{name}'{did_you_mean(name, valid)}; "
                         f"valid {plural or what + 's'}: {', '.join(valid)}")


# ---------------------------------------------------------------------------------------------- shipped files

#: first folder of a shipped file's path in the checkout → the package it is installed as
SHIPPED_PACKAGES = {"configs": "r2a_configs", "r2a": "r2a"}


@lru_cache(maxsize=None)
def _package_folder(prefix: str) -> Path:
    """The folder of the package that holds ``prefix``'s shipped files (the checkout's own folder when the package
    is not installed, e.g. a checkout on ``PYTHONPATH`` after configs/ became a package)."""
    spec = importlib.util.find_spec(SHIPPED_PACKAGES[prefix])  # a top-level name: located, not imported
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        return Path(__file__).resolve().parents[1] / prefix
    folder = Path(locations[0])
    if not folder.is_dir():  # a zipped install: the readers need real files
        raise R2AInputError(f"package {SHIPPED_PACKAGES[prefix]} is not installed as a folder ({folder}); "
                            "reinstall r2a with pip (not as a zip)")
    return folder


def shipped_path(relative: str | Path) -> Path:
    """Where a shipped file is, whatever the working directory: ``configs/bench/smoke.yaml`` in the installed
    shipped configs, ``r2a/assets/r2a_gate`` in the installed ``r2a`` package (in a checkout: the checkout's)."""
    first, *rest = Path(relative).parts
    if first not in SHIPPED_PACKAGES:
        raise ValueError(f"{relative}: shipped files are under {', '.join(f'{p}/' for p in SHIPPED_PACKAGES)}")
    return _package_folder(first).joinpath(*rest)


def resolve_path(path: str | Path) -> Path:
    """``path`` as given when it exists (or is absolute), else the shipped file it names when there is one
    (``r2a/assets/...``, ``configs/...``: the paths shipped YAMLs use), else as given, for its reader to report."""
    given = Path(path).expanduser()
    if given.exists() or given.is_absolute() or not given.parts or given.parts[0] not in SHIPPED_PACKAGES:
        return given
    shipped = shipped_path(given)
    return shipped if shipped.exists() else given


def shipped_config(path: str | Path, kind: str | None = None, what: str = "config") -> Path:
    """The YAML file a config argument names: a path (:func:`resolve_path`), or a bare name such as ``smoke`` (no
    folder, no ``.yaml``): the shipped ``configs/KIND/smoke.yaml``; an unknown name lists the shipped ones."""
    text = str(path)
    if kind is None or Path(text).exists() or "/" in text or text.endswith((".yaml", ".yml")):
        return resolve_path(path)
    folder = shipped_path(f"configs/{kind}")
    if (folder / f"{text}.yaml").is_file():
        return folder / f"{text}.yaml"
    names = sorted(p.stem for p in folder.glob("*.yaml"))
    raise R2AInputError(f"{what} '{text}': no such file, nor a shipped name{did_you_mean(text, names)}; shipped "
                        f"(configs/{kind}/): {', '.join(names)}")


# ----------------------------------------------------------------------------------------------- loading

def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] | None = None,
                what: str = "config", kind: str | None = None,
                prepare: Callable[[dict[str, Any], Path], None] | None = None) -> T:
    """Defaults of ``cls``, then the YAML file at ``path`` (if any; a bare name is a shipped config of ``kind``,
    :func:`shipped_config`), then ``section.field=value`` overrides. ``prepare(raw, file)`` may rewrite the file's
    own values before the overrides apply (R2A configs make ``./`` paths relative to the file)."""
    path = shipped_config(path, kind, what) if path is not None else None
    raw: dict[str, Any] = dict(read_yaml_mapping(path, what)) if path is not None else {}
    if prepare is not None and path is not None:
        prepare(raw, Path(path))
    where = f"{what} {path}" if path is not None else what
    for item in overrides or ():
        _apply_override(cls, raw, item)
    return from_dict(cls, raw, where)


def from_dict(cls: type[T], data: Any, where: str = "config") -> T:
    """Build ``cls`` from a mapping, checking every field's name and type; missing fields keep their defaults."""
    if not isinstance(data, Mapping):
        raise R2AInputError(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs = {}
    for name, value in data.items():
        if name not in hints:
            raise unknown_name_error("field", str(name), hints, where)
        kwargs[name] = _coerce(value, hints[name], f"{where}: {name}")
    try:
        config = cls(**kwargs)
        validate = getattr(config, "validate", None)
        if callable(validate):
            validate()
    except R2AInputError as err:
        message = str(err)
        raise R2AInputError(message if message.startswith(where) else f"{where}: {message}") from None
    return config


def override(config: T, items: Sequence[str], where: str = "config") -> T:
    """``config`` with ``section.field=value`` overrides applied (a new instance; the input is unchanged)."""
    raw = to_dict(config)
    for item in items:
        _apply_override(type(config), raw, item)
    return from_dict(type(config), raw, where)


def apply_override(config: T, item: str) -> T:
    """``config`` with one ``section.field=value`` override applied."""
    return override(config, [item])


def _apply_override(cls: type, raw: dict[str, Any], item: str) -> None:
    """Set one ``a.b.c=value`` into ``raw``, checking the path and the value's type against ``cls`` first."""
    key, sep, text = item.partition("=")
    parts = [p for p in key.strip().split(".")]
    if not sep or not all(parts):
        raise R2AInputError(f"--set {item}: expected section.field=value (or field=value), e.g. episodes=5")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise R2AInputError(f"--set {item}: the value is not valid YAML ({str(err).splitlines()[0]})") from None
    where = f"--set {item}"
    typ: Any = cls
    node = raw
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if _is_dataclass_type(typ):
            hints = _hints(typ)
            if part not in hints:
                raise _unknown_path(typ, part, where)
            typ = hints[part]
        elif _is_str_mapping(typ):
            typ = _mapping_value_type(typ)
        else:
            raise R2AInputError(f"{where}: '{'.'.join(parts[:i])}' has no fields (it is a single value)")
        if last:
            _coerce(value, typ, f"{where}: {key.strip()}")
            node[part] = value
        else:
            child = node.get(part)
            if child is None:
                child = {}
            elif not isinstance(child, dict):
                raise R2AInputError(f"{where}: '{'.'.join(parts[:i + 1])}' is not a section")
            node[part] = child = dict(child)
            node = child


class TypedConfig:
    """Mixin of the project's config dataclasses: the loader's functions as methods of the class."""

    #: what the config is called in error messages ("benchmark config", "graph config", ...)
    CONFIG_WHAT: ClassVar[str] = "config"
    #: the folder of configs/ whose YAMLs a bare name means ("bench": ``--config smoke`` is configs/bench/smoke.yaml)
    SHIPPED_KIND: ClassVar[str | None] = None

    @classmethod
    def from_yaml(cls: type[C], path: str | Path | None = None, overrides: Sequence[str] | None = None) -> C:
        """Defaults, then the YAML file (if any; a path or a shipped config's bare name), then overrides."""
        return load_config(cls, path, overrides, cls.CONFIG_WHAT, cls.SHIPPED_KIND)

    @classmethod
    def from_dict(cls: type[C], data: Any, where: str | None = None) -> C:
        """From a mapping (a stored config, a test's dict), every field checked."""
        return from_dict(cls, data, where or cls.CONFIG_WHAT)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (tuples as lists), for manifests and records."""
        return to_dict(self)

    def with_overrides(self: C, items: Sequence[str]) -> C:
        """A copy with ``section.field=value`` overrides applied."""
        return override(self, items, self.CONFIG_WHAT)

    @classmethod
    def help_text(cls) -> str:
        """Every field with its default and doc, one per line (the ``--help`` epilog)."""
        return config_help(cls)


def _unknown_path(cls: type, name: str, where: str) -> R2AInputError:
    """Unknown field ``name`` of ``cls``; a field of that name inside a section is suggested with its section."""
    inside = [f"{section}.{name}" for section, typ in _hints(cls).items()
              if _is_dataclass_type(typ) and name in _hints(typ)]
    if inside:
        return R2AInputError(f"{where}: unknown field '{name}' (did you mean '{inside[0]}'?); "
                             f"valid fields: {', '.join(_hints(cls))}")
    return unknown_name_error("field", name, _hints(cls), where)


# ------------------------------------------------------------------------------------------------ types

@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    if not _is_dataclass_type(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _is_dataclass_type(typ: Any) -> bool:
    return isinstance(typ, type) and dataclasses.is_dataclass(typ)


def _is_str_mapping(typ: Any) -> bool:
    return typing.get_origin(typ) in (dict, Mapping, typing.Mapping) or typ is dict


def _mapping_value_type(typ: Any) -> Any:
    args = typing.get_args(typ)
    return args[1] if len(args) == 2 else Any


def _coerce(value: Any, typ: Any, where: str) -> Any:
    """``value`` checked against ``typ`` (and converted: lists to tuples, ints to floats, mappings to sections)."""
    if typ is Any:
        return value
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _coerce(value, option, where)
            except R2AInputError as err:
                errors.append(err)
        if len(options) == 1 and options[0] not in (bool, int, float, str):
            raise errors[0]  # the inner error says where inside the value it went wrong
        raise R2AInputError(f"{where}: got {value!r}, expected {_describe(typ)}")
    if origin is Literal:
        if any(type(value) is type(a) and value == a for a in args):
            return value
        raise R2AInputError(f"{where}: got {value!r}, expected one of {', '.join(map(repr, args))}"
                            f"{did_you_mean(value, map(str, args)) if isinstance(value, str) else ''}")
    if _is_dataclass_type(typ):
        return value if isinstance(value, typ) else from_dict(typ, value, where)
    if origin in (list, Sequence, typing.Sequence) or typ is list:
        if not isinstance(value, (list, tuple)):
            raise R2AInputError(f"{where}: got {value!r}, expected {_describe(typ)}")
        item = args[0] if args else Any
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is tuple or typ is tuple:
        if not isinstance(value, (list, tuple)):
            raise R2AInputError(f"{where}: got {value!r}, expected {_describe(typ)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise R2AInputError(f"{where}: got {value!r}, expected {_describe(typ)}")
        return tuple(_coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args or [Any] * len(value))))
    if _is_str_mapping(typ):
        if not isinstance(value, Mapping):
            raise R2AInputError(f"{where}: got {value!r}, expected {_describe(typ)}")
        key_t = args[0] if args else Any
        val_t = _mapping_value_type(typ)
        return {_coerce(k, key_t, f"{where} key"): _coerce(v, val_t, f"{where}.{k}") for k, v in value.items()}
    if typ is bool:
        if isinstance(value, bool):
            return value
    elif typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif typ is str:
        if isinstance(value, str):
            return value
    elif typ is type(None):
        if value is None:
            return None
    else:
        raise TypeError(f"{where}: config fields of type {typ!r} are not supported")
    raise R2AInputError(f"{where}: got {value!r}, expected {_describe(typ)}")


def _describe(typ: Any) -> str:
    """A reader's name of a type: 'an integer', 'a list of numbers', 'a string or nothing'."""
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "nothing"}
    if typ in names:
        return names[typ]
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin in (list, tuple, Sequence, typing.Sequence) or typ in (list, tuple):
        inner = _describe(args[0]).split(" ", 1)[-1] if args else "values"
        inner = {"integer": "integers", "number": "numbers", "string": "strings"}.get(inner, inner)
        return f"a list of {inner}"
    if _is_str_mapping(typ):
        return f"a mapping of names to {_describe(_mapping_value_type(typ)).split(' ', 1)[-1]}s"
    if _is_dataclass_type(typ):
        return f"a mapping with fields {', '.join(_hints(typ))}"
    return getattr(typ, "__name__", str(typ))


# ------------------------------------------------------------------------------------------------ output

def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain YAML/JSON data (tuples become lists), e.g. to store it beside a result."""
    return _plain(dataclasses.asdict(config))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


# -------------------------------------------------------------------------------------------------- help

def field_docs(cls: type) -> dict[str, tuple[Any, str]]:
    """``section.field`` → (default, one-line doc) for every field, sections flattened (the ``--help`` text)."""
    defaults = _default_values(cls)
    out: dict[str, tuple[Any, str]] = {}
    docs = _docstrings(cls)
    for name, typ in _hints(cls).items():
        if _is_dataclass_type(typ):
            for sub, (default, doc) in field_docs(typ).items():
                out[f"{name}.{sub}"] = (default, doc)
        else:
            out[name] = (defaults.get(name, _MISSING), docs.get(name, ""))
    return out


def config_help(cls: type) -> str:
    """The config's fields as help text: ``  section.field=default  doc``, one line each."""
    lines = []
    for key, (default, doc) in field_docs(cls).items():
        shown = "(required)" if default is _MISSING else json.dumps(_plain(default))
        lines.append(f"  {key}={shown}  {doc}".rstrip())
    return "\n".join(lines)


def _default_values(cls: type) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = f.default_factory()  # type: ignore[misc]
    return out


@lru_cache(maxsize=None)
def _docstrings(cls: type) -> dict[str, str]:
    """Field name → the string literal right below its annotation in the class body (one line)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # pragma: no cover - classes built at run time
        return {}
    body = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)).body
    docs = {}
    for stmt, nxt in zip(body, body[1:]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


__all__ = ["SHIPPED_PACKAGES", "TypedConfig", "apply_override", "config_help", "did_you_mean", "field_docs",
           "from_dict", "load_config", "override", "resolve_path", "shipped_config", "shipped_path", "to_dict",
           "unknown_name_error"]
