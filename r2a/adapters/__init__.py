"""Adapters: run policies that live outside this repository behind our Policy contract.

* :mod:`~r2a.adapters.openpi_policy` — a client of openpi's websocket policy server (the server that exposes any
  of our policies with the same protocol is :mod:`r2a.serve.policy_server`);
* :mod:`~r2a.adapters.lerobot_policy` — a LeRobot ``PreTrainedPolicy`` loaded from a local checkpoint
  (optional extra ``r2a[lerobot]``);
* :mod:`~r2a.adapters.callable_policy` — any Python function ``obs -> actions``;
* :mod:`~r2a.adapters.keymap` — maps our observation keys to a model's keys and its actions back to ours
  (``configs/adapters/*.yaml``);
* :mod:`~r2a.adapters.guard` — wraps every external policy: shape checks, clipping, a hold-still fallback
  for non-finite actions;
* :mod:`~r2a.adapters.msgpack_numpy` — openpi's wire format (msgpack with numpy arrays, never pickle).
"""
