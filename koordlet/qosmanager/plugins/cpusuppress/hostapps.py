"""Host applications in BE CPU suppression (koordinator ``qosmanager/helpers/calculator.go``,
``CalculateFilterPodsUsed`` with ``NonBEHostAppFilter``).

Every application with a fresh CPU sample leaves the system's share (system = node - pods - host apps);
the ones suppression does not reach (anything but a BE application under ``KubepodsBesteffort``) count
as latency-sensitive usage, which BE's allowance is reduced by.  A BE application under the besteffort
directory is suppressed with the BE pods: it is in the tree suppression narrows and caps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from koordlet.apis.nodeslo import HostApplicationSpec
from koordlet.metriccache import names
from koordlet.qosmanager import helpers
from koordlet.qosmanager.framework import Options
from koordlet.statesinformer import hostapps


@dataclass(frozen=True)
class HostAppCPU:
    """Cores used by host applications this round."""

    non_be: float = 0.0
    """Applications suppression does not limit: counted as LS usage."""
    total: float = 0.0
    """Every application with a fresh sample: excluded from the system's usage."""
    by_app: dict[str, float] = field(default_factory=dict)


def host_app_cpu(options: Options, apps: Sequence[HostApplicationSpec] | None) -> HostAppCPU:
    """The latest CPU sample of each application no older than the strategies' sample age (an
    application without one counts nowhere, as upstream skips an application missing from its metrics)."""
    age = helpers.max_age(options)
    non_be = total = 0.0
    by_app: dict[str, float] = {}
    for app in hostapps.unique(apps):
        sample = options.cache.latest(names.HOST_APP_CPU_USAGE, hostapps.labels(app.name or ""), age)
        if sample is None:
            continue
        by_app[app.name or ""] = sample[1]
        total += sample[1]
        if not hostapps.suppressed_with_be(app):
            non_be += sample[1]
    return HostAppCPU(non_be, total, by_app)


def be_host_app_dirs(options: Options, apps: Sequence[HostApplicationSpec] | None) -> tuple[str, ...]:
    """The cgroup directories of the BE applications suppressed with the BE pods."""
    return tuple(dict.fromkeys(hostapps.cgroup_dir(a, options.driver, options.kube_parent)
                               for a in hostapps.unique(apps) if hostapps.suppressed_with_be(a)))
