"""Where r2a learns: the built-in VLA's training and its data (``training.vla``), the retriever's training and its
offline checks (``training.retriever``), DAgger (``training.dagger``) and the harmonization check
(``training.harmonize_check``).

Above the run time: it imports ``r2a`` (the networks, checkpoints and policies it trains and measures) and what lies
below it, never ``gating`` (the gate's learning, one floor up) or ``eval``; nothing in ``r2a`` imports it, so a
deployment never loads training code (docs/architecture.md, "The package rule").
"""
