"""States informer: the node's pods (kubelet or host), node facts, NodeMetric reporting."""
