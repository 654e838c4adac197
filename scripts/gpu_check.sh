#!/usr/bin/env bash
# The GPU checks, one line each, in under 5 minutes on one GPU (their lines are recorded in docs/architecture.md,
# "Platform notes", when a GPU is lent):
#   cuda       torch sees the GPU
#   gate       the learned gate trains under torchrun, one process: DDP over NCCL, on CUDA
#   retriever  the GNN retriever trains on CUDA
#   faiss      a GPU FAISS index returns the CPU index's neighbours (skipped where faiss has no GPU support)
# From the repository root of a machine with a GPU, with only the working tree: `bash scripts/gpu_check.sh`.
# CI never runs it (.ci/run runs `make test`). `bash scripts/gpu_check.sh --cpu` tries the checks on the CPU.
#
# Python: $PYTHON when set (one whose torch sees the GPU, with the project's dependencies; the checkout goes on
# PYTHONPATH), e.g. a machine's own CUDA Python where nothing can be installed. Else .venv/bin/python, made first when
# missing: torch==2.13.0 (on a GPU machine pip's default index serves its CUDA build; the Makefile's install target
# pins the CPU one), then the project with the gpu extra (faiss-gpu) and torch_geometric, no simulator; where no
# faiss-gpu wheel fits, the graph extra (faiss-cpu) instead, and the faiss check says it skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
  PYTHON=.venv/bin/python
  if [[ ! -x $PYTHON ]]; then
    echo "gpu_check: making .venv (torch==2.13.0, then r2a[gpu])" >&2
    python3 -m venv .venv
    $PYTHON -m pip install -q --upgrade pip
    $PYTHON -m pip install -q "torch==2.13.0"
    $PYTHON -m pip install -q -e ".[gpu]" "torch_geometric>=2.5" || $PYTHON -m pip install -q -e ".[graph]"
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec timeout 300 "$PYTHON" scripts/gpu_check.py "$@"
