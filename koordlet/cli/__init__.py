"""Command-line entry points: ``koordlet`` (the daemon) and ``koordctl`` (the operator's tool)."""
