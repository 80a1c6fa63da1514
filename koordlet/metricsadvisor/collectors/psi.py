"""Pressure stall information (Koordinator PSICollector): the node's /proc/pressure files and each pod's
and container's *.pressure in the unified hierarchy.  Series hold avg10 in percent, labelled by resource
(cpu, memory, io) and kind (some, full)."""

from __future__ import annotations

from collections.abc import Sequence

from koordlet import native
from koordlet.config import gates
from koordlet.metriccache import Labels, labels_of, names
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.cgroupfiles import FileSpec
from koordlet.metricsadvisor.framework import Collector, CollectorDeps, FileGroup, Options
from koordlet.metricsadvisor.podcolumns import PodColumns, Wanted, owners, spec_or_none
from koordlet.plugins import Plugin
from koordlet.statesinformer.framework import PodMeta

NAME = "psi"
RESOURCES = ("cpu", "memory", "io")
_SOME_BIT, _FULL_BIT = 0, 1  # found bits of a PSI entry (csrc/kcore.h)
_FULL_AVG10 = 4  # KC_PSI_FULL_AVG10


def _series(name: str, labels: Labels, resource: str) -> tuple[tuple[str, Labels], ...]:
    return tuple((name, labels_of(dict(labels), resource=resource, kind=kind)) for kind in ("some", "full"))


class PSICollector:
    name = NAME

    def enabled(self, options: Options) -> bool:
        return gates.enabled(options.gates, gates.PSI_COLLECTOR)

    def interval(self, options: Options) -> float:
        return options.config.psi_interval_seconds

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        self._columns = PodColumns(NAME, files, options.cache, 2)
        self.on_pods(())

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        wanted: Wanted = {}
        for resource in RESOURCES:
            node_file = FileSpec(self._options.paths.proc("pressure", resource), native.Kind.PSI)
            wanted[("node", resource)] = (node_file, _series(names.NODE_PSI, (), resource))
        if self._options.layout.unified_root is not None:  # v1-only hosts have no per-cgroup pressure
            for owner in owners(pods):
                name = names.POD_PSI if owner.is_pod else names.CONTAINER_PSI
                for resource in RESOURCES:
                    spec = spec_or_none(cgroupfiles.pressure, self._options.layout, owner.rel_dir, resource)
                    if spec is not None:
                        wanted[(owner.key, resource)] = (spec, _series(name, owner.labels, resource))
        self._columns.update(wanted)

    def collect(self, batch: native.BatchResult, now: float) -> None:
        slots = self._columns.slots
        some = batch.gather(slots, native.Gather.VALUE, 0, _SOME_BIT)  # avg10 in hundredths
        full = batch.gather(slots, native.Gather.VALUE, _FULL_AVG10, _FULL_BIT)  # where a full line exists
        self._columns.append(0, now, [v / 100 for v in some])
        self._columns.append(1, now, [v / 100 for v in full])


def new(deps: CollectorDeps) -> PSICollector:
    return PSICollector()


PLUGIN: Plugin[CollectorDeps, Collector] = Plugin(NAME, new)
