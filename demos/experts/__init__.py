"""Scripted experts: privileged, closed-loop waypoint controllers that make the demonstrations and label DAgger
states — the built-in tasks' plans (:mod:`demos.experts.scripted`, :func:`~demos.experts.scripted.make_expert`),
LIBERO's (:mod:`demos.experts.libero`), and the waypoint they share (:mod:`demos.experts.phase`)."""
