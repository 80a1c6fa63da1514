"""Host applications (NodeSLO ``hostApplications``): processes outside Kubernetes that koordlet manages
like pods, found by cgroup directory.

Where an application's cgroup is (koordinator ``pkg/koordlet/util/host_application.go``,
``GetHostAppCgroupRelativePath``): without ``cgroupPath``, ``host-latency-sensitive/<name>`` for LSE/LSR/LS,
``host-best-effort/<name>`` for BE and ``<name>`` for no class, all at the hierarchy root; with it,
``<base>/<parentDir>/<relativePath>`` where the base is the hierarchy root (``CgroupRoot``, the default) or
a kubelet QoS directory (below kubelet's cgroup root, named by its cgroup driver).

Which applications BE suppression covers (koordinator ``qosmanager/helpers/calculator.go``,
``NonBEHostAppFilter``): a BE application whose cgroup base is ``KubepodsBesteffort``, because it sits in
the besteffort tree that suppression narrows; any other application, BE or not, is not limited by it and
counts as latency-sensitive usage.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence

from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo import HostApplicationSpec
from koordlet.metriccache.cache import Labels
from koordlet.system.kubepaths import CgroupDriver, KubeQoS, qos_dir, under_parent

DEFAULT_LS_DIR = "host-latency-sensitive"
DEFAULT_BE_DIR = "host-best-effort"
BESTEFFORT_BASE = "KubepodsBesteffort"
_KUBE_BASES = {"Kubepods": KubeQoS.GUARANTEED, "KubepodsBurstable": KubeQoS.BURSTABLE,
               BESTEFFORT_BASE: KubeQoS.BESTEFFORT}
_LS_CLASSES = frozenset({QoSClass.LSE.value, QoSClass.LSR.value, QoSClass.LS.value})


def cgroup_dir(app: HostApplicationSpec, driver: CgroupDriver, kube_parent: str = "") -> str:
    """The application's directory relative to a hierarchy root (no leading or trailing "/").

    Joined and cleaned as Go's ``filepath.Join`` does; the NodeSLO check refuses ".." in the parts and
    an empty name, so the result is always a directory strictly below the root."""
    path = app.cgroup_path
    if path is None:
        base = DEFAULT_LS_DIR if app.qos in _LS_CLASSES else DEFAULT_BE_DIR if app.qos == QoSClass.BE.value else ""
        parts = [base, app.name or ""]
    else:
        kube = _KUBE_BASES.get(path.base or "")
        base = under_parent(kube_parent, qos_dir(driver, kube)) if kube is not None else ""
        parts = [base, path.parent_dir or "", path.relative_path or ""]
    joined = posixpath.normpath("/" + "/".join(p for p in parts if p))
    return joined.strip("/")


def suppressed_with_be(app: HostApplicationSpec) -> bool:
    """BE and below the besteffort QoS directory: limited by BE suppression (the inverse of upstream's
    ``NonBEHostAppFilter``)."""
    return app.qos == QoSClass.BE.value and app.cgroup_path is not None and app.cgroup_path.base == BESTEFFORT_BASE


def labels(name: str) -> Labels:
    """The label tuple of an application's series."""
    return (("host_app", name),)


def unique(apps: Iterable[HostApplicationSpec] | None) -> Sequence[HostApplicationSpec]:
    """The applications by name, the first of a repeated name winning: the name keys the metric series,
    so two entries with one name would mix their samples."""
    seen: dict[str, HostApplicationSpec] = {}
    for app in apps or ():
        if app.name and app.name not in seen:
            seen[app.name] = app
    return tuple(seen.values())
