"""Koordinator's pod admission for ClusterColocationProfiles, as pure functions of an AdmissionReview.

:func:`mutate` applies the matching profiles (labels, QoS, priority class, scheduler, patch), converts a
batch/mid pod's cpu and memory to Koordinator's extended resources and records them in the
``node.koordinator.sh/extended-resource-spec`` annotation; :func:`validate` refuses the QoS/priority/resource
combinations Koordinator refuses.  The HTTPS server and the cluster cache around them live in ``webhook`` and
``cache``.
"""

from koordlet.companion.colocation.admission import ClusterView, Decision, mutate, validate
from koordlet.companion.colocation.profile import PriorityClassInfo, Profile

__all__ = ["ClusterView", "Decision", "PriorityClassInfo", "Profile", "mutate", "validate"]
