"""The cluster as ``kubectl apply -k`` leaves it, for one test node: the repository's manifests rendered through an
overlay that sets the image (the ``images:`` entry the README tells operators to use), and the pods their
DaemonSet and Deployment would create, adapted to the test node.

The adaptation is a table of named changes (:class:`NodeOverlay`), each checked against what the manifests say
before it is made: a change whose field is not in the rendered pod fails the run, so a manifest edit cannot leave a
test running on something the manifests no longer ship.  What a test node must change, and why:

- host paths of sockets and state (``/var/run/koordlet``, ``/var/lib/koordlet``, containerd's directory...) point
  into the node's private directory: the host's own agents and runtime own the real ones;
- listen addresses and the ports the probes reach move to free loopback ports: every pod shares the host's network
  namespace here, and fixed ports would collide with other software on a shared machine;
- the companion's address is its loopback port (no cluster DNS here);
- koordlet's cgroup kube parent is the node's private prefix (``--cgroup-kube-parent``).

Everything else (volumes, mount flags, securityContext, env, probes' shape, resources) is what the manifests ship.
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
NAMESPACE = "koordinator-system"


class OverlayError(AssertionError):
    """A change of the test overlay that does not fit the rendered manifests (the manifests changed)."""


def render(image: str, workdir: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of an overlay over ``manifests/`` whose only change is the ``images:`` entry
    naming ``image`` (``name[:tag]``), as an operator deploys a built image."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise OverlayError("kubectl not found (tests/host-deps.sh installs Debian's kubernetes-client)")
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    overlay = workdir / "overlay"
    overlay.mkdir(parents=True, exist_ok=True)
    # kustomize refuses an absolute resource path; a relative one may leave the overlay's directory.
    base = os.path.relpath(MANIFESTS, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [base],
        "images": [{"name": "koordlet", "newName": name, "newTag": tag}]}))
    result = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120,
                            check=False)
    if result.returncode != 0:
        raise OverlayError(f"kubectl kustomize {overlay}: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(objects: Sequence[Mapping[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o.get("kind") == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise OverlayError(f"the rendered manifests hold {len(found)} {kind} named {name!r}, expected one")
    return copy.deepcopy(dict(found[0]))


def pod_of(workload: Mapping[str, Any], node_name: str, suffix: str) -> dict[str, Any]:
    """The Pod the workload's controller creates on ``node_name``: the template's metadata and spec, named after
    the workload, owned by it, bound to the node (the scheduler's part, done)."""
    template = copy.deepcopy(workload["spec"]["template"])
    meta = workload["metadata"]
    name = f"{meta['name']}-{suffix}"
    uid = hashlib.sha256(f"{meta['namespace']}/{name}".encode()).hexdigest()[:32]
    owner_kind = "DaemonSet" if workload["kind"] == "DaemonSet" else "ReplicaSet"
    pod_meta = dict(template.get("metadata") or {})
    pod_meta.update({"name": name, "namespace": meta["namespace"],
                     "uid": f"{uid[:8]}-{uid[8:12]}-{uid[12:16]}-{uid[16:20]}-{uid[20:32]}",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": meta["name"],
                                          "uid": "0" * 8 + "-0000-0000-0000-" + "0" * 12, "controller": True}]})
    spec = dict(template["spec"])
    spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


@dataclass
class NodeOverlay:
    """The changes the test node makes to one rendered pod (see the module docstring); :meth:`apply` checks each
    against the pod and records it in :attr:`made`."""

    host_paths: Mapping[str, str] = field(default_factory=dict)
    """hostPath ``path`` as shipped -> the node's private path."""
    args: Mapping[str, str] = field(default_factory=dict)
    """``--flag`` as shipped -> its new value (the flag must be in the container's args)."""
    extra_args: Sequence[str] = ()
    """Flags the node adds (``--flag=value``); a flag already shipped is refused (use ``args``)."""
    ports: Mapping[int, int] = field(default_factory=dict)
    """containerPort and probe port as shipped -> the node's free port."""
    read_only: Sequence[str] = ()
    """mountPaths made read-only (a test of what a wrong manifest does; none in the node's own overlay)."""
    made: list[str] = field(default_factory=list)

    def apply(self, pod: dict[str, Any]) -> dict[str, Any]:
        pod = copy.deepcopy(pod)
        spec = pod["spec"]
        self._host_paths(spec)
        [container] = spec["containers"]
        self._args(container)
        self._ports(container)
        self._read_only(container)
        return pod

    def _read_only(self, container: dict[str, Any]) -> None:
        mounts = {m["mountPath"]: m for m in container.get("volumeMounts") or []}
        for path in self.read_only:
            if path not in mounts:
                raise OverlayError(f"{container['name']}: no volumeMount at {path} (it has {sorted(mounts)})")
            mounts[path]["readOnly"] = True
            self.made.append(f"{container['name']}: mount {path} read-only")

    def _host_paths(self, spec: dict[str, Any]) -> None:
        shipped = {v["hostPath"]["path"]: v for v in spec.get("volumes") or [] if "hostPath" in v}
        for path, private in self.host_paths.items():
            if path not in shipped:
                raise OverlayError(f"no hostPath volume with path {path} in the rendered pod "
                                   f"(it has {sorted(shipped)})")
            shipped[path]["hostPath"]["path"] = private
            self.made.append(f"volume {shipped[path]['name']}: hostPath {path} -> {private}")

    def _args(self, container: dict[str, Any]) -> None:
        args: list[str] = container.setdefault("args", [])
        for flag, value in self.args.items():
            at = [i for i, arg in enumerate(args) if arg == flag or arg.startswith(flag + "=")]
            if len(at) != 1:
                raise OverlayError(f"{container['name']}: expected {flag} once in the rendered args, "
                                   f"found it {len(at)} times")
            self.made.append(f"{container['name']}: {args[at[0]]} -> {flag}={value}")
            args[at[0]] = f"{flag}={value}"
        for extra in self.extra_args:
            flag = extra.partition("=")[0]
            if any(arg == flag or arg.startswith(flag + "=") for arg in args):
                raise OverlayError(f"{container['name']}: {flag} is shipped already; change it through args")
            args.append(extra)
            self.made.append(f"{container['name']}: added {extra}")

    def _ports(self, container: dict[str, Any]) -> None:
        seen: set[int] = set()
        for port in container.get("ports") or []:
            if port["containerPort"] in self.ports:
                seen.add(port["containerPort"])
                port["containerPort"] = self.ports[port["containerPort"]]
        for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
            probe = container.get(kind) or {}
            for handler in ("httpGet", "tcpSocket"):
                target = probe.get(handler)
                if target is not None and isinstance(target.get("port"), int) and target["port"] in self.ports:
                    seen.add(target["port"])
                    target["port"] = self.ports[target["port"]]
        missing = set(self.ports) - seen
        if missing:
            raise OverlayError(f"{container['name']}: no containerPort or probe port {sorted(missing)} shipped")
        for shipped, private in self.ports.items():
            self.made.append(f"{container['name']}: port {shipped} -> {private}")
