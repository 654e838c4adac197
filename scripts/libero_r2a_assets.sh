#!/usr/bin/env bash
# R2A's parts for the frozen LIBERO base (builtin-libero, issue 34): the graph, the GNN retriever, the learned gate
# with two online DAgger rounds, the image and harmonization statistics — made by the same commands as the built-in
# ones (r2a/assets/R2A_ASSETS.md), on libero_spatial + libero_object. Every seed is a training seed (< 100000).
# Cameras at 128 px, as the LIBERO benchmark renders and the base's demos were recorded (its network area-resizes
# to 64 px). Resumable: a step whose output exists is skipped, so a stopped run goes on where it stopped.
#
#   bash scripts/libero_r2a_assets.sh                       # the shipped assets (hours on 2 cores)
#   OUT=/tmp/a DATA=/tmp/d RUNS=/tmp/r GRAPH_EPISODES=1 HELDOUT_EPISODES=1 DAGGER_EPISODES=1 RETRIEVER_STEPS=20 \
#     TASKS="libero_spatial/0 libero_object/0" DAGGER_TASKS=libero_spatial/0 \
#     SHIFTS="camera:2 light:3" BASE=builtin:CKPT bash scripts/libero_r2a_assets.sh   # the pipeline end to end in minutes
set -euo pipefail
R2A=${R2A:-.venv/bin/r2a}
OUT=${OUT:-r2a/assets}                  # where the assets go
DATA=${DATA:-data/libero}               # demonstrations and rollouts (not shipped)
RUNS=${RUNS:-runs/libero_assets}        # training runs (not shipped)
BASE=${BASE:-builtin-libero}            # the frozen base whose chunks the retriever and the gate see
TASKS=${TASKS:-"$(echo libero_spatial/{0..9} libero_object/{0..9})"}
DAGGER_TASKS=${DAGGER_TASKS:-"libero_spatial/0 libero_spatial/7 libero_object/0 libero_object/4"}
SHIFTS=${SHIFTS:-"camera:2 light:3 background:2 noise:2"}        # the retriever's and the gate's re-renders
DAGGER_SHIFTS=${DAGGER_SHIFTS:-"camera:2 light:3 background:2 noise:2 layout:2 robot_init:2"}
GRAPH_EPISODES=${GRAPH_EPISODES:-10}    # per task, seeds 0…: the base's own training demos, state only
HELDOUT_EPISODES=${HELDOUT_EPISODES:-4} # per task, seeds 20000…: the retriever's and the gate's queries
DAGGER_EPISODES=${DAGGER_EPISODES:-1}   # per task and shift, per round (LIBERO episodes are slow: 24 per round)
RETRIEVER_STEPS=${RETRIEVER_STEPS:-3000}
WORKERS=${WORKERS:-2}
GRAPH=$OUT/r2a_libero_graph RETRIEVER=$OUT/r2a_libero_retriever GATE=$OUT/r2a_libero_gate
IMAGE_STATS=$OUT/r2a_libero_image_stats.json HARMONIZE_STATS=$OUT/r2a_libero_harmonize_stats.json
file() { echo "${1//\//_}"; }           # libero_spatial/3 -> libero_spatial_3
log() { echo "[$(date +%T)] $*"; }
# run "$@" in the background, at most $WORKERS at once (a re-render, a DAgger file: one process each); bg_wait: all
# of them done, and the script stops if one failed
bg() { while [ "$(jobs -rp | wc -l)" -ge "$WORKERS" ]; do wait -n || true; done; { "$@" || touch "$RUNS/.failed"; } & }
bg_wait() { wait; if [ -e "$RUNS/.failed" ]; then rm "$RUNS/.failed"; log "a background step failed"; exit 1; fi; }
mkdir -p "$DATA"/{graph,heldout,heldout_shift,heldout_levels} "$RUNS" "$OUT"
rm -f "$RUNS/.failed"

log "1. the graph: $GRAPH_EPISODES expert demos per task, state only"
for t in $TASKS; do
  f=$DATA/graph/$(file "$t").hdf5
  [ -e "$f" ] || $R2A demos collect --task "$t" --episodes "$GRAPH_EPISODES" --workers "$WORKERS" --seed 0 --cameras \
    --out "$f"
done
[ -e "$GRAPH" ] || $R2A graph build "$DATA"/graph/*.hdf5 --out "$GRAPH"

log "2. held-out demos (seeds 20000…), clean and re-rendered under training-split shifts (shift seeds 5000…)"
for t in $TASKS; do
  f=$DATA/heldout/$(file "$t").hdf5
  [ -e "$f" ] || $R2A demos collect --task "$t" --episodes "$HELDOUT_EPISODES" --workers "$WORKERS" --seed 20000 \
    --image-size 128 --out "$f"
  for spec in $SHIFTS; do
    g=$DATA/heldout_shift/$(file "$t")_${spec/:/}.hdf5
    [ -e "$g" ] || bg $R2A demos rerender "$f" --shift "$spec" --seed 5000 --out "$g"
  done
done
bg_wait

log "3. the retriever"
if [ ! -e "$RETRIEVER" ]; then
  $R2A retriever train --config configs/retriever/default.yaml --graph "$GRAPH" --set "base=$BASE" \
    --set "steps=$RETRIEVER_STEPS" --demos "$DATA"/heldout/*.hdf5 "$DATA"/heldout_shift/*.hdf5 --out "$RUNS/retriever"
  mkdir -p "$RETRIEVER" && cp "$RUNS"/retriever/{manifest.json,model.safetensors,train_summary.json} "$RETRIEVER"/
fi

log "4. image statistics: the gate's (agentview) and harmonization's (both cameras, every level of the image factors)"
first=$(set -- $TASKS; echo "$1")
for f in light background camera noise; do for l in 1 2 3; do
  g=$DATA/heldout_levels/$(file "$first")_$f$l.hdf5
  [ -e "$g" ] || bg $R2A demos rerender "$DATA/heldout/$(file "$first").hdf5" --shift "$f:$l" --seed 5000 --out "$g"
done; done
bg_wait
[ -e "$IMAGE_STATS" ] || $R2A demos image-stats "$DATA"/heldout/*.hdf5 --out "$IMAGE_STATS" \
  --fit-clean "$DATA"/heldout/*.hdf5 --fit-shifted "$DATA"/heldout_shift/*.hdf5
[ -e "$HARMONIZE_STATS" ] || $R2A demos image-stats "$DATA"/heldout/*.hdf5 --cameras agentview wrist \
  --out "$HARMONIZE_STATS" --fit-clean "$DATA"/heldout/*.hdf5 --fit-shifted "$DATA"/heldout_levels/*.hdf5

# R2A around the LIBERO base with the parts made so far (the gate: the round's), and the gate's rows from its data
R2A_PARTS=(--config configs/r2a/builtin.yaml --set "base=$BASE" --set "graph=$GRAPH" --set "retriever=$RETRIEVER")
gate_rows() { $R2A gate data "${R2A_PARTS[@]}" --demos "$DATA"/heldout/*.hdf5 "$DATA"/heldout_shift/*.hdf5 \
  --image-stats "$IMAGE_STATS" "$@"; }
r2a_spec() { echo "r2a:configs/r2a/builtin.yaml?base=$BASE&graph=$GRAPH&retriever=$RETRIEVER&gate.image_stats=$IMAGE_STATS&gate.checkpoint=$1"; }

log "5. the gate: v1 on the held-out demos, then two online DAgger rounds (seeds 63000…, 64000…)"
if [ ! -e "$RUNS/gate_v1" ]; then
  gate_rows --out "$RUNS/gate_rows0.npz"
  $R2A gate train --data "$RUNS/gate_rows0.npz" --out "$RUNS/gate_v1" --set threads=1
fi
gate=$RUNS/gate_v1
for k in 1 2; do
  for spec in $DAGGER_SHIFTS; do for t in $DAGGER_TASKS; do
    g=$DATA/gate_dagger/round$k/$(file "$t")_${spec/:/}.hdf5
    [ -e "$g" ] || bg $R2A policy dagger --policy "$(r2a_spec "$gate")" --task "$t" --episodes "$DAGGER_EPISODES" \
      --beta 0 --lookahead 8 --shift "$spec" --seed $((62000 + 1000 * k)) --image-size 128 --workers 1 --out "$g"
  done; done
  bg_wait
  if [ ! -e "$RUNS/gate_dagger$k" ]; then
    gate_rows --dagger "$DATA"/gate_dagger/round*/*.hdf5 --out "$RUNS/gate_rows$k.npz"
    $R2A gate train --data "$RUNS/gate_rows$k.npz" --out "$RUNS/gate_dagger$k" --set threads=1
  fi
  gate=$RUNS/gate_dagger$k
done
# the shipped gate is the last round's (a gate shipped from an earlier round is replaced)
cmp -s "$gate/model.safetensors" "$GATE/model.safetensors" 2>/dev/null || {
  mkdir -p "$GATE" && cp "$gate"/{manifest.json,model.safetensors,train_summary.json} "$GATE"/; }
log "done: $GRAPH $RETRIEVER $GATE $IMAGE_STATS $HARMONIZE_STATS"
