"""The checks of scripts/gpu_check.sh, one line each: CUDA, the gate's training under torchrun (one process, DDP over
NCCL), the retriever's training on CUDA, and a GPU FAISS index against the CPU one. ``--cpu`` runs the same checks
on the CPU (gloo; FAISS is then skipped), to try the script where no GPU is. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np


class Failed(Exception):
    """A check that ran and found something wrong (its message is the line's detail)."""


class Skipped(Exception):
    """A check that cannot run on this machine (its message says why)."""


def require(ok: bool, message: str) -> None:
    if not ok:
        raise Failed(message)


def constant_chunk(obs: dict) -> np.ndarray:
    """The retriever check's stand-in base policy (``callable:__main__:constant_chunk``)."""
    return np.tile(np.array([0.2, 0.0, -0.1, 0, 0, 0, -1], np.float32), (16, 1))


def check_cuda(tmp: Path, device: str) -> str:
    import torch

    if device == "cpu":
        return f"torch {torch.__version__} (--cpu: the CUDA checks run on the CPU)"
    require(torch.cuda.is_available(), f"torch {torch.__version__} sees no CUDA device (a CPU build? see "
                                       "docs/architecture.md, 'Platform notes')")
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}), {torch.cuda.get_device_name(0)}"


def check_gate(tmp: Path, device: str) -> str:
    from gating.synthetic import synthetic_gate_data

    data = synthetic_gate_data(tmp / "gate.npz", episodes=24, rows_per_episode=50)
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_addr", "127.0.0.1",
               "--master_port", str(port), "-m", "r2a_cli", "gate", "train", "--data", str(data),
               "--out", str(tmp / "gate"), "--set", "epochs=5", "--set", "holdout_every=3",
               "--set", "batch_size=64", "--set", f"device={device}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    require(done.returncode == 0, f"r2a gate train under torchrun exited {done.returncode}: "
                                  f"{(done.stderr.strip().splitlines() or [''])[-1]}")
    summary = json.loads((tmp / "gate" / "train_summary.json").read_text())
    backend = "nccl" if device == "cuda" else "gloo"
    require(summary["device"].startswith(device) and summary["ddp_backend"] == backend,
            f"trained on {summary['device']} with DDP backend {summary['ddp_backend']}, expected {device}, {backend}")
    final = summary["final"]
    return (f"{summary['epochs']} epochs on {summary['device']}, DDP over {summary['ddp_backend']}, "
            f"{summary['processes']} process; validation: gate {final['val_gate_mm']:.1f} mm vs base "
            f"{final['val_base_mm']:.1f} mm")


def check_retriever(tmp: Path, device: str) -> str:
    import torch

    from demos.hdf5_io import write_hdf5
    from graph_builder.build import build_graph_from_episodes
    from graph_builder.storage import save_graph
    from graph_builder.synthetic import synthetic_episodes
    from training.retriever.config import RetrieverTrainConfig
    from training.retriever.train import train_retriever

    graph = save_graph(build_graph_from_episodes(synthetic_episodes(4000, seed=0, num_tasks=2, mean_length=80)),
                       tmp / "graph")
    rng = np.random.default_rng(0)
    held_out = synthetic_episodes(600, seed=7, num_tasks=2, mean_length=80)
    for i, ep in enumerate(held_out):
        ep.images = {cam: rng.integers(0, 256, (len(ep), 16, 16, 3), dtype=np.uint8) for cam in ("agentview", "wrist")}
        ep.meta["seed"] = 5000 + i
    demos = write_hdf5(tmp / "held_out.hdf5", held_out, env_args={"env_name": "synthetic"})
    config = RetrieverTrainConfig.from_yaml(None, [
        "base=callable:__main__:constant_chunk", f"device={device}", "steps=40", "hidden=32", "layers=2",
        "batch_size=16", "log_every=10", "save_every=20", "frame_stride=4", "retrieval.max_nodes=32",
        "holdout_every=3"])
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    summary = train_retriever(config, graph, [demos], tmp / "retriever", progress=False)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0.0
    require(summary["steps"] == 40 and (device == "cpu" or peak > 0), f"{summary['steps']} steps, {peak:.1f} MiB "
                                                                     "of GPU memory used")
    return (f"{summary['steps']} steps on {device} ({peak:.0f} MiB GPU peak), {summary['queries']} queries, "
            f"final loss {summary['final'].get('loss', float('nan')):.3f}")


def check_faiss(tmp: Path, device: str) -> str:
    import faiss

    from graph_builder.config import IndexConfig
    from graph_builder.index import build_index, gpu_available, search, search_device_index, set_search_params

    if device == "cpu" or not gpu_available():
        raise Skipped(f"faiss {faiss.__version__} has no GPU support or sees no GPU (the gpu extra: faiss-gpu-cu12)")
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(200_000, 11)).astype(np.float32)
    queries = rng.normal(size=(2000, 11)).astype(np.float32)
    rows = []
    for kind in ("flat", "ivf"):
        cfg = IndexConfig(gpu="off")
        cpu = build_index(keys, cfg, kind)
        gpu = search_device_index(cpu, "on")
        set_search_params(gpu, cfg.nprobe, cfg.hnsw_ef_search)
        (d_cpu, i_cpu), (d_gpu, i_gpu) = search(cpu, queries, 8, 0), search(gpu, queries, 8, 0)
        same = np.mean([len(set(a) & set(b)) / 8 for a, b in zip(i_cpu, i_gpu)])
        require(same >= 0.999, f"{kind}: the GPU index returns {same:.2%} of the CPU index's neighbours")
        require(np.allclose(np.sort(d_cpu, 1), np.sort(d_gpu, 1), rtol=1e-3, atol=1e-3),
                f"{kind}: neighbour distances differ between GPU and CPU")
        rows.append(f"{kind} {same:.2%}")
    return (f"faiss {faiss.__version__} on {faiss.get_num_gpus()} GPU(s), 200000 keys, 2000 queries, k 8: the CPU "
            f"index's neighbours ({', '.join(rows)})")


CHECKS: dict[str, Callable[[Path, str], str]] = {"cuda": check_cuda, "gate": check_gate,
                                                 "retriever": check_retriever, "faiss": check_faiss}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpu", action="store_true", help="run the checks on the CPU (to try the script)")
    args = parser.parse_args()
    device = "cpu" if args.cpu else "cuda"
    failed = False
    with tempfile.TemporaryDirectory(prefix="r2a-gpu-check-") as tmp:
        for name, check in CHECKS.items():
            t0 = time.perf_counter()
            try:
                status, detail = "ok", check(Path(tmp), device)
            except Skipped as why:
                status, detail = "skipped", str(why)
            except Exception as err:  # every other error is this check's failure; the next check still runs
                status, detail, failed = "FAILED", f"{type(err).__name__}: {err}", True
            print(f"gpu_check {name}: {status} ({time.perf_counter() - t0:.1f} s) {detail}", flush=True)
            if name == "cuda" and status != "ok":
                return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
