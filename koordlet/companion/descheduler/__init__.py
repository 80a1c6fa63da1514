"""The descheduler of koord-companion (upstream ``pkg/descheduler``): every ``deschedulingInterval`` the leader
lists the cluster, runs the enabled balance plugins (LowNodeLoad, CustomPriority) and evicts through the
Eviction API within per-round limits."""
