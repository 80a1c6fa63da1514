"""Collectors, one module each; they never import each other (tests/unit/test_layering.py)."""
