#!/usr/bin/env bash
# Headroom around the strong LIBERO base (docs/experiments/headroom_strong.md; `make headroom-strong`): every
# condition of configs/bench/libero_strong_headroom.yaml (training seeds) for the base and each policy beside it, on
# one machine, then one merged report in docs/results/headroom_strong/. Every run resumes where it stopped; the order
# is the order of importance, so a session that ends early leaves the most useful runs whole.
set -euo pipefail
cd "$(dirname "$0")/.."
R2A=${R2A:-.venv/bin/r2a}
CONFIG=configs/bench/libero_strong_headroom.yaml
RUNS=${RUNS:-runs/headroom_strong}
OUT=${OUT:-docs/results/headroom_strong}
STRONG=configs/r2a/builtin_libero_strong.yaml
# r2a-libero-strong's task matching, so the oracles change exactly one part of the shipped blend
MATCH="task_match.mode=meaning&task_match.min_similarity=0.7&task_match.min_margin=0.02&task_match.unknown=base"
# run directory → policy spec, in the order they run
NAMES=(base noblend blend oracle-both canonicalize-oracle replay oracle-ref oracle-gate)
declare -A SPEC=(
  [base]="builtin-libero-strong"
  [noblend]="r2a-libero-strong-noharm"
  [blend]="r2a-libero-strong"
  [oracle-both]="oracle-both:$STRONG?$MATCH"
  [canonicalize-oracle]="oracle-canonicalize:builtin-libero-strong"
  [replay]="r2a-libero-strong:?gate.kind=replay"
  [oracle-ref]="oracle-ref:$STRONG?$MATCH"
  [oracle-gate]="oracle-gate:$STRONG?$MATCH"
)
ONLY=${ONLY:-${NAMES[*]}}
for name in $ONLY; do
  "$R2A" bench run --config "$CONFIG" --policy "${SPEC[$name]}" --out "$RUNS/$name" --workers 2
done
done_dirs=()
for name in "${NAMES[@]}"; do
  [ -s "$RUNS/$name/summary.json" ] && done_dirs+=("$RUNS/$name")
done
"$R2A" bench merge "$OUT" "${done_dirs[@]}" --base-policy builtin-libero-strong
