#!/usr/bin/env bash
# Collect scripted-expert demonstrations on every core for a fixed wall-clock budget, then train built-in VLA
# variants side by side (on the GPU when there is one). What a many-core GPU machine does in minutes and a
# 2-core laptop in hours. Every demo file's task, seed and perturbation settings are in its name and metadata,
# and each checkpoint's manifest lists the files (with sha256) it was trained on, so the run can be repeated.
#
#   COLLECT_S=200 TRAIN_S=200 DATA=runs/gpu_demos CKPTS=runs/gpu_ckpt bash scripts/collect_and_train.sh
#
# PLAN: one "TASK:SLOTS:EPISODES_PER_FILE:NOISE:DROP" entry per collection stream (SLOTS = parallel loops).
# VARIANTS: one "NAME|--set overrides" entry per checkpoint to train (trained concurrently on one device).
set -euo pipefail
R2A=${R2A:-r2a}
DATA=${DATA:-runs/collect_and_train/demos}
CKPTS=${CKPTS:-runs/collect_and_train/checkpoints}
COLLECT_S=${COLLECT_S:-200}
TRAIN_S=${TRAIN_S:-200}
SEED0=${SEED0:-30000}  # training seeds: below 100000 (the benchmark's test seeds start there)
IMAGE_SIZE=${IMAGE_SIZE:-64}
PLAN=${PLAN:-"Lift:1:8:0:0 PickPlaceCan:2:4:0:0 Stack:2:6:0:0 Stack:3:4:0.3:0.5 StackThree:3:3:0:0 StackThree:5:3:0.2:0.5"}
BASE="--config configs/policy/builtin.yaml --set steps=1000000 --set time_limit_s=$TRAIN_S --set batch_size=256"
BASE="$BASE --set save_every=2000 --set log_every=500 --set threads=2"
VARIANTS=${VARIANTS:-"continued|--set init_from=r2a/assets/builtin_vla --set lr=0.0005
wide|--set prompts_from=r2a/assets/builtin_vla --set conv_channels=48 --set keypoints=48 --set hidden=768"}
mkdir -p "$DATA/logs" "$CKPTS"

# One stream: files of EPISODES episodes with consecutive seeds, until killed at the deadline. A file is
# written atomically, so the one being recorded when time runs out is simply absent.
collect_stream() {
  local task=$1 episodes=$2 noise=$3 drop=$4 seed=$5 name
  while :; do
    name="${task}_n${noise}_d${drop}_s${seed}"
    "$R2A" demos collect --task "$task" --episodes "$episodes" --workers 1 --image-size "$IMAGE_SIZE" \
      --seed "$seed" --perturb-noise "$noise" --perturb-drop "$drop" --out "$DATA/$name.hdf5" \
      >>"$DATA/logs/$name.log" 2>&1
    seed=$((seed + episodes))
  done
}

echo "[$(date +%T)] smoke: one Stack episode"
"$R2A" demos collect --task Stack --episodes 1 --workers 1 --image-size "$IMAGE_SIZE" --seed 29999 \
  --out "$CKPTS/smoke_Stack_s29999.hdf5"
echo "[$(date +%T)] smoke: three training steps on it"
# shellcheck disable=SC2086
"$R2A" policy train $BASE --set steps=3 --set time_limit_s=0 --set warmup_steps=1 --set holdout_every=0 \
  --set prompts_from=r2a/assets/builtin_vla --demos "$CKPTS/smoke_Stack_s29999.hdf5" --out "$DATA/smoke_checkpoint" \
  >"$DATA/logs/smoke_train.log" 2>&1 || { tail -20 "$DATA/logs/smoke_train.log"; exit 1; }

echo "[$(date +%T)] collecting for ${COLLECT_S}s: $PLAN"
stream=0
for entry in $PLAN; do
  IFS=: read -r task slots episodes noise drop <<<"$entry"
  for _ in $(seq "$slots"); do
    export -f collect_stream; export R2A DATA IMAGE_SIZE
    timeout -s TERM "$COLLECT_S" bash -c "collect_stream $task $episodes $noise $drop $((SEED0 + stream * 10000))" &
    stream=$((stream + 1))
  done
done
wait || true
find "$DATA" -name '.*.tmp' -delete
echo "[$(date +%T)] collected $(ls "$DATA"/*.hdf5 | wc -l) files"
grep -h '^{"out"' "$DATA"/logs/*.log || true

echo "[$(date +%T)] training for ${TRAIN_S}s each"
pids=()
while IFS='|' read -r name overrides; do
  [ -n "$name" ] || continue
  # shellcheck disable=SC2086
  "$R2A" policy train $BASE $overrides --demos "$DATA"/*.hdf5 --out "$CKPTS/$name" >"$CKPTS/train_$name.log" 2>&1 &
  pids+=($!)
done <<<"$VARIANTS"
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
echo "[$(date +%T)] done (status $status)"
exit $status
