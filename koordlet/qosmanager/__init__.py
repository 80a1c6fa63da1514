"""The QoS manager: strategies that protect LS work (suppress, burst, evict, reconcile) from the pods,
the metric cache and the NodeSLO in force, writing only through the resource executor."""
