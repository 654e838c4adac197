"""One row of the README's table of bases ("Before you wrap your policy") from a merged run's summary.json, so the
table is copied from the results, never typed.

    .venv/bin/python scripts/readme_row.py docs/results/libero_strong \\
        --label '`builtin-libero-strong` → `r2a-libero-strong-noharm` (libero_standard, 840; clean 40)'

Columns: clean SR base → R2A and the paired clean uplift in points (with its CI on a clean-only run), the pooled
shifted uplift [95 % CI], the uplift per factor, and the share of R2A's episodes where start-pose recovery engaged
(clean / shifted). Bold where the CI excludes zero; "–" where the run has no such episodes (LIBERO-Plus's factors,
``liberoplus:camera``…, fill the columns of the same name). The candidate is the run's only wrapped policy unless
``--candidate`` names one. tests/test_readme_rows.py checks that the README's rows are what this prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Mapping, Sequence

#: the summary formats this reads (eval/report/summary.py)
SCHEMAS = (("r2a.bench.summary", 2),)
#: the README's factor columns, in its order
FACTORS = ("camera", "robot_init", "language", "light", "background", "noise", "layout")


def points(value: float) -> str:
    """A rate difference in points, signed, to one decimal (halves away from zero: −1.25 → −1.3), with a real minus
    sign."""
    rounded = Decimal(f"{100 * value:.6f}").quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    return f"{rounded:+.1f}".replace("-", "−")


def rates(before: float, after: float) -> str:
    """Two success rates to three decimals, one trailing zero dropped when both have it (0.85 → 0.85, 0.975, 0.568 →
    0.670)."""
    texts = [f"{Decimal(f'{v:.6f}').quantize(Decimal('0.001'), rounding=ROUND_HALF_UP)}" for v in (before, after)]
    if all(t.endswith("0") for t in texts):
        texts = [t[:-1] for t in texts]
    return " → ".join(texts)


def with_ci(value: float, ci: Sequence[float | None]) -> str:
    low, high = ("–" if bound is None else points(bound) for bound in ci)
    return f"{points(value)} [{low}, {high}]"


def bold_if(text: str, ci: Sequence[float | None]) -> str:
    """``text`` in bold where the interval excludes zero."""
    excludes_zero = ci[0] is not None and ci[1] is not None and (ci[0] > 0 or ci[1] < 0)
    return f"**{text}**" if excludes_zero else text


def clean_cell(clean: Mapping[str, Any], clean_only: bool) -> str:
    uplift = with_ci(clean["uplift"], clean["ci"]) if clean_only else points(clean["uplift"])
    return f"{rates(clean['baseline_sr'], clean['candidate_sr'])} · {bold_if(uplift, clean['ci'])}"


def recovery_cell(wrapper: Sequence[Mapping[str, Any]], candidate: str, clean_only: bool) -> str:
    def share(rows: list[Mapping[str, Any]]) -> str:
        episodes = sum(int(r["episodes"]) for r in rows)
        if not episodes:
            return "–"
        share = Decimal(100 * sum(int(r["recovered_episodes"]) for r in rows)) / episodes
        percent = share.quantize(Decimal(1), rounding=ROUND_HALF_UP)
        return f"{percent} %" if percent else "0"

    rows = [r for r in wrapper if r["policy"] == candidate]
    clean = share([r for r in rows if r["factor"] == "clean"])
    shifted = "–" if clean_only else share([r for r in rows if r["factor"] != "clean"])
    return f"{clean} / {shifted}"


def headline_of(summary: Mapping[str, Any], candidate: str | None) -> Mapping[str, Any]:
    """The run's headline entry for ``candidate`` (its only wrapped policy when None) against its base policy."""
    base = summary["settings"].get("base_policy") or summary["policies"][0]  # older runs: the first policy
    rows = [h for h in summary["headline"] if h["baseline"] == base and candidate in (None, h["candidate"])]
    if len(rows) != 1:
        found = ", ".join(sorted({h["candidate"] for h in summary["headline"] if h["baseline"] == base}))
        raise SystemExit(f"expected one candidate against {base} to report, the run has: {found or 'none'}"
                         " (name one with --candidate)")
    return rows[0]


def readme_row(summary: Mapping[str, Any], label: str, candidate: str | None = None,
               clean_summary: Mapping[str, Any] | None = None) -> str:
    """The table row for ``candidate`` against the run's base policy (``settings.base_policy``); the clean cell from
    ``clean_summary`` (a clean-only run of the same pair, with more clean pairs) when given."""
    head = headline_of(summary, candidate)
    clean_only = not head["n_pairs"]
    if clean_summary is None:
        clean = clean_cell(head["clean"], clean_only)
    else:
        clean = clean_cell(headline_of(clean_summary, head["candidate"])["clean"], True)
    cells = [label, clean]
    if clean_only:
        cells += ["–", *[""] * len(FACTORS)]
    else:
        cells.append(bold_if(with_ci(head["pooled_uplift"], head["pooled_ci"]), head["pooled_ci"]))
        factors = {name.split(":")[-1]: entry for name, entry in head["factors"].items()}  # liberoplus:camera
        for factor in FACTORS:
            entry = factors.get(factor)
            cells.append(bold_if(points(entry["uplift"]), entry["ci"]) if entry else "–")
    cells.append(recovery_cell(summary.get("wrapper") or [], head["candidate"], clean_only))
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def read_summary(run: Path) -> dict[str, Any]:
    path = run / "summary.json" if run.is_dir() else run
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise SystemExit(f"{path}: expected a merged run's summary.json ({err})") from None
    found = (summary.get("schema"), summary.get("schema_version")) if isinstance(summary, dict) else None
    if found not in SCHEMAS:
        raise SystemExit(f"{path}: schema {found} is not a benchmark summary this script reads ({SCHEMAS})")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a merged run directory (its summary.json) or the summary.json")
    parser.add_argument("--label", required=True, help="the row's first cell: base → R2A (run, pairs)")
    parser.add_argument("--candidate", help="the wrapped policy to report (the run's only one by default)")
    parser.add_argument("--clean-run", type=Path, help="a clean-only run of the same pair: the clean cell's source")
    args = parser.parse_args(argv)
    clean = read_summary(args.clean_run) if args.clean_run else None
    print(readme_row(read_summary(args.run), args.label, args.candidate, clean))
    return 0


if __name__ == "__main__":
    sys.exit(main())
