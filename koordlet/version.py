"""The one version number of the distribution (setup.py reads it without importing the package)."""

__version__ = "0.1.0"
