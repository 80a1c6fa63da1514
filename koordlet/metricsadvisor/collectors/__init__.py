"""Collectors, one module each exporting ``NAME``, ``new(deps)`` and ``PLUGIN``
(:data:`koordlet.metricsadvisor.registry.PLUGINS` lists them); they never import each other."""
