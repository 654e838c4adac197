"""The simulator leaf: robosuite/MuJoCo backends and the built-in tasks (``sim.envs``), the seven shift factors
that change an episode's camera, light, scene, start pose, instruction or images (``sim.shifts``), and the
tasks as gymnasium environments (``sim.gym_env``: ``gymnasium.make("r2a/Stack-v0", shift="camera:2")``).

It imports nothing of the project but ``r2a_core``, so demonstration collection, gate training and the
benchmark can all build (shifted) simulators without depending on each other.
"""

import importlib.util as _importlib_util
import logging as _logging

# The gymnasium ids r2a/<Task>-v0 are registered here when gymnasium is installed (gymnasium 1.x dropped its
# plugin entry points). Without gymnasium nothing is imported (find_spec only looks), and a broken gymnasium
# is logged, never raised: `import sim` must not fail or slow down because of an optional extra.
if _importlib_util.find_spec("gymnasium") is not None:
    try:
        from sim.gym_env import register_envs as _register_envs

        _register_envs()
    except Exception as _err:  # noqa: BLE001
        _logging.getLogger(__name__).warning("gymnasium is installed but the r2a environments could not be "
                                             "registered: %s", _err)
