#!/usr/bin/env bash
# The strong LIBERO base (registry name builtin-libero-strong, issue 46): the built-in VLA's recipe in full on
# libero_spatial + libero_object — expert demonstrations whose arm starts are spread (robosuite's default
# initialization noise, Gaussian 0.02 rad per joint, chosen a priori), DART demonstrations, behaviour cloning, then
# DAgger rounds with the expert's lookahead chunk labels, each continuing the last stage on all data so far; the
# weights are the exponential moving average. Every seed is a training seed (< 100000). Resumable: a file or
# checkpoint that exists is kept, a training run stopped before its end resumes from its last save.
#
#   bash scripts/libero_strong_base.sh            # the shipped base (hours on 2 cores; r2a/assets/builtin_libero_strong/README.md)
#   STEP=demos bash scripts/libero_strong_base.sh # one step only: demos | stage1 | dagger1 | stage2 | dagger2 | stage3
set -euo pipefail
R2A=${R2A:-.venv/bin/r2a}
DATA=${DATA:-data/libero_strong}
RUNS=${RUNS:-runs/libero_strong}
TASKS=${TASKS:-"$(echo libero_spatial/{0..9} libero_object/{0..9})"}
START_NOISE=${START_NOISE:-0.02}     # rad per joint, robosuite's default initialization noise
DEMOS=${DEMOS:-40}                   # expert episodes per task (seeds 0…)
DART=${DART:-15}                     # DART episodes per task (seeds 10000…): position noise 0.2, drop 0.1
DAGGER=${DAGGER:-10}                 # on-policy episodes per task and round (seeds 40000 + 1000·round…)
BETA=${BETA:-0.1}                    # DAgger: probability per chunk that the expert executes it
WORKERS=${WORKERS:-2}
STEP=${STEP:-all}
file() { echo "${1//\//_}"; }
log() { echo "[$(date +%T)] $*"; }
want() { [ "$STEP" = all ] || [ "$STEP" = "$1" ]; }
mkdir -p "$DATA"/{demos,dart} "$RUNS"
COMMON=(--workers "$WORKERS" --image-size 128 --start-joint-noise "$START_NOISE")

if want demos; then
  log "1. expert demonstrations: $DEMOS per task clean, $DART per task with DART"
  for t in $TASKS; do
    f=$DATA/demos/$(file "$t").hdf5
    [ -e "$f" ] || $R2A demos collect --task "$t" --episodes "$DEMOS" --seed 0 "${COMMON[@]}" --out "$f"
  done
  for t in $TASKS; do
    f=$DATA/dart/$(file "$t").hdf5
    [ -e "$f" ] || $R2A demos collect --task "$t" --episodes "$DART" --seed 10000 "${COMMON[@]}" \
      --perturb-noise 0.2 --perturb-drop 0.1 --out "$f"
  done
fi
