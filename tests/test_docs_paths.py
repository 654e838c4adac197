"""The files the docs and pyproject.toml's comments name exist: a move that forgets a pointer fails here.

A repository path is a run of path characters that starts with a top-level folder of the checkout (``r2a/``,
``training/``, ``configs/``, ...), optionally after ``../`` (a link from docs/). Globs (``configs/bench/*.yaml``)
and placeholders (``configs/language/<Task>.yaml``) must match at least one file. Not paths: gymnasium ids such as
``r2a/Stack-v0``.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the documents whose paths are checked (pyproject.toml: its comments only)
DOCUMENTS = ("docs/architecture.md", "docs/extending.md", "pyproject.toml")
#: the checkout's own top-level folders (not what a run left there: runs/, data/ are ignored by git)
TOP_LEVEL = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
                   and p.name not in ("runs", "data", "out", "build", "wandb"))
_PATH = re.compile(r"(?<![\w./-])(?:\.\./)?((?:%s)/[\w./<>*…-]*)" % "|".join(map(re.escape, TOP_LEVEL)))
_GYM_ID = re.compile(r"^r2a/[\w*]+-v\d+$")


def named_paths(text: str) -> set[str]:
    """The repository paths ``text`` names (trailing punctuation and an ellipsis dropped)."""
    found = {m.group(1).rstrip(".,;:…") for m in _PATH.finditer(text)}
    return {p for p in found if not _GYM_ID.match(p)}


def _text(document: str) -> str:
    text = (ROOT / document).read_text(encoding="utf-8")
    if document.endswith(".toml"):
        return "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    return text


def _exists(path: str) -> bool:
    pattern = re.sub(r"<[^>]*>", "*", path)
    return bool(glob.glob(str(ROOT / pattern))) if "*" in pattern else (ROOT / path).exists()


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_path_a_document_names_exists(document):
    paths = named_paths(_text(document))
    assert len(paths) >= 5, f"{document}: found only {sorted(paths)}; has the path pattern broken?"
    missing = sorted(p for p in paths if not _exists(p))
    assert not missing, f"{document} names files that do not exist: {missing}"


def test_the_path_pattern_finds_what_it_should():
    text = ("`r2a/vla/train.py`, (training/vla/config.py); [a](../r2a/assets/builtin_vla/README.md) "
            "configs/bench/*.yaml, sim/shifts/<name>.py and r2a/assets/... but not gymnasium's r2a/Stack-v0, "
            "not foo/r2a/x.py, not runs/quickstart/lift.hdf5")
    assert named_paths(text) == {"r2a/vla/train.py", "training/vla/config.py", "r2a/assets/builtin_vla/README.md",
                                 "configs/bench/*.yaml", "sim/shifts/<name>.py", "r2a/assets/"}
    assert not _exists("r2a/vla/train.py") and _exists("configs/bench/*.yaml") and _exists("sim/shifts/<name>.py")
