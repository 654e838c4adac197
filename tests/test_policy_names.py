"""What `r2a policy list` shows and where each name lives: r2a registers what a deployment runs (bases, adapters,
observation wrappers, R2A and one preset per shipped base); eval registers the diagnostics (experts, oracles,
ablations, the earlier variants), listed apart; every name a published run or a Makefile recipe records resolves."""

from __future__ import annotations

import glob
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from eval.diagnostics import register_diagnostics
from r2a.policies.registry import (
    DIAGNOSTICS_HEADING,
    POLICIES,
    parse_policy_spec,
    policy_names,
    r2a_config_for,
    register_policy,
)
from r2a_core.errors import R2AInputError

ROOT = Path(__file__).resolve().parents[1]
#: each shipped base → the R2A preset named for it
PRESETS = {"builtin": "r2a-builtin", "builtin-libero": "r2a-builtin-libero",
           "builtin-libero-strong": "r2a-builtin-libero-strong"}
#: each preset → the variant the project recommended for its base under its earlier name (README, docs/experiments/)
RECOMMENDED = {"r2a-builtin": "r2a-noharm", "r2a-builtin-libero": "r2a-libero-noharm",
               "r2a-builtin-libero-strong": "r2a-libero-strong-noharm"}
#: a history note in a help text ("issue 34", "issue 49's levers") instead of what the thing is
HISTORY_NOTE = re.compile(r"\bissues? \d|\blevers?\b", re.IGNORECASE)


def _r2a_command(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "r2a_cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _listed(lines: list[str]) -> list[str]:
    return [line.split()[0] for line in lines if line.strip() and not line.startswith(("(", DIAGNOSTICS_HEADING))]


def test_policy_list_shows_what_a_deployment_runs_and_counts_the_diagnostics():
    out = _r2a_command("policy", "list").splitlines()
    register_diagnostics()
    names = _listed(out)
    assert len(names) <= 15 and names == policy_names()
    assert {*PRESETS, *PRESETS.values(), "r2a", "openpi", "lerobot", "callable"} <= set(names)
    assert not {"expert", "oracle-ref", "r2a-noharm", "r2a-knn"} & set(names)
    assert "r2a policy list --all" in out[-1] and f"{len(policy_names(diagnostic=True))} diagnostics" in out[-1]
    assert not [line for line in out if HISTORY_NOTE.search(line)]


def test_policy_list_all_shows_the_diagnostics_apart():
    out = _r2a_command("policy", "list", "--all").splitlines()
    heading = out.index(f"{DIAGNOSTICS_HEADING}:")
    register_diagnostics()
    assert _listed(out[:heading]) == policy_names()
    diagnostics = _listed(out[heading + 1:])
    assert diagnostics == policy_names(diagnostic=True)
    assert {"expert", "expert_noisy", "oracle-ref", "oracle-gate", "oracle-both", "oracle-canonicalize",
            "harmonize-always", "r2a-knn", "r2a-noharm", "r2a-libero-strong-noharm"} <= set(diagnostics)
    assert not [line for line in out if HISTORY_NOTE.search(line)]


def test_r2a_alone_registers_no_diagnostic():
    """A deployment imports r2a (the registry, the server, the proxy) and never eval: no expert, oracle or earlier
    variant is registered there."""
    code = ("import sys; import r2a.policies, r2a.serve.proxy, r2a.serve.policy_server; "
            "from r2a.policies.registry import POLICIES; "
            "assert not [n for n, e in POLICIES.items() if e.diagnostic], POLICIES; "
            "assert not {'expert', 'oracle-ref', 'oracle-canonicalize', 'r2a-noharm'} & set(POLICIES); "
            "assert not [m for m in sys.modules if m == 'eval' or m.startswith('eval.')]")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _recorded_specs() -> set[str]:
    specs = set()
    for path in glob.glob(str(ROOT / "docs" / "results" / "**" / "run.json"), recursive=True):
        specs.update(json.loads(Path(path).read_text())["policies"])
    return specs


def _makefile_names() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"(?<![\w./-])((?:r2a|oracle)-[a-z0-9-]*[a-z0-9]|expert_noisy|harmonize-always)\b", text))


def test_every_recorded_and_recipe_name_resolves():
    register_diagnostics()
    specs = _recorded_specs()
    assert len(specs) > 20 and "r2a-libero-strong-noharm" in specs and "oracle-both" in specs
    for spec in sorted(specs | _makefile_names()):
        parse_policy_spec(spec)


def test_every_recorded_r2a_spec_still_names_a_config():
    """A recorded R2A spec gives a config (the one its run used, unless its files moved); specs naming a directory
    of runs/ (an r2a fit made on another machine) need that directory."""
    register_diagnostics()
    for spec in sorted(_recorded_specs()):
        name, arg = parse_policy_spec(spec)
        if name.startswith("r2a") and not (arg or "").startswith("runs/"):
            r2a_config_for(spec)


@pytest.mark.parametrize("preset", sorted(RECOMMENDED))
def test_each_preset_is_its_base_s_recommended_variant(preset):
    register_diagnostics()
    assert not POLICIES[preset].diagnostic and POLICIES[RECOMMENDED[preset]].diagnostic
    config = r2a_config_for(preset)
    assert config.to_dict() == r2a_config_for(RECOMMENDED[preset]).to_dict()
    assert config.base == next(base for base, p in PRESETS.items() if p == preset)


def test_an_unknown_name_lists_the_deployable_and_the_diagnostic_names_apart():
    register_diagnostics()
    with pytest.raises(R2AInputError) as err:
        parse_policy_spec("r2a-bultin")
    message = str(err.value)
    assert "did you mean 'r2a-builtin'?" in message and f"{DIAGNOSTICS_HEADING}: expert" in message
    valid, _, diagnostics = message.partition(DIAGNOSTICS_HEADING)
    assert "r2a-builtin-libero-strong (" in valid and "oracle-ref" not in valid and "oracle-ref" in diagnostics


def test_a_diagnostic_cannot_take_a_deployable_name():
    with pytest.raises(ValueError, match="deployable"):
        register_policy("r2a-builtin", "a diagnostic under a preset's name", diagnostic=True)(lambda ctx: None)
    assert not POLICIES["r2a-builtin"].diagnostic


def test_help_texts_say_what_a_thing_is():
    register_diagnostics()
    notes = {name: entry.help for name, entry in POLICIES.items() if HISTORY_NOTE.search(entry.help)}
    assert not notes, notes
