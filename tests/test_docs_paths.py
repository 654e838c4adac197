"""The files the docs and pyproject.toml's comments name exist: a move that forgets a pointer fails here.

A repository path is a run of path characters that starts with a top-level folder of the checkout (``r2a/``,
``training/``, ``configs/``, ...), optionally after ``../`` (a link from docs/); a path that also names a file
beside the document (docs/architecture.md's link ``experiments/headroom.md``) may mean that one. Globs
(``configs/bench/*.yaml``) and placeholders (``configs/language/<Task>.yaml``) must match at least one file. Not
paths: gymnasium ids such as ``r2a/Stack-v0``.

Every Markdown link of the README and docs/ into the published results (docs/results/) leads to a file there, or to
a run's viewer page, which ``make viewers`` writes (git-ignored).
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the documents whose paths are checked (pyproject.toml: its comments only)
DOCUMENTS = ("docs/architecture.md", "docs/extending.md", "experiments/README.md", "pyproject.toml")
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


def _exists(path: str, base: Path = ROOT) -> bool:
    pattern = re.sub(r"<[^>]*>", "*", path)
    return bool(glob.glob(str(base / pattern))) if "*" in pattern else (base / path).exists()


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_path_a_document_names_exists(document):
    paths = named_paths(_text(document))
    assert len(paths) >= 5, f"{document}: found only {sorted(paths)}; has the path pattern broken?"
    beside = (ROOT / document).parent
    missing = sorted(p for p in paths if not _exists(p) and not _exists(p, beside))
    assert not missing, f"{document} names files that do not exist: {missing}"


def test_the_path_pattern_finds_what_it_should():
    text = ("`r2a/vla/train.py`, (training/vla/config.py); [a](../r2a/assets/builtin_vla/README.md) "
            "configs/bench/*.yaml, sim/shifts/<name>.py and r2a/assets/... but not gymnasium's r2a/Stack-v0, "
            "not foo/r2a/x.py, not runs/quickstart/lift.hdf5")
    assert named_paths(text) == {"r2a/vla/train.py", "training/vla/config.py", "r2a/assets/builtin_vla/README.md",
                                 "configs/bench/*.yaml", "sim/shifts/<name>.py", "r2a/assets/"}
    assert not _exists("r2a/vla/train.py") and _exists("configs/bench/*.yaml") and _exists("sim/shifts/<name>.py")


#: where the published runs are; a link into them must resolve (``make viewers`` writes each run's viewer page)
RESULTS_DIR = ROOT / "docs" / "results"
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def _links_into_results() -> list[tuple[str, str, Path]]:
    """(document, link, target) of every Markdown link of the README and docs/ that points into docs/results/."""
    found = []
    for document in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for match in _LINK.finditer(document.read_text(encoding="utf-8")):
            link = match.group(1)
            target = (document.parent / link).resolve()
            if "://" not in link and RESULTS_DIR in (target, *target.parents):
                found.append((str(document.relative_to(ROOT)), link, target))
    return found


def _resolves(target: Path) -> bool:
    """A file that is there, or a run's viewer page, which ``make viewers`` writes (git-ignored) for each run."""
    if target.exists():
        return True
    viewer = target.parent
    return target.name == "index.html" and viewer.name == "viewer" and (viewer.parent / "run.json").is_file()


def test_every_link_into_the_published_results_resolves():
    links = _links_into_results()
    assert len(links) >= 20, f"found only {len(links)} links into docs/results; has the link pattern broken?"
    broken = sorted(f"{document}: {link}" for document, link, target in links if not _resolves(target))
    assert not broken, f"links into docs/results that lead nowhere (renamed by 'r2a bench publish'?): {broken}"
