#!/usr/bin/env bash
# The strong LIBERO base (registry name builtin-libero-strong): the built-in VLA's recipe in full on
# libero_spatial + libero_object — expert demonstrations whose arm starts are spread (robosuite's default
# initialization noise, Gaussian 0.02 rad per joint, chosen a priori), DART demonstrations, behaviour cloning, then
# DAgger rounds with the expert's lookahead chunk labels, each continuing the last stage on all data so far; the
# weights are the exponential moving average. Every seed is a training seed (< 100000). Resumable: a file or
# checkpoint that exists is kept, a training run stopped before its end resumes from its last save.
#
#   bash scripts/libero_strong_base.sh            # the shipped base (hours on 2 cores; r2a/assets/builtin_libero_strong/README.md)
#   STEP=demos bash scripts/libero_strong_base.sh # one step only: demos | stage1 | dagger1 | stage2 | dagger2 | stage3
#   THREADS=1 bash scripts/libero_strong_base.sh  # training on one core (beside ACT's training on the other)
#
# On a new machine the demos are re-collected by their own step; training resumes from a checkpoint in runs/ only on
# the same episodes (the trainer compares each file's episodes digest and names a run it refuses).
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
THREADS=${THREADS:-0}                # torch threads of training (0: every core); a resumed run may change it
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

# trained: a checkpoint whose run reached its last step (a run stopped before it holds its training state: resume)
trained() { [ -e "$1/model.safetensors" ] && [ ! -e "$1/train_model.safetensors" ]; }
# train OUT INIT STEPS LR FILES…: the config's recipe, from scratch (INIT=none) or continuing INIT
train() {
  local out=$1 init=$2 steps=$3 lr=$4; shift 4
  trained "$out" && return 0
  local from=(); [ "$init" = none ] || from=(--set "init_from=$init" --set warmup_steps=200)
  $R2A policy train --config configs/policy/builtin_libero_strong.yaml --demos "$@" --out "$out" \
    --set "steps=$steps" --set "lr=$lr" --set "threads=$THREADS" "${from[@]}"
}
# dagger ROUND LEARNER: every task, DAGGER episodes driven by the learner (the expert executes a chunk with
# probability BETA), labelled with the expert's own next 8 actions from every state reached
dagger() {
  local round=$1 learner=$2 t f
  mkdir -p "$DATA/dagger$round"
  for t in $TASKS; do
    f=$DATA/dagger$round/$(file "$t").hdf5
    [ -e "$f" ] || $R2A policy dagger --policy "builtin:$learner" --task "$t" --episodes "$DAGGER" --beta "$BETA" \
      --lookahead 8 --seed $((40000 + 1000 * round)) "${COMMON[@]}" --out "$f"
  done
}
FILES=("$DATA"/demos/*.hdf5 "$DATA"/dart/*.hdf5)
if want stage1; then log "2. stage 1: behaviour cloning from scratch"; train "$RUNS/stage1" none 80000 0.001 "${FILES[@]}"; fi
if want dagger1; then log "3. DAgger round 1 (stage 1 drives)"; dagger 1 "$RUNS/stage1"; fi
if want stage2; then
  log "4. stage 2: stage 1 continued with round 1's on-policy data"
  train "$RUNS/stage2" "$RUNS/stage1" 25000 0.0005 "${FILES[@]}" "$DATA"/dagger1/*.hdf5
fi
if want dagger2; then log "5. DAgger round 2 (stage 2 drives)"; dagger 2 "$RUNS/stage2"; fi
if want stage3; then
  log "6. stage 3: stage 2 continued with both rounds' on-policy data"
  train "$RUNS/stage3" "$RUNS/stage2" 25000 0.0003 "${FILES[@]}" "$DATA"/dagger1/*.hdf5 "$DATA"/dagger2/*.hdf5
fi
log "done: $RUNS/stage3 (ship: mkdir -p r2a/assets/builtin_libero_strong && cp $RUNS/stage3/{manifest.json,model.safetensors} r2a/assets/builtin_libero_strong/)"
