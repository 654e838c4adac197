"""The shipped bases are frozen byte for byte: every benchmark run records the sha256 of the base's whole checkpoint
directory (`base_checkpoint`, README included), and a resume refuses a base whose digest changed. So an edit to a
frozen base — even to its README, after its runs — breaks the resume of every run made with it and the provenance of
every published one. A new base is a new registry name with a new directory; these digests never change."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2a_core.provenance import sha256_dir

ASSETS = Path(__file__).resolve().parents[1] / "r2a" / "assets"

#: the digest each base's published runs recorded (docs/results/**/run.json), or for builtin_libero_strong its clean run
FROZEN = {
    "builtin_vla": "d55ded18c2d46945fa7d52acf558fd9bc916c8114b9ac45d58455a910da3d0a9",
    "builtin_libero": "1ad66e9c4bd78a03209e3be19ec34f78f6bd01c71e0997e9dd019581fb21aab8",
    "builtin_libero_strong": "a896d135de5a8c7572d854a5ec4a609d1605c6dcf526abc881a5ac60effbddab",
}


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_a_frozen_base_keeps_the_digest_its_runs_recorded(name):
    assert sha256_dir(ASSETS / name) == FROZEN[name], (
        f"r2a/assets/{name} changed: it is a frozen base, and its runs recorded {FROZEN[name][:12]}; restore its "
        "bytes (git checkout) and document it elsewhere, or ship a new base under a new name")
