"""Resctrl: host facts (:mod:`.host`), schemata arithmetic (:mod:`.schemata`), the pod annotation
(:mod:`.annotation`) and the NodeSLO class settings (:mod:`.policy`), shared by the ``resctrl`` strategy and
hook."""
