"""Graph build config: YAML defaults, overrides, helpful errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from graph_builder.config import GraphConfig, apply_override, field_docs, load_config
from r2a_core.errors import R2AInputError

DEFAULT_YAML = Path(__file__).resolve().parents[1] / "configs" / "graph" / "default.yaml"


def test_default_yaml_equals_builtin_defaults():
    assert load_config(DEFAULT_YAML) == GraphConfig()


def test_overrides_parse_yaml_values():
    cfg = load_config(DEFAULT_YAML, ["segmentation.stride=10", "edges.temporal_offsets=[2, 4]",
                                     "edges.spatial_cross_task=false", "features.phase_weight=0"])
    assert cfg.segmentation.stride == 10
    assert cfg.edges.temporal_offsets == (2, 4)
    assert cfg.edges.spatial_cross_task is False
    assert cfg.features.phase_weight == 0.0
    assert GraphConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("override, message", [
    ("segmentation.strid=3", "unknown field 'strid' (did you mean 'stride'?); valid fields: stride, "),
    ("segmentaton.stride=3", "unknown field 'segmentaton' (did you mean 'segmentation'?)"),
    ("stride=3", "unknown field 'stride' (did you mean 'segmentation.stride'?)"),
    ("segmentation.stride", "expected section.field=value"),
    ("segmentation.stride=fast", "got 'fast', expected an integer"),
    ("segmentation.stride=0", "segmentation.stride must be >= 1"),
    ("index.type=annoy", "expected one of 'auto', 'flat', 'ivf', 'hnsw'"),
    ("edges.temporal_offsets=[1, -2]", "positive integers"),
    ("edges.spatial_cross_task=1", "expected true or false"),
])
def test_bad_overrides_are_explained(override, message):
    with pytest.raises(R2AInputError, match=re.escape(message)):
        apply_override(GraphConfig(), override)


def test_bad_yaml_files(tmp_path):
    with pytest.raises(R2AInputError, match="file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("segmentation: [1, 2\n")
    with pytest.raises(R2AInputError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("segmentation:\n  stride: 5\n  windows: 3\n")
    with pytest.raises(R2AInputError, match="unknown field 'windows'"):
        load_config(bad)


def test_every_field_has_a_one_line_doc_for_the_cli_help():
    docs = field_docs()
    defaults = GraphConfig().to_dict()
    assert set(docs) == {f"{s}.{f}" for s, fields in defaults.items() for f in fields}
    assert all(doc and "\n" not in doc for _, doc in docs.values())
