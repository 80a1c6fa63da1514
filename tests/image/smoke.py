"""Run the built image's commands in a real runtime: a private containerd 1.6 (tests/fixtures/containerd.py).

The OCI archive is imported with ``ctr images import`` and each check is one ``ctr run --rm`` of the image:

- ``koordlet --version`` prints the package's version;
- ``koordctl doctor --json`` with the host's cgroup tree and /sys bind-mounted read-only at /host-cgroup and
  /host-sys, privileged, as the DaemonSet runs it (``--cgroup-root-dir=/host-cgroup --sys-root-dir=/host-sys``):
  the version, and the cgroup_mode probe's answer, which must be the one the host's own doctor gives for
  /sys/fs/cgroup, read through /host-cgroup;
- ``koord-companion --help`` and ``koord-runtime-proxy --help``: the four console scripts are on PATH;
- as the companion's Deployment runs it (uid/gid 65532, read-only root filesystem, no new privileges; ctr 1.6 has
  no --user, so util-linux's setpriv drops to the uid inside the container): the companion's modules and the
  Kubernetes client import, each from bytecode already in the image, and ``koord-companion --help`` runs.

Containers go below the containerd instance's own cgroup prefix and runc root; the instance removes everything it
made on exit.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.fixtures.containerd import K8S_NAMESPACE, Containerd

COMPANION_UID = 65532
RUN_TIMEOUT_SECONDS = 300
HOST_CGROUP, CONTAINER_CGROUP = "/sys/fs/cgroup", "/host-cgroup"
# Run as the companion user: every module under /opt/koordlet that importing the companion loads must come with
# valid bytecode in the image (hash-based, matching its source: used as is, never recompiled at run time), and the
# root filesystem must refuse writes (EROFS even in the world-writable /tmp).
BYTECODE_CHECK = f"""
import errno, importlib.util, os, sys
import koordlet.companion.app, koordlet.companion.cli, kubernetes.client
assert os.getuid() == os.geteuid() == {COMPANION_UID}, (os.getuid(), os.geteuid())
assert sys.dont_write_bytecode, "PYTHONDONTWRITEBYTECODE is not set in the image"
loaded = [m for m in list(sys.modules.values())
          if (getattr(m, "__file__", None) or "").startswith("/opt/koordlet/") and m.__file__.endswith(".py")
          and getattr(m, "__spec__", None) is not None and m.__spec__.cached]
stale = []
for module in loaded:
    try:
        with open(module.__spec__.cached, "rb") as pyc:
            header = pyc.read(16)
    except OSError:
        stale.append(module.__name__ + " (no .pyc)")
        continue
    with open(module.__file__, "rb") as source:
        expected = importlib.util.source_hash(source.read())
    if not int.from_bytes(header[4:8], "little") & 1 or header[8:16] != expected:
        stale.append(module.__name__)
assert not stale, f"modules without valid bytecode in the image: {{stale[:20]}}"
try:
    open("/tmp/koordlet-probe", "w")
except OSError as error:
    assert error.errno == errno.EROFS, error
    print(f"root filesystem read-only for uid {{os.getuid()}}: {{error.strerror}}")
else:
    raise AssertionError("uid {COMPANION_UID} could write /tmp: the root filesystem is not read-only")
print(f"{{len(loaded)}} modules from /opt/koordlet imported from their bytecode")
"""


class SmokeFailed(AssertionError):
    """A command in the image failed or printed something other than expected; the message has its output."""


class ImageRunner:
    """``ctr run --rm`` of one image in a private containerd, below that containerd's cgroup prefix."""

    def __init__(self, containerd: Containerd, image: str) -> None:
        self.containerd = containerd
        self.image = image

    def run(self, label: str, argv: Sequence[str], *, options: Sequence[str] = ()) -> str:
        name = f"koordlet-smoke-{label}-{secrets.token_hex(3)}"
        cgroup = f"/{self.containerd.cgroup_prefix}/{name}"
        self.containerd.track_cgroup_parent(cgroup)  # removed with the instance's prefix on exit
        command = [
            str(self.containerd.ctr_binary), "-a", str(self.containerd.socket), "-n", K8S_NAMESPACE,
            "run", "--rm", "--runc-root", str(self.containerd.tmp / "runc"), "--cgroup", cgroup,
            *options, self.image, name, *argv,
        ]
        shown = " ".join("<script>" if "\n" in arg else arg for arg in argv)
        print(f"[smoke] {label}: {shown}", flush=True)
        result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS, check=False)
        output = result.stdout + result.stderr
        if result.returncode != 0:
            raise SmokeFailed(f"{label}: `{shown}` exited {result.returncode} in the image:\n{output[-4000:]}")
        return result.stdout


def _expect(condition: bool, label: str, what: str, output: str) -> None:
    if not condition:
        raise SmokeFailed(f"{label}: expected {what}; the command printed:\n{output[-4000:]}")


def host_cgroup_mode() -> dict[str, object]:
    """The host's own doctor answer for cgroup_mode (this environment's koordctl, on /sys/fs/cgroup)."""
    result = subprocess.run(
        [sys.executable, "-m", "koordlet.cli.koordctl", "doctor", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return next(p for p in json.loads(result.stdout)["probes"] if p["name"] == "cgroup_mode")


def check_version(runner: ImageRunner, version: str) -> None:
    out = runner.run("version", ["koordlet", "--version"])
    _expect(out.strip() == f"koordlet {version}", "koordlet --version", f"'koordlet {version}'", out)
    print(f"[smoke]   {out.strip()}")


def check_doctor(runner: ImageRunner, version: str) -> None:
    mounts = [
        "--mount", f"type=bind,src={HOST_CGROUP},dst={CONTAINER_CGROUP},options=rbind:ro",
        "--mount", "type=bind,src=/sys,dst=/host-sys,options=rbind:ro",
    ]
    argv = ["koordctl", "doctor", "--json", f"--cgroup-root-dir={CONTAINER_CGROUP}", "--sys-root-dir=/host-sys"]
    out = runner.run("doctor", argv, options=["--privileged", *mounts])
    try:
        document = json.loads(out)
    except json.JSONDecodeError as error:
        raise SmokeFailed(f"koordctl doctor --json printed no JSON ({error}):\n{out[-4000:]}") from None
    _expect(document.get("version") == version, "koordctl doctor", f"version {version}", out)
    probes = {probe["name"]: probe for probe in document.get("probes", [])}
    _expect("cgroup_mode" in probes, "koordctl doctor", "a cgroup_mode probe", out)
    host = host_cgroup_mode()
    expected_reason = str(host["reason"]).replace(HOST_CGROUP, CONTAINER_CGROUP)
    inside = probes["cgroup_mode"]
    _expect(
        inside["supported"] == host["supported"] and inside["reason"] == expected_reason,
        "koordctl doctor",
        f"cgroup_mode as the host sees it, read through {CONTAINER_CGROUP}: {expected_reason!r}",
        out,
    )
    summary = document["summary"]
    print(f"[smoke]   cgroup_mode: {inside['reason']}")
    print(f"[smoke]   {summary['supported']} probes supported, {summary['unsupported']} unsupported")


def check_help(runner: ImageRunner, script: str) -> None:
    out = runner.run(script, [script, "--help"])
    _expect(out.startswith(f"usage: {script}"), f"{script} --help", f"'usage: {script} ...'", out)


def check_companion_user(runner: ImageRunner) -> None:
    drop = ["setpriv", f"--reuid={COMPANION_UID}", f"--regid={COMPANION_UID}", "--clear-groups", "--no-new-privs"]
    out = runner.run("uid-65532", [*drop, "python3", "-c", BYTECODE_CHECK], options=["--read-only"])
    report = "imported from their bytecode" in out and "read-only" in out
    _expect(report, "uid 65532", "the bytecode check's report", out)
    print(f"[smoke]   {out.strip()}")
    out = runner.run("uid-65532-help", [*drop, "koord-companion", "--help"], options=["--read-only"])
    _expect(out.startswith("usage: koord-companion"), "koord-companion --help as 65532", "its usage", out)


def smoke(archive: Path, image: str, version: str) -> None:
    """Every check, in one private containerd; raises :class:`SmokeFailed` naming the first that fails."""
    with Containerd(image=False) as containerd:
        containerd.import_image(archive)
        listed = subprocess.run(
            [str(containerd.ctr_binary), "-a", str(containerd.socket), "-n", K8S_NAMESPACE, "images", "ls", "-q"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.split()
        _expect(image in listed, "ctr images import", f"{image} among the imported images", "\n".join(listed))
        runner = ImageRunner(containerd, image)
        check_version(runner, version)
        check_doctor(runner, version)
        for script in ("koord-companion", "koord-runtime-proxy", "koordctl"):
            check_help(runner, script)
        check_companion_user(runner)
    print("[smoke] all checks passed", flush=True)
