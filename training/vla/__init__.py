"""Training the built-in VLA (``r2a policy train``): the config (:mod:`training.vla.config`), the demonstration
arrays (:mod:`training.vla.data`) and the loop (:mod:`training.vla.train`); the network, its checkpoint and the
frozen policy are run-time code in ``r2a/vla/``."""
