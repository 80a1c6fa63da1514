"""Network QoS: host facts (:mod:`.host`), class rates (:mod:`.plan`) and the NodeSLO policy
(:mod:`.policy`), shared by the ``netqos`` strategy and the ``tc`` hook."""
