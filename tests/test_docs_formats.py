"""The format versions the docs name are the ones the code writes.

docs/architecture.md's "On-disk formats" table names, per file kind, its format name and version and the module
that writes it (or, for a hand-written YAML format, the module that reads it). Each row is parsed and its
version compared with the constant in that module; a version bump that forgets the docs fails here, and so does
a docs edit that forgets the code. The prose of the README and of docs/architecture.md is checked against the
table wherever it names a format with a version (`` `r2a.bench.summary` v2 ``).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SECTION = "## On-disk formats"
#: rows of formats r2a only reads (someone else's versioning): they name no r2a constant
READ_ONLY = {"LeRobot dataset"}
_CELL = re.compile(r"(?<!\\)\|")
#: ``format_version = 1``, ``version = 1``, ``schema_version = 1``, ``format_version: 1``
_VERSION_FIELD = re.compile(r"\b\w*version`?\s*[=:]\s*(\d+)")
#: ``format = "r2a.vla.checkpoint"``, ``schema = "r2a.bench.summary"``, ``r2a_format = "r2a-hdf5"``
_NAME_FIELD = re.compile(r"(?:format|schema)\s*=\s*\"([^\"]+)\"")
#: `` `r2a.gate.data` v1 ``
_NAMED_VERSION = re.compile(r"`([\w.\-]+)` v(\d+)\b")
_MODULE = re.compile(r"`([\w/]+\.py)`")


def _format_rows() -> list[dict[str, str]]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index(SECTION) + len(SECTION):]
    section = section[: section.find("\n## ")]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in _CELL.split(lines[0])[1:-1]]
    assert header == ["what", "name and version", "written by", "read by"], header
    rows = []
    for line in lines[2:]:  # after the header and its |---| line
        cells = [c.strip() for c in _CELL.split(line)[1:-1]]
        assert len(cells) == len(header), line
        rows.append(dict(zip(header, cells)))
    return rows


ROWS = _format_rows()


def _documented(row: dict[str, str]) -> tuple[str | None, int]:
    """The format name (None for the YAML formats, which have only a version) and the version a row names."""
    cell = row["name and version"]
    name = _NAME_FIELD.search(cell)
    named = _NAMED_VERSION.search(cell)
    versions = {int(v) for v in _VERSION_FIELD.findall(cell)} | {int(v) for _, v in _NAMED_VERSION.findall(cell)}
    assert len(versions) == 1, f"row {row['what']!r}: expected one version in {cell!r}, found {sorted(versions)}"
    return (name.group(1) if name else named.group(1) if named else None), versions.pop()


def _modules(row: dict[str, str]) -> list[str]:
    """The modules a row says write the format, else (hand-written files) the modules that read it."""
    paths = _MODULE.findall(row["written by"]) or _MODULE.findall(row["read by"])
    assert paths, f"row {row['what']!r} names no module that writes or reads it"
    for path in paths:
        assert (ROOT / path).is_file(), f"row {row['what']!r}: {path} does not exist"
    return [path.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for path in paths]


def _version_constant(module, name: str | None) -> tuple[str, int] | None:
    """(constant name, value) of the module's version of format ``name`` (or of its only format)."""
    constants = {k: v for k, v in vars(module).items() if k.isupper()}
    versions = {k: v for k, v in constants.items() if k.endswith("VERSION") and isinstance(v, int)}
    if name is None:
        return next(iter(versions.items())) if len(versions) == 1 else None
    for key in (k for k, v in constants.items() if v == name):
        for candidate in (f"{key}_VERSION", f"{key.removesuffix('_NAME')}_VERSION",
                          f"{key.removesuffix('_FORMAT')}_VERSION"):
            if candidate in versions:
                return candidate, versions[candidate]
    return None


def test_the_table_lists_the_formats():
    assert len(ROWS) >= 15
    assert READ_ONLY <= {row["what"] for row in ROWS}


@pytest.mark.parametrize("row", [r for r in ROWS if r["what"] not in READ_ONLY], ids=lambda r: r["what"])
def test_each_documented_version_is_the_one_the_code_writes(row):
    name, version = _documented(row)
    found = {}
    for module_name in _modules(row):
        constant = _version_constant(importlib.import_module(module_name), name)
        if constant is not None:
            found[module_name] = constant
    assert found, (f"docs/architecture.md, {SECTION[3:]}, row {row['what']!r}: none of {_modules(row)} defines or "
                   f"imports the version constant of {name or 'its format'}")
    for module_name, (constant, value) in found.items():
        assert value == version, (f"docs/architecture.md, {SECTION[3:]}, row {row['what']!r} says v{version}; "
                                  f"{module_name}.{constant} = {value}: update the row (or the code)")


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_the_prose_names_the_versions_of_the_table(doc):
    current = {}
    for row in ROWS:
        if row["what"] not in READ_ONLY:
            name, version = _documented(row)
            if name:
                current[name] = version
    stale = [f"{doc}:{i}: `{name}` v{v} (the table: v{current[name]})"
             for i, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), 1)
             for name, v in _NAMED_VERSION.findall(line) if name in current and int(v) != current[name]]
    assert not stale, "\n".join(stale)
