"""Command-line entry points: ``koordlet`` (the daemon, which :mod:`koordlet.daemon` builds and runs) and
``koordctl`` (the operator's tool).  Argument parsing only."""
