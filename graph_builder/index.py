"""FAISS indexes over kinematic keys: which kind, how it is built, and how many threads a search uses.

Choice (``index.type=auto``): an exact ``IndexFlatL2`` up to ``exact_max_nodes`` nodes, ``IndexIVFFlat`` above
(keys are ~11-D, so IVF lists with exact distances inside are both fast and accurate). HNSW is available on
request; it builds ~10x slower, and on one thread so that it stays deterministic. The saved index is always a
CPU index; with faiss-gpu and a GPU present, k-means and searches run on a GPU copy.

Threads: FAISS parallelizes one query over OpenMP threads, which on a 2-core machine makes a single query ~4x
*slower* (docs/architecture.md, "Platform notes"). Small query batches therefore run with ``query_threads``
(default 1) and large batches (edge building) with ``build_threads`` (0 = all cores).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from typing import Any, Iterator

import faiss
import numpy as np

from graph_builder.config import IndexConfig

log = logging.getLogger(__name__)

#: query batches up to this size count as "single queries" and use ``query_threads``
SMALL_BATCH = 16
#: IVF wants at least this many training points per list
MIN_POINTS_PER_LIST = 39


@contextlib.contextmanager
def faiss_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` OpenMP threads (0 = all cores), restoring the previous count after."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n if n > 0 else (os.cpu_count() or 1))
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def gpu_available() -> bool:
    """True when this faiss build has GPU support and sees at least one GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def use_gpu(mode: str) -> bool:
    """Whether to use a GPU under ``index.gpu`` = ``mode`` (auto | on | off)."""
    if mode == "off":
        return False
    available = gpu_available()
    if mode == "on" and not available:
        log.warning("index.gpu=on but faiss has no GPU support or no GPU is visible; using the CPU")
    return available


def choose_index_type(num_vectors: int, cfg: IndexConfig) -> str:
    if cfg.type != "auto":
        return cfg.type
    return "flat" if num_vectors <= cfg.exact_max_nodes else "ivf"


def ivf_nlist(num_vectors: int, cfg: IndexConfig) -> int:
    """4·sqrt(N) rounded to a power of two (or the configured value), capped so every list gets trained."""
    nlist = cfg.nlist or 2 ** round(math.log2(max(4.0 * math.sqrt(max(num_vectors, 1)), 1.0)))
    return int(max(1, min(nlist, num_vectors // MIN_POINTS_PER_LIST)))


def build_index(keys: np.ndarray, cfg: IndexConfig, kind: str | None = None) -> faiss.Index:
    """A trained, filled CPU index over ``keys`` (float32, C-contiguous); deterministic for fixed inputs."""
    keys = np.ascontiguousarray(keys, dtype=np.float32)
    n, d = keys.shape
    kind = kind or choose_index_type(n, cfg)
    # concurrent HNSW insertion makes the graph depend on thread timing: build it on one thread
    with faiss_threads(1 if kind == "hnsw" else cfg.build_threads):
        if kind == "flat":
            index = faiss.IndexFlatL2(d)
        elif kind == "hnsw":
            index = faiss.IndexHNSWFlat(d, cfg.hnsw_m)
            index.hnsw.efSearch = cfg.hnsw_ef_search
        elif kind == "ivf":
            index = _train_ivf(keys, ivf_nlist(n, cfg), cfg)
        else:
            raise ValueError(f"unknown index kind {kind!r}")
        index.add(keys)
    set_search_params(index, cfg.nprobe, cfg.hnsw_ef_search)
    return index


def _train_ivf(keys: np.ndarray, nlist: int, cfg: IndexConfig) -> faiss.Index:
    quantizer = faiss.IndexFlatL2(keys.shape[1])
    index = faiss.IndexIVFFlat(quantizer, keys.shape[1], nlist, faiss.METRIC_L2)
    index.cp.seed = cfg.seed
    index.cp.niter = 10
    index.cp.max_points_per_centroid = 128
    if use_gpu(cfg.gpu):
        # k-means on the GPU; the trained structure stays a CPU index that can be saved
        index.clustering_index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0,
                                                        faiss.IndexFlatL2(keys.shape[1]))
    index.train(keys)
    return index


def set_search_params(index: faiss.Index, nprobe: int, ef_search: int) -> None:
    """Set how thoroughly IVF/HNSW indexes search (no-op for exact indexes)."""
    real = faiss.downcast_index(index)
    ivf = _as_ivf(index)
    if ivf is None and hasattr(real, "nprobe"):  # GPU IVF indexes
        ivf = real
    if ivf is not None:
        ivf.nprobe = min(nprobe, ivf.nlist)
    hnsw = getattr(real, "hnsw", None)
    if hnsw is not None:
        hnsw.efSearch = ef_search


def _as_ivf(index: faiss.Index) -> Any:
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


def search_device_index(index: faiss.Index, gpu_mode: str) -> faiss.Index:
    """The index searches should use: a GPU copy when enabled and supported, else ``index`` itself."""
    if not use_gpu(gpu_mode) or index_kind(index) == "hnsw":
        return index
    return faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)


def search(index: faiss.Index, queries: np.ndarray, k: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """k nearest neighbours (squared L2, ids; -1 where fewer exist) with a deliberate thread count."""
    queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    with faiss_threads(threads):
        return index.search(queries, k)


def index_kind(index: faiss.Index) -> str:
    real = faiss.downcast_index(index)
    if isinstance(real, faiss.IndexHNSW):
        return "hnsw"
    if _as_ivf(index) is not None:
        return "ivf"
    return "flat"


def describe_index(index: faiss.Index) -> dict[str, Any]:
    """What the manifest records about an index."""
    kind = index_kind(index)
    info: dict[str, Any] = {"type": kind, "faiss_class": type(faiss.downcast_index(index)).__name__,
                            "dim": int(index.d), "ntotal": int(index.ntotal), "metric": "L2"}
    if kind == "ivf":
        ivf = _as_ivf(index)
        info.update(nlist=int(ivf.nlist), nprobe=int(ivf.nprobe))
    if kind == "hnsw":
        real = faiss.downcast_index(index)
        info.update(m=int(real.hnsw.nb_neighbors(1)), ef_search=int(real.hnsw.efSearch))
    return info


def serialize_index(index: faiss.Index) -> bytes:
    return faiss.serialize_index(index).tobytes()


def deserialize_index(data: bytes) -> faiss.Index:
    return faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
