"""Domain rules shared by the QoS strategies (:mod:`koordlet.qosmanager`) and the runtime hooks
(:mod:`koordlet.runtimehooks`): core-scheduling groups and cookies, resctrl schemata, annotations and host
facts, network classes.  Both subsystems import from here so neither reaches into the other's plugins, and a
pod gets the same answer whether a hook sets it up at creation or a strategy reconciles it later."""
