"""koordlet's local debug API: HTTP/1.1 with JSON bodies on a unix socket readable by root only (mode 0600),
the data behind ``koordctl``.  The contract (paths and JSON shapes) is in :mod:`koordlet.debugapi.contract`."""
