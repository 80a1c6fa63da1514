"""Pressure stall information (Koordinator PSICollector): the node's /proc/pressure files and each pod's
and container's *.pressure in the unified hierarchy; the series hold avg10 in percent."""

from __future__ import annotations

from collections.abc import Sequence

from koordlet import native
from koordlet.errors import KoordletError
from koordlet.metriccache import Labels, labels_of, names
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.framework import FileGroup, Options
from koordlet.statesinformer.framework import PodMeta

NAME = "psi"
RESOURCES = ("cpu", "memory", "io")


class PSICollector:
    name = NAME

    def __init__(self) -> None:
        # (owner key, resource) -> (series name, base labels, slot)
        self._targets: dict[tuple[tuple[str, str], str], tuple[str, Labels, int]] = {}

    def enabled(self, options: Options) -> bool:
        return options.gates.get("PSICollector", False)

    def interval(self, options: Options) -> float:
        return options.config.psi_interval_seconds

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        self._files = files
        for resource in RESOURCES:
            slot = files.track((NAME, "node", resource), options.paths.proc("pressure", resource), native.Kind.PSI)
            self._targets[(("", ""), resource)] = (names.NODE_PSI, (), slot)

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        if self._options.layout.unified_root is None:
            return  # a v1-only host has no per-cgroup pressure files
        wanted: dict[tuple[str, str], tuple[str, str, Labels]] = {}
        for meta in pods:
            if meta.cgroup_dir:
                wanted[(meta.uid, "")] = (meta.cgroup_dir, names.POD_PSI, labels_of(pod=meta.uid))
            for c in meta.containers:
                if c.cgroup_dir and c.container_id:
                    wanted[(meta.uid, c.container_id)] = (c.cgroup_dir, names.CONTAINER_PSI,
                                                          labels_of(pod=meta.uid, container=c.container_id))
        for target_key in [k for k in self._targets if k[0] != ("", "") and k[0] not in wanted]:
            name, labels, _ = self._targets.pop(target_key)
            self._files.untrack((NAME, target_key))
            for kind in ("some", "full"):
                self._options.cache.drop(name, _with(labels, target_key[1], kind))
        for owner, (rel_dir, name, labels) in wanted.items():
            for resource in RESOURCES:
                if (owner, resource) in self._targets:
                    continue
                try:
                    spec = cgroupfiles.pressure(self._options.layout, rel_dir, resource)
                except KoordletError:
                    continue
                slot = self._files.track((NAME, (owner, resource)), spec.path, spec.kind)
                self._targets[(owner, resource)] = (name, labels, slot)

    def collect(self, batch: native.BatchResult, now: float) -> None:
        samples = []
        for (_, resource), (name, labels, slot) in self._targets.items():
            psi = batch.get(slot)
            if psi is None:
                continue
            samples.append((name, _with(labels, resource, "some"), now, psi.some.avg10))
            if psi.full is not None:
                samples.append((name, _with(labels, resource, "full"), now, psi.full.avg10))
        self._options.cache.append_many(samples)


def _with(labels: Labels, resource: str, kind: str) -> Labels:
    return labels_of(dict(labels), resource=resource, kind=kind)
