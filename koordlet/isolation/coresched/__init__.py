"""Core scheduling: which group a pod's tasks share a cookie with (:mod:`.rules`) and which group holds which
cookie (:mod:`.cookies`), shared by the ``coresched`` strategy and hook."""
