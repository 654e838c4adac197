"""The simulator leaf: robosuite/MuJoCo backends and the built-in tasks (``sim.envs``), and the seven shift
factors that change an episode's camera, light, scene, start pose, instruction or images (``sim.shifts``).

It imports nothing of the project but ``r2a_core``, so demonstration collection, gate training and the
benchmark can all build (shifted) simulators without depending on each other.
"""
