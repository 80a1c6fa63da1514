"""The composition root of the node agent: builds every component from the configuration
(:mod:`.agent`), runs them in order until asked to stop (:mod:`.lifecycle`), and the ``koordlet run``
sequence around both (:mod:`.run`).  The command line (:mod:`koordlet.cli.koordlet`) only parses arguments
and calls :func:`koordlet.daemon.run.run`."""
