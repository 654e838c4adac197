#!/usr/bin/env bash
# The small state a long run needs to resume, kept in the repository between sessions. A session's machine — its
# runs/, data/ and venvs — may not come back, and only main does (a wip branch did not), so what a run cannot
# cheaply redo travels in wip/ on main until the run ships, then wip/ goes: training checkpoints whose files are
# small (the VLA trainer's weights, average, optimizer and step), the sha256 of each demonstration file they trained
# on, and the logs. The demos themselves (GBs) are re-collected by their own script; on a CPU of the same kind the
# episodes come out the same, and `check` says whether the files' bytes do (not always: docs/experiments/
# libero_strong.md, "Restart"). The trainer resumes on the same episodes whatever the bytes (it records each file's
# episodes digest beside its sha256) and refuses other episodes, naming the run.
#
#   bash scripts/wip_state.sh save      # runs/ (checkpoints, benchmark records) and data/ digests → wip/ (each file under 32 MB)
#   bash scripts/wip_state.sh restore   # wip/ → runs/, where runs/ has no such file
#   bash scripts/wip_state.sh check     # do data/'s demonstration files match the digests saved with the state?
set -euo pipefail
WIP=${WIP:-wip}
MAX_BYTES=$((32 * 1024 * 1024))
# the training runs whose checkpoints are small enough to keep (a LeRobot ACT checkpoint is 0.6 GB: not kept)
RUN_DIRS=(runs/libero_strong/stage1 runs/libero_strong/stage2 runs/libero_strong/stage3)
CHECKPOINT_FILES=(manifest.json model.safetensors train_model.safetensors optimizer.safetensors train_state.json)
LOGS=(runs/libero_strong/train.log)
# benchmark runs in progress: their records (results.jsonl, run.json) and saved frames, which `r2a bench run` resumes
# per episode (a resume on another machine is logged and recorded in run.json); a run merged into docs/results/ (the
# strong base's clean pairs) needs nothing here
BENCH_RUNS=(runs/liberoplus_strong runs/libero_strong runs/libero_strong_object)
DATA_GLOBS=("data/libero_strong/*/*.hdf5")

save() {
  local dir f n=0
  mkdir -p "$WIP"
  for dir in "${RUN_DIRS[@]}"; do
    [ -d "$dir" ] || continue
    rm -rf "${WIP:?}/$dir" && mkdir -p "$WIP/$dir"
    for f in "${CHECKPOINT_FILES[@]}"; do
      [ -e "$dir/$f" ] || continue
      [ "$(stat -c %s "$dir/$f")" -le "$MAX_BYTES" ] || { echo "wip_state: $dir/$f is over 32 MB: not kept" >&2; continue; }
      cp "$dir/$f" "$WIP/$dir/$f" && n=$((n + 1))
    done
  done
  for dir in "${BENCH_RUNS[@]}"; do
    [ -d "$dir" ] || continue
    rm -rf "${WIP:?}/$dir"
    while IFS= read -r -d '' f; do
      [ "$(stat -c %s "$f")" -le "$MAX_BYTES" ] || { echo "wip_state: $f is over 32 MB: not kept" >&2; continue; }
      mkdir -p "$WIP/$(dirname "$f")" && cp "$f" "$WIP/$f" && n=$((n + 1))
    done < <(find "$dir" -type f ! -name '*.log' ! -name '.*' -print0)
  done
  for f in "${LOGS[@]}"; do
    # progress bars rewrite one line thousands of times: keep each bar's last state only
    [ -e "$f" ] && mkdir -p "$WIP/$(dirname "$f")" && tr '\r' '\n' < "$f" | grep -v '%|' > "$WIP/$f" && n=$((n + 1))
  done
  # shellcheck disable=SC2068  # the globs expand here
  local files=() && for f in ${DATA_GLOBS[@]}; do [ -e "$f" ] && files+=("$f"); done
  if [ ${#files[@]} -gt 0 ]; then
    mkdir -p "$WIP/data" && sha256sum "${files[@]}" > "$WIP/data/demos.sha256"
    echo "wip_state: digests of ${#files[@]} demonstration files → $WIP/data/demos.sha256"
  fi
  cat > "$WIP/README.md" <<'TEXT'
# wip/ — the resumable state of long runs in progress

Not part of r2a: what the runs of open issues need to resume on a new machine (written by `scripts/wip_state.sh
save`; `restore` copies it back into runs/, `check` compares re-collected demos with the digests here). It goes
away when those runs ship. See docs/experiments/libero_strong.md, "Restart".
TEXT
  echo "wip_state: $n files → $WIP/ ($(du -sh "$WIP" | cut -f1))"
}

restore() {
  local src dst n=0
  [ -d "$WIP/runs" ] || { echo "wip_state: $WIP/runs does not exist: nothing to restore"; return 0; }
  while IFS= read -r -d '' src; do
    dst=${src#"$WIP"/}
    [ -e "$dst" ] && continue
    mkdir -p "$(dirname "$dst")" && cp "$src" "$dst" && n=$((n + 1))
  done < <(find "$WIP/runs" -type f -print0)
  echo "wip_state: restored $n files into runs/ (files already there kept)"
}

check() {
  [ -e "$WIP/data/demos.sha256" ] || { echo "wip_state: no saved digests ($WIP/data/demos.sha256)" >&2; return 1; }
  if sha256sum --quiet -c "$WIP/data/demos.sha256"; then
    echo "wip_state: every demonstration file matches the saved digests"
  else
    echo "wip_state: some files' bytes differ from the saved ones; training resumes if their episodes are the same" \
      "(the trainer compares them and names a run it refuses)" >&2
    return 1
  fi
}

case "${1:-}" in
  save) save ;;
  restore) restore ;;
  check) check ;;
  *) echo "usage: $0 save|restore|check" >&2; exit 2 ;;
esac
