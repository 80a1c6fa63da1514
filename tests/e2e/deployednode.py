"""koordlet and koord-companion as containers of the product's image, created by the kubelet driver from the pods
the rendered manifests' DaemonSet and Deployment make (tests/e2e/deployed.py), as a cluster runs them.

:class:`PodComponent` gives such a container the interface the scenarios use for a process (:class:`Proc`):
alive, kill (SIGKILL of the container's first process; the driver restarts it under the pod's restartPolicy, with
kubelet's back-off), stop, the log of the current attempt.  :func:`start_deployed` seeds the cluster objects the
manifests hold into the fake kube-apiserver (what ``kubectl apply`` would store), runs the companion's pod, then the
koordlet's, and returns both with what the node needs to reach them.

What this test node does that a cluster does differently (each a stand-in, not a change to what is shipped):
- Service names resolve through the pods' managed ``/etc/hosts`` (no cluster DNS): every pod here shares the
  node's network namespace, so ``<service>.<namespace>.svc`` is the node;
- there is no kube-proxy: a client dials the pod's port itself, which is why the overlay moves the companion's
  address to its listen port;
- ``/sys`` reaches the koordlet container through a shared recursive bind of it under the node's directory, as
  on a systemd host where ``/`` is a shared mount (here every mount is private, and ``HostToContainer``
  propagation needs a shared or slave source).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.deployed import NAMESPACE, NodeOverlay, find, pod_of
from tests.fixtures.fakeapiserver import FakeApiServer, resource_for
from tests.fixtures.kubeletdriver import KubeletDriver
from tests.fixtures.rbac import Attributes as RbacAttributes
from tests.fixtures.rbac import kubelet_subresources
from tests.fixtures.waiting import wait_until

KUBELET_BACKOFF_SECONDS = 10.0
"""kubelet's first CrashLoopBackOff delay (doubled per restart): a killed component comes back as in a cluster."""
START_SECONDS = 120.0
"""A container start includes the image's Python importing the kubernetes client (companion) under a CPU limit."""


class PodComponent:
    """One component as the only container of a pod the kubelet driver runs."""

    def __init__(self, name: str, kubelet: KubeletDriver, apiserver: FakeApiServer, manifest: Mapping[str, Any],
                 log_dir: Path) -> None:
        self.name = name
        self.manifest = dict(manifest)
        self.namespace = manifest["metadata"]["namespace"]
        self.pod = manifest["metadata"]["name"]
        [container] = manifest["spec"]["containers"]
        self.container = container["name"]
        self._kubelet = kubelet
        self._apiserver = apiserver
        self._log_dir = log_dir
        self._created = False

    def start(self) -> PodComponent:
        """Creates the pod the first time (bound in the apiserver first, so its tokens can be minted); later,
        waits for the driver to have restarted the container (the fault matrix's "supervisor")."""
        if not self._created:
            self._apiserver.seed(self.manifest | {"status": {"phase": "Pending"}})
            self._kubelet.create_pod(self.manifest)
            self._created = True
        wait_until(f"{self.name}'s container running", timeout=START_SECONDS, check=self.alive)
        return self

    def _snapshot(self) -> Any:
        return self._kubelet.pod(self.namespace, self.pod).container(self.container)

    @property
    def pid(self) -> int:
        """The container's first process on the host; 0 while there is none."""
        try:
            return self._kubelet.container_pid(self.namespace, self.pod, self.container)
        except Exception:  # no container (yet), or CRI has no pid for it: reported as 0, as in a log line
            return 0

    def alive(self) -> bool:
        try:
            return bool(self._snapshot().state == "running")
        except (KeyError, LookupError, ValueError):
            return False

    def exit_code(self) -> int | None:
        with contextlib.suppress(KeyError, LookupError, ValueError):
            snapshot = self._snapshot()
            return None if snapshot.state == "running" else snapshot.exit_code
        return None

    def stop(self) -> int | None:
        """Deletes the pod (SIGTERM, SIGKILL after its grace period), as kubelet does for a deleted pod."""
        code = self.exit_code()
        if self._created:
            with contextlib.suppress(KeyError, LookupError, ValueError):
                self._kubelet.delete_pod(self.namespace, self.pod)
            self._created = False
        return code

    def kill(self) -> int:
        """SIGKILL of the container's first process (a crash, the OOM killer); returns its PID once the driver
        saw the container exit."""
        before = self._snapshot()
        assert before.state == "running", f"{self.name} is not running"
        pid = self.pid
        assert pid > 0, f"{self.name}: CRI reports no process for the running container"
        os.kill(pid, signal.SIGKILL)
        wait_until(f"{self.name}'s container seen exiting", timeout=30, check=lambda: (
            (now := self._snapshot()).container_id != before.container_id or now.state != "running"))
        return pid

    @property
    def log_path(self) -> Path:
        """The CRI log of the container's current attempt (``<time> <stream> <tag> <line>`` lines)."""
        snapshot = self._kubelet.pod(self.namespace, self.pod)
        attempt = snapshot.container(self.container).restart_count
        return self.pod_log_dir(snapshot.uid) / self.container / f"{attempt}.log"

    def pod_log_dir(self, uid: str | None = None) -> Path:
        uid = uid or self._kubelet.pod(self.namespace, self.pod).uid
        return self._kubelet.state_dir / "pods" / f"{self.namespace}_{self.pod}_{uid}"

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except (OSError, KeyError, LookupError, ValueError):
            return ""
        return "\n".join(text[-lines:])

    def check_alive(self) -> None:
        if not self.alive():
            raise AssertionError(f"{self.name} is not running (exit code {self.exit_code()}):\n{self.log_tail()}")

    def copy_logs(self, dest: Path) -> None:
        """Every attempt's log, kept beside the report when the node goes."""
        with contextlib.suppress(OSError, KeyError, LookupError, ValueError):
            for log in self.pod_log_dir().glob("*/*.log"):
                dest.mkdir(parents=True, exist_ok=True)
                (dest / f"{self.name}-{log.stem}.log").write_bytes(log.read_bytes())


@contextlib.contextmanager
def _host_copy(path: Path, source: str) -> Iterator[Path]:
    """``source`` bound recursively at ``path``, made a slave first: whatever happens to the copy (remounts, the
    unmount on exit) never propagates back to the host's mounts, even where those are shared (systemd hosts)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--rbind", source, str(path)], check=True)
    try:
        subprocess.run(["mount", "--make-rslave", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", "-R", "-l", str(path)], check=False)


@contextlib.contextmanager
def shared_sys(path: Path) -> Iterator[Path]:
    """``/sys`` at ``path``, its copy made shared (see the module docstring)."""
    with _host_copy(path, "/sys"):
        subprocess.run(["mount", "--make-rshared", str(path)], check=True)
        yield path


def _mounts_below(path: Path) -> list[str]:
    """Mount points at or below ``path``, parents first (/proc/self/mountinfo, octal escapes decoded)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == str(path) or point.startswith(f"{path}/"):
            found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"))


@contextlib.contextmanager
def recursive_read_only(path: Path, source: str) -> Iterator[Path]:
    """``source`` at ``path`` with every mount of the copy read-only: what ``recursiveReadOnly: Enabled`` gives on a
    runtime that supports it (containerd 2, Linux 5.12+).  containerd 1.6 and 1.7 make only the top of a bind
    read-only, which leaves cgroup v1's controller mounts below /sys/fs/cgroup writable."""
    with _host_copy(path, source):
        for point in _mounts_below(path):
            subprocess.run(["mount", "-o", "remount,bind,ro", point], check=True)
        yield path


SEEDED_KINDS_SKIPPED = ("CustomResourceDefinition", "ServiceAccount", "Service", "DaemonSet", "Deployment",
                        "NetworkPolicy", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
"""Rendered kinds the fake apiserver does not store: the CRDs' resources and the RBAC it enforces are built into
it (tests/fixtures/fakeapiserver.py, tests/fixtures/rbac.py), Services are routes (webhooks) or names (hosts), and
the workloads are what this module runs."""


def seed_cluster(apiserver: FakeApiServer, objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """Stores every rendered object the fake serves, as ``kubectl apply`` would; returns what it stored."""
    stored = []
    for obj in objects:
        if obj["kind"] in SEEDED_KINDS_SKIPPED:
            continue
        resource_for(obj)  # a kind nobody decided about fails here, naming it
        apiserver.seed(dict(obj))
        stored.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return stored


@dataclass
class Ports:
    companion_grpc: int
    companion_extender: int
    companion_metrics: int
    companion_webhook: int
    koordlet_metrics: int


@dataclass
class DeployedComponents:
    companion: PodComponent
    koordlet: PodComponent
    debug_socket: Path
    overlays: dict[str, list[str]]
    """Per component, the overlay's changes as made (for the report)."""


def companion_overlay(ports: Ports) -> NodeOverlay:
    return NodeOverlay(
        args={"--grpc-addr": f"127.0.0.1:{ports.companion_grpc}",
              "--extender-addr": f"127.0.0.1:{ports.companion_extender}",
              "--metrics-addr": f"127.0.0.1:{ports.companion_metrics}",
              "--webhook-addr": f"127.0.0.1:{ports.companion_webhook}"},
        ports={9320: ports.companion_grpc, 9321: ports.companion_extender, 9322: ports.companion_metrics,
               9443: ports.companion_webhook})


def koordlet_overlay(*, tmp: Path, ports: Ports, kubelet: KubeletDriver, nri_dir: Path, host_sys: Path,
                     extra_args: Sequence[str],
                     read_only_cgroup: Path | None = None) -> NodeOverlay:
    """The koordlet pod's changes; ``read_only_cgroup``: a read-only copy of the host's cgroup tree mounted
    read-only (a broken deployment)."""
    run_koordlet = tmp / "host" / "var-run-koordlet"
    cgroup = {} if read_only_cgroup is None else {"/sys/fs/cgroup": str(read_only_cgroup)}
    return NodeOverlay(
        host_paths={**cgroup, "/sys": str(host_sys), "/var/run/koordlet": str(run_koordlet),
                    "/etc/runtime/hookserver.d": str(tmp / "hookserver.d"), "/var/run/nri": str(nri_dir),
                    "/var/lib/koordlet": str(tmp / "koordlet-state"),
                    "/var/lib/kubelet": str(kubelet.state_dir)},
        args={"--addr": f"127.0.0.1:{ports.koordlet_metrics}", "--kubelet-port": str(kubelet.port),
              "--companion-address": f"koord-companion.{NAMESPACE}.svc:{ports.companion_grpc}",
              # What koord-runtime-proxy dials, as the host sees the socket (the container's /var/run/koordlet).
              "--runtime-hooks-host-endpoint": str(run_koordlet / "koordlet.sock")},
        extra_args=[f"--cgroup-kube-parent={kubelet.prefix}", *extra_args],
        ports={9316: ports.koordlet_metrics}, read_only=() if read_only_cgroup is None else ("/host-cgroup",))


def start_deployed(*, objects: Sequence[Mapping[str, Any]], apiserver: FakeApiServer, kubelet: KubeletDriver,
                   node_name: str, companion: NodeOverlay, koordlet: NodeOverlay, log_dir: Path,
                   started: Callable[[PodComponent], PodComponent]) -> DeployedComponents:
    """The companion's pod, then (once it made the Secret the koordlet pod mounts) the koordlet's.  ``started``
    registers each component with the node (its stop at teardown)."""
    companion_pod = companion.apply(pod_of(find(objects, "Deployment", "koord-companion"), node_name, "0"))
    koordlet_pod = koordlet.apply(pod_of(find(objects, "DaemonSet", "koordlet"), node_name, node_name))
    for path in koordlet.host_paths.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    run_companion = started(PodComponent("koord-companion", kubelet, apiserver, companion_pod, log_dir))
    wait_until("the companion's serving Secret koord-companion-tls", timeout=START_SECONDS,
               check=lambda: apiserver.get("secrets", "koord-companion-tls", NAMESPACE) is not None)
    run_koordlet = started(PodComponent("koordlet", kubelet, apiserver, koordlet_pod, log_dir))
    debug_socket = Path(koordlet.host_paths["/var/run/koordlet"]) / "debug.sock"
    return DeployedComponents(companion=run_companion, koordlet=run_koordlet, debug_socket=debug_socket,
                              overlays={"koord-companion": list(companion.made), "koordlet": list(koordlet.made)})



@dataclass(frozen=True)
class DeployedImage:
    """The product's image: its name (``localhost/koordlet:<version>``) and the OCI archive it was exported to;
    for tests of a broken deployment, the RBAC objects the apiserver enforces instead of the rendered ones, and
    koordlet's host cgroup mount made read-only (recursively, as :func:`recursive_read_only` says)."""

    name: str
    archive: Path
    rbac: tuple[dict[str, Any], ...] | None = None
    read_only_cgroup: bool = False


def deployed_kubelet_options(apiserver: FakeApiServer) -> dict[str, Any]:
    """What the kubelet driver needs to run the shipped pods: the apiserver (Secrets, ConfigMaps, tokens, the
    kube-api-access volume), the cluster DNS stand-in for the companion's Service, and kubelet's restart back-off."""
    return {"apiserver": apiserver, "cluster_hosts": {f"koord-companion.{NAMESPACE}.svc": "127.0.0.1"},
            "restart_backoff_seconds": KUBELET_BACKOFF_SECONDS}


def deploy(image: DeployedImage, *, tmp: Path, stack: contextlib.ExitStack, apiserver: FakeApiServer,
           kubelet: KubeletDriver, containerd: Any, variant: str, node_name: str, keep_logs: Path | None,
           ports: Ports, koordlet_args: Sequence[str],
           started: Callable[[PodComponent], PodComponent]) -> DeployedComponents:
    """The image loaded into the node's containerd, the rendered cluster objects stored, then both pods."""
    from tests.e2e.deployed import render

    containerd.import_image(image.archive)
    kubelet.server.set_authenticator(kubelet_authenticator(apiserver, node_name))
    objects = render(image.name, tmp / "manifests")
    seed_cluster(apiserver, objects)
    if image.rbac is not None:
        apiserver.set_rbac(list(image.rbac))
    host_sys = stack.enter_context(shared_sys(tmp / "host" / "sys"))
    host_cgroup = None
    if image.read_only_cgroup:
        host_cgroup = stack.enter_context(recursive_read_only(tmp / "host" / "cgroup-ro", "/sys/fs/cgroup"))
    nri_dir = containerd.nri_socket.parent if variant == "nri" else tmp / "host" / "var-run-nri"
    deployed = start_deployed(
        objects=objects, apiserver=apiserver, kubelet=kubelet, node_name=node_name, log_dir=tmp / "logs",
        companion=companion_overlay(ports),
        koordlet=koordlet_overlay(tmp=tmp, ports=ports, kubelet=kubelet, nri_dir=nri_dir,
                                  host_sys=host_sys, extra_args=koordlet_args, read_only_cgroup=host_cgroup),
        started=started)
    if keep_logs is not None:  # runs before the pods go (callbacks run in reverse)
        for component in (deployed.companion, deployed.koordlet):
            stack.callback(component.copy_logs, keep_logs)
    return deployed


def kubelet_authenticator(apiserver: FakeApiServer, node_name: str) -> Callable[[str | None, str], Any]:
    """kubelet's webhook authentication and authorization (``authentication.webhook.enabled``, ``authorization.mode:
    Webhook``): the bearer token reviewed by the apiserver, then each ``nodes`` subresource the path maps to asked
    of its RBAC until one is allowed; refusals carry kubelet's own texts."""
    def check(header: str | None, path: str) -> tuple[int, str] | None:
        subresources = kubelet_subresources(path.partition("?")[0])
        for sub in subresources:
            refused = apiserver.review_and_authorize(header, RbacAttributes(
                "get", resource="nodes", subresource=sub, name=node_name))
            if refused is None or refused[0] == 401:
                return refused
        user = refused[1].partition('User "')[2].partition('"')[0] if refused else ""
        return 403, f"Forbidden (user={user}, verb=get, resource=nodes, subresource={subresources[0]})"
    return check
