"""koordlet: a Koordinator-compatible node agent in Python around a small C core.

The package is deliberately light to import: subsystems are imported where they are used, so
``import koordlet`` never loads the compiled core or touches the host.
"""

from koordlet.version import __version__

__all__ = ["__version__"]
