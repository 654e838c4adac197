#!/usr/bin/env bash
# ACT from scratch on our LIBERO demonstrations with lerobot's own training command (issue 48), in the lerobot venv.
#
#   make lerobot-venv                                                    # once: .venv-lerobot (lerobot 0.4.4, r2a)
#   HF_HUB_OFFLINE=1 .venv-lerobot/bin/python scripts/lerobot/export_dataset.py \
#       DEMOS_SPATIAL.hdf5 DEMOS_OBJECT.hdf5 --out data/lerobot/libero_r2a   # the demos as a LeRobot v3 dataset
#   DATASET=data/lerobot/libero_r2a OUT=runs/lerobot/act STEPS=... bash scripts/lerobot/train_act.sh [ARGS...]
#   .venv-lerobot/bin/python scripts/lerobot/check_adapter.py runs/lerobot/act DEMOS_SPATIAL.hdf5 DEMOS_OBJECT.hdf5 \
#       --dataset data/lerobot/libero_r2a                     # r2a's adapter feeds it what lerobot's pipeline does
#   OMP_NUM_THREADS=1 .venv-lerobot/bin/r2a serve --policy lerobot:runs/lerobot/act --port 8010
#   .venv/bin/r2a bench run --config configs/bench/libero_clean.yaml --policy openpi:ws://127.0.0.1:8010 --out ...
#
# ARGS are more lerobot-train options, appended (e.g. --policy.dim_model=256; the tests train a tiny ACT this way).
#
# lerobot-train keeps every checkpoint (0.6 GB each with its optimizer state: SAVE_FREQ=500 over tens of thousands of
# steps would fill the disk), so this script prunes the step directories under OUT/checkpoints while it trains,
# keeping the newest KEEP_CHECKPOINTS and never the one `last` points to (KEEP_CHECKPOINTS=0 keeps them all).
#
# Running it again with the same OUT resumes from OUT/checkpoints/last (lerobot's --resume: weights, optimizer state,
# step and RNG state); STEPS is the total, not the steps still to run. Nothing is downloaded:
# HF_HUB_OFFLINE=1, the ResNet-18 backbone starts from random weights (pretrained_backbone_weights=null; the default
# would fetch ImageNet weights), wandb is off and nothing is pushed to the hub.
#
# ACT's chunk: 16 actions predicted, 8 executed per query — r2a's convention (the built-in VLA predicts 16; the
# benchmark's ChunkBroker and the R2A wrapper execute 8 per query), so the served checkpoint answers each query
# with the chunk r2a's comparison and blending expect, and lerobot's own select_action re-plans just as often.
# lerobot's default (100/100) is tuned for 50 Hz bimanual teleoperation; at LIBERO's 20 Hz 100 steps are 5 s,
# most of an episode, executed open-loop.
#
# Budget: ~4 h of an idle 2-core machine. Measured (ACT's defaults otherwise: 52M parameters, ResNet-18 from scratch,
# BATCH_SIZE=8) on an idle machine: 128-px images 1.2 s per step with one thread (docs/architecture.md, "Platform
# notes"); 64-px images (export_dataset.py --image-size 64) 0.77 s with one thread, 0.60 s with THREADS=2 — the
# published run's 4 h budget is THREADS=2 STEPS=23800 (docs/experiments/lerobot_act.md). Beside another job a step
# takes longer, so count the budget in steps, not in wall time. ACT's preset keeps the learning rate constant (no
# scheduler): resuming with a larger STEPS changes no schedule.
set -euo pipefail

LEROBOT_VENV=${LEROBOT_VENV:-.venv-lerobot}
DATASET=${DATASET:?set DATASET to the LeRobot dataset root written by scripts/lerobot/export_dataset.py}
OUT=${OUT:?set OUT to the training output directory (runs/lerobot/act)}
STEPS=${STEPS:-23800}            # total optimizer steps (~4 h of an idle 2-core machine at 64 px, THREADS=2; see above)
BATCH_SIZE=${BATCH_SIZE:-8}
SAVE_FREQ=${SAVE_FREQ:-2000}     # a checkpoint (and a resume point) every SAVE_FREQ steps, and at the end
LOG_FREQ=${LOG_FREQ:-100}
NUM_WORKERS=${NUM_WORKERS:-1}    # data-loader processes (PNG decoding); 2 cores in all
CHUNK_SIZE=${CHUNK_SIZE:-16}
N_ACTION_STEPS=${N_ACTION_STEPS:-8}
SEED=${SEED:-1000}
KEEP_CHECKPOINTS=${KEEP_CHECKPOINTS:-2}   # step directories kept under OUT/checkpoints (0: all, lerobot's own behaviour)
REPO_ID=${REPO_ID:-r2a/libero_demos}   # the dataset's name in its metadata; read from DATASET, never from the hub
# torch's intra-op threads of the training process: 1 beside the data-loader worker on 2 cores. With OpenMP's default
# busy waiting, 2 threads on a 2-core machine that anything else also uses made a step 10x slower; OMP_WAIT_POLICY=PASSIVE
# (set below) removes that (docs/architecture.md, "Platform notes"). Try 2 on an otherwise idle machine.
THREADS=${THREADS:-1}

export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE

train=("$LEROBOT_VENV/bin/lerobot-train")
# prune: delete OUT/checkpoints/<step> directories older than the newest KEEP_CHECKPOINTS — only those before the one
# `last` points to (numbers, not names: lerobot pads a step to the width of the run's total), so a checkpoint lerobot
# is still writing (or resumes from) is never touched
prune() {
  local dir=$OUT/checkpoints last step steps
  [ "$KEEP_CHECKPOINTS" -gt 0 ] && [ -L "$dir/last" ] || return 0
  last=$(basename "$(readlink -f "$dir/last")")
  steps=$(ls -1 "$dir" | { grep -E '^[0-9]+$' || true; } | sort -n | head -n "-$KEEP_CHECKPOINTS")
  for step in $steps; do
    if (( 10#$step < 10#$last )); then rm -rf "${dir:?}/$step"; fi
  done
}
if [ -f "$OUT/checkpoints/last/pretrained_model/train_config.json" ]; then
  echo "resuming $OUT from $(readlink -f "$OUT/checkpoints/last") to $STEPS steps"
  args=(--config_path="$OUT/checkpoints/last/pretrained_model/train_config.json" --resume=true --steps="$STEPS" "$@")
else
  args=(--dataset.repo_id="$REPO_ID" --dataset.root="$DATASET"
    --policy.type=act --policy.device=cpu --policy.push_to_hub=false
    --policy.pretrained_backbone_weights=null
    --policy.chunk_size="$CHUNK_SIZE" --policy.n_action_steps="$N_ACTION_STEPS"
    --output_dir="$OUT" --job_name="$(basename "$OUT")"
    --steps="$STEPS" --batch_size="$BATCH_SIZE" --num_workers="$NUM_WORKERS" --seed="$SEED"
    --save_freq="$SAVE_FREQ" --log_freq="$LOG_FREQ" --eval_freq=0
    --wandb.enable=false "$@")
fi
"${train[@]}" "${args[@]}" &
pid=$!
trap 'kill "$pid" 2>/dev/null' INT TERM
while kill -0 "$pid" 2>/dev/null; do prune; sleep 30 & wait $! || true; done
rc=0; wait "$pid" || rc=$?
prune
exit "$rc"
