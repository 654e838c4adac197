#!/usr/bin/env bash
# R2A around the LeRobot ACT that train_act.sh trained (issue 48), the way docs/wrap_your_policy.md walks it: ACT is
# served from its own venv over the openpi protocol for the whole script; the fit, the screen and the benchmark run
# in r2a's venv against that server. Every step resumes (the benchmark per episode, the fit per step).
#
#   bash scripts/lerobot/act_results.sh                      # clean → fit → screen → choice → runs → proxy → object
#   STEP=clean bash scripts/lerobot/act_results.sh           # one step: fitdata|clean|fit|screen|runs|proxy|object
#   VARIANT=noblend STEP=runs bash scripts/lerobot/act_results.sh   # overrides the screen's choice
#
# fitdata: the fit's steps that never query a base (graph, held-out demos and re-renders, image statistics; ~1.5 h)
#         with the strong base's name standing in, no server needed — runnable while ACT still trains
# clean:  ACT alone on LIBERO's clean test episodes (both suites, 20 per task, seeds 100000…): its clean table
# fit:    `r2a fit` with the strong LIBERO base's recipe and ACT as the base (training seeds only) → FIT
# screen: training seeds (80200…, 2 per task, every factor at L2): ACT, R2A around it, and R2A without the blend —
#         the variant is chosen from this by the rule written before it runs (`r2a bench choose`: clean no more than
#         1 point lower, then the highest pooled shifted uplift; docs/wrap_your_policy.md), never from test episodes
# runs:   the screen's choice (RUNS/choice.json; VARIANT=blend|noblend overrides it) beside ACT, run once, on LIBERO
#         clean, LIBERO-Plus and libero_standard (test seeds), merged into docs/results/act_* with their viewers
# proxy:  the same variant as the drop-in proxy in front of ACT (`r2a serve --upstream`) beside it in-process, on
#         training seeds (80400…, one episode per task clean, camera L2 and light L3): `r2a bench compare` counts the
#         pairs that played identically (docs/results/act_proxy.md)
# object: the same pair on libero_object_standard (test seeds) → docs/results/act_libero_object: libero_standard is
#         libero_spatial only, where this ACT is barely competent (0.055 clean), libero_object its competent suite
#         (0.340); decided before any test episode of R2A around ACT ran, as the strong base had it
set -euo pipefail
R2A=${R2A:-.venv/bin/r2a}
LEROBOT_VENV=${LEROBOT_VENV:-.venv-lerobot}
ACT=${ACT:-runs/lerobot/act64}         # the lerobot-train output directory (its checkpoints/last is served)
PORT=${PORT:-8010}
PROXY_PORT=${PROXY_PORT:-8020}
FIT=${FIT:-runs/fit/act}
RUNS=${RUNS:-runs/act}
RESULTS=${RESULTS:-docs/results}
WORKERS=${WORKERS:-2}
VARIANT=${VARIANT:-}
STEP=${STEP:-all}
BASE=openpi:ws://127.0.0.1:$PORT
# S bounded at 0 (recovery, harmonization, task matching): the registry's own NO_BLEND, as r2a-libero-strong-noharm
NOBLEND="?$("${R2A%/r2a}/python" -c 'from r2a.policies.registry import NO_BLEND; print("&".join(NO_BLEND))')"
log() { echo "[$(date +%T)] $*"; }
want() { [ "$STEP" = all ] || [ "$STEP" = "$1" ]; }
mkdir -p "$RUNS"

# ACT's server for the whole script (one process, one core: the benchmark's workers have the rest)
serve_act() {
  local slog=$RUNS/serve.log
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 "$LEROBOT_VENV/bin/r2a" serve --policy "lerobot:$ACT" \
    --port "$PORT" > "$slog" 2>&1 &
  SERVERS+=($!)
  wait_served "$slog" "$PORT"
}
SERVERS=()
trap 'kill "${SERVERS[@]}" 2>/dev/null || true' EXIT
# wait_served LOG PORT: until the server just started (the last of SERVERS) listens, or fail with its log
wait_served() {
  for _ in $(seq 120); do
    grep -q "serving .* on ws://127.0.0.1:$2" "$1" && { log "served on ws://127.0.0.1:$2 (pid ${SERVERS[-1]})"; return 0; }
    kill -0 "${SERVERS[-1]}" 2>/dev/null || break
    sleep 1
  done
  echo "the server did not start; its log ($1):" >&2; tail -c 2000 "$1" >&2; exit 1
}
# the variant to run on test seeds: the screen's choice by the rule (r2a bench choose), or VARIANT's
chosen_variant() {
  case "$VARIANT" in
    "")  # no blend listed first: a tie goes to the variant with fewer parts
      local rc=0
      "$R2A" bench choose "$RUNS/screen" --baseline "$BASE" --candidate "r2a:$FIT/r2a.yaml$NOBLEND" \
        --candidate "r2a:$FIT" --json "$RUNS/choice.json" >&2 || rc=$?
      [ "$rc" = 1 ] && { echo "no variant is eligible (above): name one with VARIANT=blend|noblend, and say why" >&2; }
      [ "$rc" = 0 ] || exit "$rc"
      "${R2A%/r2a}/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["chosen"])' "$RUNS/choice.json" ;;
    blend) echo "r2a:$FIT" ;;
    noblend) echo "r2a:$FIT/r2a.yaml$NOBLEND" ;;
    *) echo "VARIANT=blend|noblend, or unset for the screen's choice (got '${VARIANT}')" >&2; exit 2 ;;
  esac
}
run_name() { echo "$1" | tr ':/?&=' '_____'; }
# paired CONFIG RUNS_DIR REPORT POLICY…: every policy in its own run (the first is the base), merged, with a viewer
paired() {
  local config=$1 dir=$2 report=$3 p; shift 3
  local dirs=()
  for p in "$@"; do
    dirs+=("$dir/$(run_name "$p")")
    "$R2A" bench run --config "$config" --policy "$p" --set "base_policy=$BASE" --save-frames failures \
      --out "${dirs[-1]}" --workers "$WORKERS"
  done
  "$R2A" bench merge "$report" "${dirs[@]}" --base-policy "$BASE"
  "$R2A" bench publish "$report"   # as docs/results/ stores it: gzipped records, WebP strips, a slim summary
  "$R2A" bench view "$report" --out "$report/viewer"
}

if [ "$STEP" = fitdata ]; then
  log "0. the fit's base-free steps (ACT need not be trained yet)"
  "$R2A" fit --config configs/fit/builtin_libero_strong.yaml --out "$FIT" --until statistics
  exit 0
fi
serve_act
if want clean; then
  log "1. ACT alone, LIBERO clean (test seeds)"
  "$R2A" bench run --config configs/bench/libero_clean.yaml --policy "$BASE" --set "base_policy=$BASE" \
    --save-frames failures --out "$RUNS/clean/$(run_name "$BASE")" --workers "$WORKERS"   # step 4 merges it
fi
if want fit; then
  log "2. r2a fit with ACT as the base"
  "$R2A" fit --config configs/fit/builtin_libero_strong.yaml --set "base=$BASE" --out "$FIT"
fi
if want screen; then
  log "3. the screen on training seeds: ACT, R2A, R2A without the blend"
  "$R2A" bench run --config configs/bench/libero_clean.yaml --set seed=80200 --set episodes=2 \
    --set 'factors={camera: [2], robot_init: [2], language: [2], light: [2], background: [2], noise: [2], layout: [2]}' \
    --set "base_policy=$BASE" --policy "$BASE" --policy "r2a:$FIT" --policy "r2a:$FIT/r2a.yaml$NOBLEND" \
    --out "$RUNS/screen" --workers "$WORKERS"
  rm -rf "$RESULTS/act_screen" && cp -r "$RUNS/screen" "$RESULTS/act_screen"   # published beside the test runs
  "$R2A" bench publish "$RESULTS/act_screen"
fi
if want runs; then
  CHOSEN=$(chosen_variant)
  log "4. ACT and $CHOSEN on the test seeds"
  paired configs/bench/libero_clean.yaml "$RUNS/clean" "$RESULTS/act_clean" "$BASE" "$CHOSEN"
  paired configs/bench/liberoplus_libero.yaml "$RUNS/liberoplus" "$RESULTS/act_liberoplus" "$BASE" "$CHOSEN"
  paired configs/bench/libero_standard.yaml "$RUNS/libero_standard" "$RESULTS/act_libero_standard" "$BASE" "$CHOSEN"
  log "the README's rows (scripts/readme_row.py; name each row's run and pairs in its first cell)"
  for run in act_clean act_liberoplus act_libero_standard; do
    "${R2A%/r2a}/python" scripts/readme_row.py "$RESULTS/$run" --candidate "$CHOSEN" --label "ACT → R2A ($run)"
  done
fi
if want proxy; then
  CHOSEN=$(chosen_variant)
  log "5. $CHOSEN as the proxy in front of ACT, beside it in-process (training seeds)"
  "$R2A" serve --policy "$CHOSEN" --upstream "ws://127.0.0.1:$PORT" --port "$PROXY_PORT" > "$RUNS/proxy.log" 2>&1 &
  SERVERS+=($!)
  wait_served "$RUNS/proxy.log" "$PROXY_PORT"
  check=(--config configs/bench/libero_clean.yaml --set seed=80400 --set episodes=1
         --set 'factors={camera: [2], light: [3]}' --set "base_policy=$BASE")
  "$R2A" bench run "${check[@]}" --policy "$CHOSEN" --out "$RUNS/proxy/in_process" --workers "$WORKERS"
  "$R2A" bench run "${check[@]}" --policy "openpi:ws://127.0.0.1:$PROXY_PORT" --out "$RUNS/proxy/proxy" --workers 1
  "$R2A" bench compare "$RUNS/proxy/in_process" "$RUNS/proxy/proxy" --json "$RUNS/proxy/compare.json" \
    > "$RESULTS/act_proxy.md"
  cat "$RESULTS/act_proxy.md"
  kill "${SERVERS[-1]}" && unset 'SERVERS[-1]'   # the proxy: not needed by the step after
fi
if want object; then
  CHOSEN=$(chosen_variant)
  log "6. ACT and $CHOSEN on libero_object_standard (test seeds)"
  paired configs/bench/libero_object_standard.yaml "$RUNS/libero_object" "$RESULTS/act_libero_object" "$BASE" "$CHOSEN"
  "${R2A%/r2a}/python" scripts/readme_row.py "$RESULTS/act_libero_object" --candidate "$CHOSEN" \
    --label "ACT → R2A (act_libero_object)"
fi
log "done"
