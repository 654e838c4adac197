"""A bad output path is a one-line error (exit 2) before anything is written: a file where a directory goes, a
directory where a file goes, a path under a file — checked once (r2a_core.files.check_output_path) for every output
argument every command declares (r2a_cli/outputs.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from r2a_cli.main import GROUPS, group_module, main
from r2a_cli.outputs import OUTPUTS
from r2a_core.errors import R2AInputError
from r2a_core.files import check_output_path
from tests.test_bench_view import make_run

#: the flags that name a path a command writes (a new output flag belongs here and in r2a_cli/outputs.py)
OUTPUT_FLAGS = {"--out", "--json", "--csv", "--figure", "--write"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A small results directory (synthetic records, the benchmark's own writers) that exports cleanly."""
    return make_run(tmp_path_factory.mktemp("outputs") / "run")


@pytest.fixture
def place(tmp_path) -> Path:
    """A directory holding a file ``f`` and an empty directory ``d``."""
    (tmp_path / "f").write_text("not a directory\n")
    (tmp_path / "d").mkdir()
    return tmp_path


def _tree(root: Path) -> list[tuple[str, bool]]:
    return sorted((str(p.relative_to(root)), p.is_dir()) for p in root.rglob("*"))


def _refused(argv: list[str], place: Path, capsys, *expected: str) -> str:
    """Run ``r2a ARGV``: exit 2, one line on stderr naming the path and the expectation, nothing made in ``place``."""
    before = _tree(place)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert all(part in err for part in expected), err
    assert _tree(place) == before
    return err


def test_fit_refuses_an_out_that_is_a_file(place, capsys):
    err = _refused(["fit", "--out", str(place / "f")], place, capsys, "expected a directory")
    assert err == f"r2a fit: error: --out {place / 'f'}: is a file; expected a directory (a new one, or one to write " \
                  "into)\n"


def test_fit_refuses_an_out_under_a_file(place, capsys):
    err = _refused(["fit", "--out", str(place / "f" / "sub" / "deeper")], place, capsys, "expected a directory path")
    assert f"--out {place / 'f' / 'sub' / 'deeper'}: {place / 'f'} is a file, not a directory" in err


def test_bench_run_refuses_an_out_that_is_a_file(place, capsys):
    _refused(["bench", "run", "--config", "smoke", "--policy", "expert", "--out", str(place / "f")], place, capsys,
             f"r2a bench: error: --out {place / 'f'}: is a file", "expected a directory")


def test_bench_export_refuses_a_csv_directory_that_is_a_file(run_dir, place, capsys):
    _refused(["bench", "export", str(run_dir), "--csv", str(place / "f")], place, capsys,
             f"--csv {place / 'f'}: is a file", "expected a directory")
    assert main(["bench", "export", str(run_dir), "--csv", str(place / "csv")]) == 0  # the same with a good path
    assert (place / "csv" / "episodes.csv").is_file()


def test_bench_export_refuses_a_json_file_that_is_a_directory(run_dir, place, capsys):
    _refused(["bench", "export", str(run_dir), "--json", str(place / "d")], place, capsys,
             f"--json {place / 'd'}: is a directory", "expected a file")
    _refused(["bench", "export", str(run_dir), "--json", str(place / "f" / "x.json")], place, capsys,
             f"--json {place / 'f' / 'x.json'}: {place / 'f'} is a file", "expected a file path")
    assert not any((place / "d").iterdir())


@pytest.mark.parametrize("argv, kind", [
    (["demos", "collect", "--task", "Lift", "--episodes", "1", "--out", "{d}"], "file"),
    (["graph", "build", "in.hdf5", "--out", "{f}/graph"], "dir"),
    (["policy", "train", "--demos", "in.hdf5", "--out", "{f}"], "dir"),
    (["policy", "dagger", "--policy", "builtin", "--task", "Lift", "--episodes", "1", "--out", "{d}"], "file"),
    (["gate", "train", "--data", "in.npz", "--out", "{f}"], "dir"),
    (["retriever", "train", "--graph", "g", "--demos", "in.hdf5", "--out", "{f}/sub"], "dir"),
    (["bench", "merge", "{f}", "a", "b"], "dir"),
    (["bench", "view", "run", "--out", "{f}"], "dir"),
    (["bench", "calibrate", "--factor", "camera", "--out", "{d}", "--figure", "{d}"], "file"),
])
def test_every_command_checks_its_outputs_first(argv, kind, place, capsys):
    argv = [a.format(d=place / "d", f=place / "f") for a in argv]
    _refused(argv, place, capsys, f"expected a {'directory' if kind == 'dir' else 'file'}")


def test_gate_evaluate_checks_the_table_beside_its_json(place, capsys, monkeypatch):
    (place / "rows.md").mkdir()
    monkeypatch.setattr("gating.evaluate.evaluate_gate", lambda *a, **k: pytest.fail("evaluated before the check"))
    _refused(["gate", "evaluate", "--gate", "g", "--data", "x.npz", "--out", str(place / "rows.json")], place, capsys,
             f"--out's table {place / 'rows.md'}: is a directory")


def _leaf_parsers(parser: argparse.ArgumentParser, name: str):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield name, parser
    for sub in subs:
        for command, child in sub.choices.items():
            yield from _leaf_parsers(child, f"{name} {command}")


def test_every_output_argument_of_every_command_is_declared():
    """So the check cannot be forgotten: each output flag (and merge's OUT) is an ``add_output`` argument."""
    undeclared, declared = [], 0
    for group in GROUPS:
        for name, parser in _leaf_parsers(group_module(group).build_parser(f"r2a {group}"), f"r2a {group}"):
            outputs = parser.get_default(OUTPUTS) or {}
            for action in parser._actions:
                if OUTPUT_FLAGS & set(action.option_strings) or (not action.option_strings and action.dest == "out"):
                    declared += action.dest in outputs
                    if action.dest not in outputs:
                        undeclared.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not undeclared, f"output arguments not declared with r2a_cli.outputs.add_output: {undeclared}"
    assert declared >= 30


def test_good_output_paths_pass_and_nothing_is_created(place, monkeypatch):
    new = place / "new" / "deeper"
    assert check_output_path(new, "dir", "--out") == new and check_output_path(new / "x.json", "file") == new / "x.json"
    assert check_output_path(place / "d", "dir") and check_output_path(place / "f", "file")
    assert not (place / "new").exists()
    monkeypatch.chdir(place)
    assert check_output_path("new.json", "file") == Path("new.json")  # a bare name: its parent is "."
    with pytest.raises(R2AInputError, match=r"^f: is a file; expected a directory"):  # without a flag the path leads
        check_output_path("f", "dir")
    with pytest.raises(R2AInputError, match=r"^f/y\.json: f is a file, not a directory"):
        check_output_path("f/y.json", "file")
    with pytest.raises(ValueError, match="kind"):
        check_output_path(place, "folder")
