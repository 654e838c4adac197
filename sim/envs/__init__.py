"""Simulator backends: :class:`sim.envs.robosuite_env.SimEnv` (robosuite 1.5 on MuJoCo, headless EGL/OSMesa
rendering) and the task registry with stages and success checks (:mod:`sim.envs.tasks`)."""
