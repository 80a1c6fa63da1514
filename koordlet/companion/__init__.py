"""koord-companion: the cluster-side half of koordlet.

It holds everything that talks to kube-apiserver (NodeSLO per node from ``slo-controller-config``, the
batch-resource calculator, the load-aware scheduler extender), so the per-node agents never do.  It
runs as a Deployment in Kubernetes, or in-process inside ``koordlet run --standalone``.
"""
