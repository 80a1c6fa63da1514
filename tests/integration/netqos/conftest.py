"""Two network namespaces joined by a veth pair, made and removed by each test that asks for them.

Everything carries a unique prefix (``kq<6 hex>``): the namespaces ``kqa-<pid>-<hex>-tx``/``-rx``, the
veth ends ``kq<hex>t``/``kq<hex>r`` and the backend's own objects (``kq<hex>-`` ipsets, chain, IFB).
Addresses come from the benchmark range 198.18.0.0/15 (RFC 2544), one random /24 per run, so traffic
never leaves the two namespaces.  Processes are started with ``ip netns exec`` and stopped by PID.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import select
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fixtures.cleanup import Cleanup, kill_process

TRAFFIC = Path(__file__).with_name("traffic.py")
NETNS_DIR = Path("/run/netns")
"""Where ``ip netns`` keeps a named namespace (its bind mount)."""
READY_TIMEOUT_SECONDS = 10.0


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


@dataclass
class NetPair:
    """The sender side (``tx``, where the backend shapes) and the receiver side (``rx``)."""

    tag: str
    tx_ns: str
    rx_ns: str
    tx_if: str
    rx_if: str
    subnet: str
    """``198.18.N`` / ``198.19.N`` - the first three octets."""
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def addr(self, host: int) -> str:
        return f"{self.subnet}.{host}"

    def ns_run(self, ns: str, argv: Sequence[str]) -> str:
        done = subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise AssertionError(f"{argv} in {ns} failed: {done.stderr}")
        return done.stdout

    def start(self, ns: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, str(TRAFFIC), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.procs.append(proc)
        return proc

    def measure(self, sink_ns: str, flows: Sequence[tuple[str, str, str]], *, key: str = "peer",
                warmup: float = 0.7, measure: float = 2.5) -> dict[str, float]:
        """Runs one sender per (namespace, source, destination) in ``flows`` at once against a sink on
        every address of ``sink_ns``; returns bits per second per source (``key="peer"``) or per
        destination (``key="local"``) address, as counted by the sink."""
        port = 20000 + secrets.randbelow(20000)
        sink = self.start(sink_ns, "sink", "--addr", "0.0.0.0", "--port", str(port), "--expect", str(len(flows)),
                          "--warmup", str(warmup), "--measure", str(measure), "--key", key)
        assert sink.stdout is not None
        ready, _, _ = select.select([sink.stdout], [], [], READY_TIMEOUT_SECONDS)
        line = sink.stdout.readline() if ready else ""
        assert line.strip() == "ready", f"sink did not start within {READY_TIMEOUT_SECONDS} s"
        seconds = warmup + measure + 1.5
        senders = [self.start(ns, "send", "--src", src, "--dst", dst, "--port", str(port), "--seconds", str(seconds))
                   for ns, src, dst in flows]
        out, err = sink.communicate(timeout=seconds + READY_TIMEOUT_SECONDS)
        for proc in senders:
            proc.wait(timeout=READY_TIMEOUT_SECONDS)
        assert sink.returncode == 0, err
        return {addr: float(bps) for addr, bps in json.loads(out).items()}

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)


@pytest.fixture
def netpair() -> Iterator[NetPair]:
    hexid = secrets.token_hex(3)
    tag = f"kqa-{os.getpid()}-{hexid}"
    third = secrets.randbelow(512)
    pair = NetPair(
        tag=f"kq{hexid}", tx_ns=f"{tag}-tx", rx_ns=f"{tag}-rx", tx_if=f"kq{hexid}t", rx_if=f"kq{hexid}r",
        subnet=f"198.{18 + third // 256}.{third % 256}",
    )
    made: list[str] = []
    try:
        for ns in (pair.tx_ns, pair.rx_ns):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", pair.tx_ns, "link", "add", pair.tx_if, "type", "veth", "peer", "name", pair.rx_if,
            "netns", pair.rx_ns)
        for host in (1, 2, 3):  # .1 the node itself (SYSTEM), .2 an LS pod, .3 a BE pod
            _ip("-n", pair.tx_ns, "addr", "add", f"{pair.addr(host)}/24", "dev", pair.tx_if)
        _ip("-n", pair.rx_ns, "addr", "add", f"{pair.addr(100)}/24", "dev", pair.rx_if)
        _ip("-n", pair.tx_ns, "link", "set", pair.tx_if, "up")
        _ip("-n", pair.rx_ns, "link", "set", pair.rx_if, "up")
        yield pair
    finally:
        cleanup = Cleanup(f"network namespaces of {pair.tag}")
        for proc in pair.procs:
            cleanup.attempt(f"traffic process {proc.pid}", functools.partial(kill_process, proc))
        for ns in made:
            # Deleting the namespace takes its veth end, IFB, qdiscs, ipsets and iptables rules along.
            cleanup.attempt(f"network namespace {ns}", functools.partial(_delete_namespace, ns))
        cleanup.close()


def _delete_namespace(name: str) -> None:
    done = subprocess.run(["ip", "netns", "del", name], capture_output=True, text=True, timeout=10, check=False)
    if done.returncode != 0 or (NETNS_DIR / name).exists():
        raise RuntimeError(f"ip netns del {name} failed ({done.returncode}): {done.stderr.strip()}")
