"""The top floor: the ``r2a`` command (:mod:`r2a_cli.main`) and one module per subcommand group — ``demos``,
``graph``, ``policy``, ``serve``, ``retriever``, ``gate``, ``bench`` — each holding its parser and what it runs.

It may import every package; nothing imports it (docs/architecture.md, "The package rule"). ``python -m r2a_cli``
is the ``r2a`` command.
"""
