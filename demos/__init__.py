"""Demonstration data: HDF5 (robomimic/LIBERO) and LeRobot v3 I/O, scripted experts, collection."""
