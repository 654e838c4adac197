"""The one config loader (r2a_core.config): types, overrides, errors with 'did you mean', field docs for --help."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from r2a_core.config import (
    TypedConfig,
    apply_override,
    config_help,
    field_docs,
    load_config,
    resolve_path,
    shipped_config,
    shipped_path,
)
from r2a_core.errors import R2AInputError


@dataclass(frozen=True)
class Section:
    """A nested section."""

    stride: int = 5
    """frames per window"""
    weights: tuple[float, ...] = (1.0, 0.5)
    """one weight per group"""
    mode: Literal["fast", "exact"] = "fast"
    """how to search"""


@dataclass
class Example(TypedConfig):
    """A config with every kind of field the project uses."""

    CONFIG_WHAT: ClassVar[str] = "example config"

    name: str = "run"
    """a short name"""
    episodes: int = 2
    """episodes per condition"""
    rate: float = 0.5
    """a rate"""
    enabled: bool = True
    """switch it on"""
    limit: int | None = None
    """an optional bound (null: none)"""
    tasks: list[str] = field(default_factory=lambda: ["Lift"])
    """tasks to run"""
    factors: dict[str, list[int]] = field(default_factory=dict)
    """factor → levels"""
    section: Section = field(default_factory=Section)

    def validate(self) -> None:
        if self.episodes < 1:
            raise R2AInputError(f"'episodes' must be >= 1, got {self.episodes}")


def test_defaults_then_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("episodes: 3\nsection:\n  stride: 7\nfactors: {camera: [1]}\n")
    config = Example.from_yaml(path, ["rate=1", "section.weights=[2, 3]", "factors.light=[1, 3]", "limit=10",
                                      "section.mode=exact"])
    assert config.episodes == 3 and config.rate == 1.0 and isinstance(config.rate, float)
    assert config.section == Section(stride=7, weights=(2.0, 3.0), mode="exact")
    assert config.factors == {"camera": [1], "light": [1, 3]}
    assert config.limit == 10 and config.name == "run"
    assert Example.from_dict(config.to_dict()) == config
    assert config.to_dict()["section"]["weights"] == [2.0, 3.0]  # plain data: tuples become lists


def test_the_module_functions_work_on_any_dataclass(tmp_path):
    assert load_config(Section, None, ["stride=9"]).stride == 9
    assert apply_override(Section(), "mode=exact").mode == "exact"
    assert Example().with_overrides(["enabled=false"]).enabled is False


@pytest.mark.parametrize("item, message", [
    ("episdes=3", "--set episdes=3: unknown field 'episdes' (did you mean 'episodes'?); valid fields: name, "),
    ("stride=3", "unknown field 'stride' (did you mean 'section.stride'?)"),
    ("section.strid=3", "unknown field 'strid' (did you mean 'stride'?); valid fields: stride, weights, mode"),
    ("episodes=three", "--set episodes=three: episodes: got 'three', expected an integer"),
    ("episodes=2.5", "got 2.5, expected an integer"),
    ("rate=fast", "got 'fast', expected a number"),
    ("enabled=1", "got 1, expected true or false"),
    ("name=3", "got 3, expected a string"),
    ("limit=soon", "got 'soon', expected an integer or nothing"),
    ("tasks=Lift", "got 'Lift', expected a list of strings"),
    ("factors.camera=[one]", "factors.camera[0]: got 'one', expected an integer"),
    ("section.mode=fsat", "expected one of 'fast', 'exact' (did you mean 'fast'?)"),
    ("section.weights=[1, x]", "weights[1]: got 'x', expected a number"),
    ("episodes", "expected section.field=value"),
    ("name.first=x", "'name' has no fields"),
    ("episodes=0", "example config: 'episodes' must be >= 1, got 0"),
    ("tasks=[a", "the value is not valid YAML"),
])
def test_every_bad_override_is_a_one_line_error(item, message):
    with pytest.raises(R2AInputError, match=re.escape(message)) as err:
        Example.from_yaml(None, [item])
    assert "\n" not in str(err.value)


def test_yaml_errors_name_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("section:\n  stride: fast\n")
    with pytest.raises(R2AInputError, match=re.escape(f"example config {path}: section: stride: got 'fast'")):
        Example.from_yaml(path)
    path.write_text("episodez: 3\n")
    with pytest.raises(R2AInputError, match="unknown field 'episodez' .did you mean 'episodes'"):
        Example.from_yaml(path)
    path.write_text("- 1\n- 2\n")
    with pytest.raises(R2AInputError, match="expected a mapping"):
        Example.from_yaml(path)
    with pytest.raises(R2AInputError, match="file not found"):
        Example.from_yaml(tmp_path / "missing.yaml")


def test_a_bare_name_is_the_shipped_config_of_its_kind_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    smoke = shipped_path("configs/bench/smoke.yaml")
    assert smoke.is_file() and shipped_config("smoke", "bench") == smoke
    assert shipped_config("configs/bench/smoke.yaml", "bench") == smoke  # the checkout's relative path, elsewhere
    from eval.bench_config import BenchConfig

    assert BenchConfig.from_yaml("smoke").name == "smoke"
    with pytest.raises(R2AInputError, match=re.escape("benchmark config 'smok': no such file, nor a shipped name "
                                                      "(did you mean 'smoke'?); shipped (configs/bench/): ")):
        BenchConfig.from_yaml("smok")
    (tmp_path / "smoke").mkdir()  # what the working directory holds comes first
    assert shipped_config("smoke", "bench") == Path("smoke")


def test_relative_paths_are_read_as_given_then_as_the_shipped_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_path("r2a/assets/r2a_gate") == shipped_path("r2a/assets/r2a_gate")
    assert shipped_path("r2a/assets/r2a_gate").is_dir()
    assert resolve_path("runs/mine") == Path("runs/mine")  # not shipped: as given, for its reader to report
    (tmp_path / "r2a" / "assets" / "r2a_gate").mkdir(parents=True)
    assert resolve_path("r2a/assets/r2a_gate") == Path("r2a/assets/r2a_gate")


def test_field_docs_flatten_sections_for_the_help():
    docs = field_docs(Example)
    assert docs["section.stride"] == (5, "frames per window")
    assert docs["factors"] == ({}, "factor → levels")
    assert "section" not in docs
    text = config_help(Example)
    assert '  section.weights=[1.0, 0.5]  one weight per group' in text.splitlines()
    assert "  limit=null  an optional bound (null: none)" in text.splitlines()


#: the project's packages (docs/architecture.md, "The package rule")
PACKAGES = ("r2a_core", "sim", "demos", "graph_builder", "r2a", "training", "gating", "eval", "r2a_cli")


def _project_configs() -> list[tuple[str, str]]:
    """(module, class) of every TypedConfig subclass defined in the project's packages, read from the source."""
    import ast

    root = Path(__file__).resolve().parents[1]
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ClassDef) and any(
                        getattr(base, "id", getattr(base, "attr", None)) == "TypedConfig" for base in node.bases):
                    module = ".".join(path.relative_to(root).with_suffix("").parts)
                    found.append((module.removesuffix(".__init__"), node.name))
    return found


PROJECT_CONFIGS = _project_configs()


def test_every_config_class_is_found():
    import importlib

    for module, _ in PROJECT_CONFIGS:
        importlib.import_module(module)

    def subclasses(cls: type) -> set[type]:
        return {sub for direct in cls.__subclasses__() for sub in {direct} | subclasses(direct)}

    project = {f"{c.__module__}.{c.__qualname__}" for c in subclasses(TypedConfig)
               if c.__module__.split(".")[0] in PACKAGES}  # not this file's Example
    assert project == {f"{m}.{c}" for m, c in PROJECT_CONFIGS}
    assert {"GraphConfig", "BenchConfig", "TrainConfig", "GateTrainConfig", "RetrieverTrainConfig",
            "R2AConfig", "CalibrationConfig"} <= {c for _, c in PROJECT_CONFIGS}


@pytest.mark.parametrize("module, cls", PROJECT_CONFIGS)
def test_every_project_config_documents_every_field(module, cls):
    """Each field (sections flattened) has the docstring right below it that ``--help`` shows."""
    import importlib

    config_cls = getattr(importlib.import_module(module), cls)
    docs = field_docs(config_cls)
    undocumented = [name for name, (_, doc) in docs.items() if not doc]
    assert not undocumented, f"{module}.{cls}: fields without a docstring: {undocumented}"
    assert issubclass(config_cls, TypedConfig)
