"""Shared leaf types and toolkit of r2a: the Episode record, observation keys, action spaces, the Policy
protocol, the typed config loader (:mod:`r2a_core.config`) and the atomic writer (:mod:`r2a_core.files`).

Every other package may import this one; it imports none of them (docs/architecture.md, "The package rule").
"""

from r2a_core.errors import R2AInputError
from r2a_core.policy import Policy
from r2a_core.types import (
    CAMERAS,
    ActionSpace,
    Episode,
    image_key,
)

__all__ = ["CAMERAS", "ActionSpace", "Episode", "Policy", "R2AInputError", "image_key"]
