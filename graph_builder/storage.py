"""On-disk format of a motion graph, version 1.

```
GRAPH_DIR/
  manifest.json        format name + version, build config, feature spec with normalization statistics,
                       sources with content hashes, counts, and every file's sha256/bytes/shape/dtype
  arrays/<name>.npy    one .npy per array (see graph_builder.motion_graph), loadable with mmap
  index.faiss          the FAISS index over node_key (always a CPU index)
```

Writing is atomic: everything goes to a hidden temporary sibling directory which is renamed into place, so a
reader never sees a half-written graph. Reading refuses unknown format versions, missing/extra-size files,
sha256 mismatches and arrays that disagree with each other or with the manifest — each with a one-line
message saying what to do. Older versions stay readable: add a reader to ``_UPGRADES`` when the format changes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np

from graph_builder.index import deserialize_index, serialize_index
from graph_builder.motion_graph import MotionGraph
from r2a_core.errors import R2AInputError
from r2a_core.files import atomic_dir, read_manifest_json
from r2a_core.provenance import sha256_file

log = logging.getLogger(__name__)

FORMAT_NAME = "r2a-motion-graph"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
INDEX_FILE = "index.faiss"
ARRAY_DIR = "arrays"

#: version → function that upgrades a manifest of that version to the next one (none yet)
_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
READABLE_VERSIONS = (FORMAT_VERSION, *_UPGRADES)


def save_graph(graph: MotionGraph, out_dir: str | Path, overwrite: bool = False) -> Path:
    """Write ``graph`` to ``out_dir`` atomically; an existing graph there is replaced only with ``overwrite``."""
    out = Path(out_dir)
    if out.exists() and not overwrite and (not out.is_dir() or any(out.iterdir())):
        raise R2AInputError(f"{out}: already exists; choose another --out or pass --force to replace it")
    with atomic_dir(out, overwrite=True) as tmp:
        files = _write_payload(graph, tmp)
        manifest = {**graph.manifest, "files": files}
        (tmp / MANIFEST).write_bytes((json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    graph.manifest, graph.path = manifest, out
    log.info("wrote graph to %s (%.1f MB)", out, sum(f["bytes"] for f in files.values()) / 2**20)
    return out


def _write_payload(graph: MotionGraph, root: Path) -> dict[str, dict[str, Any]]:
    """Arrays and index into ``root`` (a temporary directory that :func:`atomic_dir` fsyncs and renames)."""
    (root / ARRAY_DIR).mkdir()
    files = {}
    for name in sorted(graph.arrays):
        arr = np.ascontiguousarray(graph.arrays[name])
        rel = f"{ARRAY_DIR}/{name}.npy"
        with open(root / rel, "wb") as fh:
            np.lib.format.write_array(fh, arr, allow_pickle=False)
        files[rel] = {**_file_digest(root / rel), "shape": list(arr.shape), "dtype": arr.dtype.str}
    (root / INDEX_FILE).write_bytes(serialize_index(graph.index))
    files[INDEX_FILE] = _file_digest(root / INDEX_FILE)
    return files


def _file_digest(path: Path) -> dict[str, Any]:
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def read_manifest(graph_dir: str | Path) -> dict[str, Any]:
    """The manifest of a graph directory, checked for format name and a readable version (upgraded if old)."""
    manifest = read_manifest_json(graph_dir, MANIFEST, FORMAT_NAME, "format_version", READABLE_VERSIONS,
                                  "a motion graph", "rebuild it with 'r2a graph build'")
    while manifest["format_version"] != FORMAT_VERSION:
        manifest = _UPGRADES[manifest["format_version"]](manifest)
    return manifest


def verify_files(graph_dir: str | Path, manifest: dict[str, Any], hashes: bool = True) -> None:
    """Check that every file in the manifest exists with the recorded size (and sha256 when ``hashes``)."""
    root = Path(graph_dir)
    for rel, meta in manifest["files"].items():
        path = root / rel
        if not path.is_file():
            raise R2AInputError(f"{path}: missing; the graph is incomplete, rebuild it with 'r2a graph build'")
        size = path.stat().st_size
        if size != meta["bytes"]:
            raise R2AInputError(f"{path}: {size} bytes, manifest says {meta['bytes']}; the file is truncated or "
                                "was replaced, rebuild the graph")
        if hashes and _file_digest(path)["sha256"] != meta["sha256"]:
            raise R2AInputError(f"{path}: sha256 does not match the manifest; the file is corrupted or was "
                                "modified, rebuild the graph")


def load_graph(graph_dir: str | Path, verify: bool = True, mmap: bool = False) -> MotionGraph:
    """Load a graph directory: manifest, arrays (optionally memory-mapped) and index, all cross-checked.

    ``verify`` hashes every file against the manifest (about a second per GB); sizes are always checked.
    """
    root = Path(graph_dir)
    manifest = read_manifest(root)
    verify_files(root, manifest, hashes=verify)
    arrays = {}
    for rel, meta in manifest["files"].items():
        if not rel.startswith(f"{ARRAY_DIR}/"):
            continue
        arrays[Path(rel).stem] = _load_array(root / rel, meta, mmap)
    index = _load_index(root / INDEX_FILE)
    graph = MotionGraph(manifest=manifest, arrays=arrays, index=index, path=root)
    check_consistency(graph)
    return graph


def _load_array(path: Path, meta: dict[str, Any], mmap: bool) -> np.ndarray:
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise R2AInputError(f"{path}: not a readable .npy array ({err}); rebuild the graph") from None
    if list(arr.shape) != meta["shape"] or arr.dtype.str != meta["dtype"]:
        raise R2AInputError(f"{path}: array is {arr.dtype.str}{list(arr.shape)}, manifest says "
                            f"{meta['dtype']}{meta['shape']}; rebuild the graph")
    return arr


def _load_index(path: Path):
    try:
        return deserialize_index(path.read_bytes())
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "unreadable"
        raise R2AInputError(f"{path}: not a readable FAISS index ({first}); rebuild the graph") from None


#: array name → expected shape; "N" nodes, "E" edges, "D" demos, "H" future frames, "A" action dims, "K" key dims
EXPECTED_SHAPES: dict[str, tuple[Any, ...]] = {
    "node_demo": ("N",), "node_span": ("N", 2), "node_phase": ("N",), "node_ee_pos": ("N", 3),
    "node_ee_quat": ("N", 4), "node_ee_rot6d": ("N", 6), "node_gripper": ("N",), "node_velocity": ("N", 5),
    "node_task": ("N",), "node_instruction": ("N",), "node_at_gripper_event": ("N",), "node_key": ("N", "K"),
    "future_dpos": ("N", "H", 3), "future_drot6d": ("N", "H", 6), "future_gripper": ("N", "H"),
    "future_actions": ("N", "H", "A"), "future_valid": ("N", "H"),
    "edge_index": (2, "E"), "edge_type": ("E",), "edge_offset": ("E",), "edge_dist": ("E",),
    "demo_source": ("D",), "demo_episode": ("D",), "demo_task": ("D",), "demo_instruction": ("D",),
    "demo_length": ("D",), "demo_node_ptr": ("D+1",),
}


def check_consistency(graph: MotionGraph) -> None:
    """Arrays, index and manifest must describe the same graph; raise naming the first disagreement."""
    m, a = graph.manifest, graph.arrays
    where = graph.path or "graph"
    counts = m["counts"]
    dims = {"N": counts["nodes"], "E": counts["edges"]["total"], "D": counts["demos"], "D+1": counts["demos"] + 1,
            "H": m["features"]["future"]["frames"], "A": m["action_space"]["dim"], "K": m["features"]["key"]["dim"]}
    missing = sorted(set(EXPECTED_SHAPES) - set(a))
    if missing:
        raise R2AInputError(f"{where}: arrays missing from the manifest: {', '.join(missing)}; rebuild the graph")
    for name, spec in EXPECTED_SHAPES.items():
        expected = tuple(dims[s] if isinstance(s, str) else s for s in spec)
        if tuple(a[name].shape) != expected:
            raise R2AInputError(f"{where}: {name} has shape {tuple(a[name].shape)}, expected {expected} from the "
                                "manifest counts; the files do not belong together, rebuild the graph")
    if graph.index.ntotal != dims["N"] or graph.index.d != dims["K"]:
        raise R2AInputError(f"{where}: index holds {graph.index.ntotal} vectors of dim {graph.index.d}, expected "
                            f"{dims['N']} of dim {dims['K']}; the index does not belong to these arrays")
    e = a["edge_index"]
    if e.size and (int(e.min()) < 0 or int(e.max()) >= dims["N"]):
        raise R2AInputError(f"{where}: edge_index refers to nodes outside 0..{dims['N'] - 1}; rebuild the graph")
    if int(a["demo_node_ptr"][-1]) != dims["N"]:
        raise R2AInputError(f"{where}: demo_node_ptr ends at {int(a['demo_node_ptr'][-1])}, expected {dims['N']}")
