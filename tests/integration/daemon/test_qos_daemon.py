"""The assembled agent enforces the NodeSLO of its local file on real cgroups, keeps the last good one
when the file turns invalid, and recovers BE when suppression is switched off."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

from prometheus_client import generate_latest

from koordlet import native
from koordlet.config import load
from koordlet.daemon.agent import build_agent
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from tests.fixtures.agentrun import running
from tests.fixtures.isolation import private_settings, write_config
from tests.fixtures.realcgroup import RealCgroups
from tests.fixtures.waiting import wait_until

BUSY = "while True: pass"
SLEEP = "import signal; signal.pause()"



def test_local_nodeslo_drives_suppress_and_bad_file_keeps_last_good(real_cgroups: RealCgroups,
                                                                     tmp_path: Path) -> None:
    prefix = real_cgroups.name
    ls_dir = f"kubepods/burstable/pod{secrets.token_hex(4)}-0000-4000-8000-000000000001/{secrets.token_hex(32)}"
    be_dir = f"kubepods/besteffort/pod{secrets.token_hex(4)}-0000-4000-8000-000000000002/{secrets.token_hex(32)}"
    for rel in (ls_dir, be_dir):
        real_cgroups.mkdir(rel)
    real_cgroups.spawn(ls_dir, BUSY)
    real_cgroups.spawn(be_dir, SLEEP)

    def be_quota() -> int:
        return real_cgroups.cpu_quota("kubepods/besteffort")[0]

    nodeslo = tmp_path / "nodeslo.yaml"
    nodeslo.write_text("kind: NodeSLO\nspec:\n  resourceUsedThresholdWithBE:\n"
                       "    {enable: true, cpuSuppressThresholdPercent: 65, cpuSuppressPolicy: cfsQuota}\n")
    config_file = write_config(tmp_path / "koordlet.yaml", private_settings(
        tmp_path, prefix, standalone=True, runtimeHooks={"enableServer": False, "enableNri": False},
        qos={"nodesloFile": str(nodeslo), "evictor": "dry-run"}))
    with running(build_agent(load(config_file), tmp_path / "state", read_node_info(HostPaths(), native))) as agent:
        # Two cores x 65% minus an LS busy loop leaves BE well under one core: a quota is written.
        wait_until("a BE quota on kubepods/besteffort", lambda: 0 < be_quota() <= 60_000, 15)
        suppressed = be_quota()
        # The strategy sets the gauge just after the executor wrote the quota: wait for it, not only the file.
        def exported() -> str | None:
            text = generate_latest(agent.metrics.internal).decode()
            return text if 'koordlet_be_suppress_cpu_cores{node=' in text else None

        scrape = wait_until("the suppress gauge exported", exported, 15)
        assert 'type="cfsQuota"' in scrape

        nodeslo.write_text("kind: NodeSLO\nspec:\n  resourceUsedThresholdWithBE:\n"
                           "    {enable: false, cpuSuppressThresholdPercent: 165}\n")
        wait_until("the invalid NodeSLO to be rejected", lambda: agent.qos.holder.current().rejected is not None, 5)
        state = agent.qos.holder.current()
        assert "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent" in (state.rejected or "")
        assert state.spec.resource_used_threshold_with_be.enable is True
        # Two suppress rounds decided after the rejection: the last good NodeSLO still drives them.
        rejected_at = time.time()

        def rounds_since_rejection() -> bool:
            last = agent.qos.options.decisions.last("cpusuppress")
            return last is not None and last.at > rejected_at + 1.0
        wait_until("two cpusuppress rounds after the rejection", rounds_since_rejection, 10)
        assert 0 < be_quota() <= max(suppressed * 2, 60_000)

        nodeslo.write_text("kind: NodeSLO\nspec:\n  resourceUsedThresholdWithBE: {enable: false}\n")
        wait_until("BE's quota to be recovered to -1", lambda: be_quota() == -1, 10)
        decision = agent.qos.options.decisions.last("cpusuppress")
        assert decision is not None
