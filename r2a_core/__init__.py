"""Shared leaf types of r2a: the Episode record, observation keys, action spaces and the Policy protocol.

Every other package may import this one; it imports none of them (see README, "Architecture").
"""

from r2a_core.errors import R2AInputError
from r2a_core.types import (
    CAMERAS,
    ActionSpace,
    Episode,
    image_key,
)
from r2a_core.policy import Policy

__all__ = ["CAMERAS", "ActionSpace", "Episode", "Policy", "R2AInputError", "image_key"]
