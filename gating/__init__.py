"""The learned dimension-wise gate that blends the retrieved reference into the base policy's actions."""
