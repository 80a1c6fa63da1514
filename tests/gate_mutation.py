"""Every implemented feature gate has a test that fails when its code is removed (issue 21's acceptance).

``python -m tests.gate_mutation [GATE ...]`` from the repository root, for every gate of
:data:`koordlet.config.gates.GATES` not in ``NOT_IMPLEMENTED`` (or the gates named): runs the gate's tests
(:data:`GATE_TESTS`) in a pytest subprocess with ``tests/gate_mutation_plugin.py`` making
``gates.enabled`` answer False for that gate - the gate's code removed - and prints per gate the tests run,
the ones failing and one failing test id.  Before that it runs all the chosen subsets once unmutated: they
must pass, or a failure under the mutation proves nothing.  Exits non-zero when a subset fails unmutated or
a gate has no failing test under its mutation.

Run by the tox ``tests`` env after the suite, so a gate whose code a later change can drop without a test
noticing fails CI.  It reruns subsets of the suite 26 times (once unmutated, then once per implemented gate),
about 4 minutes on 2 cores.  The subsets are unit and security tests only: integration and
e2e tests start koordlet processes, which the mutation (made in the pytest process) does not reach.
tests/unit/config/test_gates.py tests the table itself and is left out.  The two gates read only where the
agent is assembled (NodeTopologyReport, NodeMetricPromMetrics) are proved by the in-process agent of
tests/unit/daemon/test_gate_wiring.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from koordlet.config import gates
from tests.gate_mutation_plugin import GATE_ENV, REPORT_ENV

REPO_ROOT = Path(__file__).resolve().parent.parent
UNIT = "tests/unit"
QOS = f"{UNIT}/qosmanager"
HOOKS = f"{UNIT}/runtimehooks/hooks"
EVICT = [f"{QOS}/evict", f"{QOS}/test_workloadevict.py", "tests/security/test_eviction_limits.py"]

GATE_TESTS: dict[str, list[str]] = {
    gates.BE_CPU_SUPPRESS: [f"{QOS}/cpusuppress"],
    gates.CPU_BURST: [f"{QOS}/cpuburst"],
    gates.RDT_RESCTRL: [f"{HOOKS}/test_resctrl_hook.py", f"{QOS}/resctrl"],
    gates.NODE_TOPOLOGY_REPORT: [f"{UNIT}/daemon/test_gate_wiring.py"],
    gates.GROUP_IDENTITY: [f"{HOOKS}/test_groupidentity.py", f"{HOOKS}/test_groupidentity_kubeqos.py",
                           f"{UNIT}/runtimehooks/test_hostapps.py"],
    gates.CPU_SET_ALLOCATOR: [f"{HOOKS}/test_cpuset.py", f"{HOOKS}/test_registry.py",
                              f"{UNIT}/runtimehooks/test_hostapps.py", f"{UNIT}/runtimehooks/test_reconciler.py"],
    gates.BATCH_RESOURCE: [f"{HOOKS}/test_batchresource.py", f"{HOOKS}/test_registry.py",
                           f"{UNIT}/runtimehooks/test_reconciler.py"],
    gates.BE_CPU_EVICT: EVICT,
    gates.CPU_EVICT: EVICT,
    gates.CPU_ALLOCATABLE_EVICT: EVICT,
    gates.BE_MEMORY_EVICT: EVICT,
    gates.MEMORY_EVICT: EVICT,
    gates.MEMORY_ALLOCATABLE_EVICT: EVICT,
    gates.SYSTEM_CONFIG: [f"{QOS}/sysreconcile"],
    gates.CGROUP_RECONCILE: [f"{QOS}/cgreconcile"],
    gates.BLKIO_RECONCILE: [f"{QOS}/blkio"],
    gates.CPI_COLLECTOR: [f"{UNIT}/metricsadvisor/test_cpi.py"],
    gates.PSI_COLLECTOR: [f"{UNIT}/metricsadvisor/test_psi.py", f"{UNIT}/metricsadvisor/test_advisor.py"],
    gates.NODE_METRIC_PROM_METRICS: [f"{UNIT}/daemon/test_gate_wiring.py"],
    gates.CPU_NORMALIZATION: [f"{HOOKS}/test_cpunormalization.py", f"{HOOKS}/test_registry.py"],
    gates.CORE_SCHED: [f"{QOS}/coresched", f"{HOOKS}/test_coresched_hook.py"],
    gates.TERWAY_QOS: [f"{QOS}/netqos", f"{HOOKS}/test_tc_hook.py"],
    gates.TC_NETWORK_QOS: [f"{QOS}/netqos", f"{HOOKS}/test_tc_hook.py"],
    gates.RESCTRL: [f"{HOOKS}/test_resctrl_hook.py", f"{QOS}/resctrl"],
    gates.OOM_SCORE_ADJ: [f"{HOOKS}/test_oomscoreadj.py", f"{HOOKS}/test_registry.py"],
}
"""Per implemented gate, the tests of the behaviour it switches (paths or node ids, from the repository root)."""


def implemented() -> list[str]:
    return [name for name in gates.GATES if gates.implemented(name)]


def run(paths: Sequence[str], gate: str) -> tuple[int, list[str], int]:
    """pytest on ``paths`` with ``gate`` mutated ("" for none): (tests run, failing test ids, exit code)."""
    with tempfile.TemporaryDirectory(prefix="gate-mutation-") as tmp:
        report = Path(tmp) / "report.json"
        env = {**os.environ, GATE_ENV: gate, REPORT_ENV: str(report)}
        # -p no:cacheprovider: a mutated run must not leave lastfailed behind for the developer's next run.
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.gate_mutation_plugin",
               *paths]
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, check=False)
        if not report.exists():  # pytest stopped before the session ended (a usage or collection error)
            print(proc.stdout[-3000:], file=sys.stderr)
            return 0, [], proc.returncode
        data = json.loads(report.read_text(encoding="utf-8"))
        return len(data["ran"]), data["failed"], proc.returncode


def main(argv: Sequence[str]) -> int:
    names = list(argv) or implemented()
    missing = [name for name in names if name not in GATE_TESTS]
    if missing:
        print(f"no tests listed for gate(s) {', '.join(missing)} (implemented: {', '.join(implemented())})")
        return 2
    # Unmutated first, once over the union of the subsets: a test failing already would count for every gate.
    union = sorted({path for name in names for path in GATE_TESTS[name]})
    ran, failed, _ = run(union, "")
    print(f"unmutated: {ran} tests, {len(failed)} failing{': ' + failed[0] if failed else ''}")
    if failed or not ran:
        return 1
    bad = []
    print(f"{'gate':<24} {'run':>5} {'failing':>7}  example failing test")
    for name in names:
        ran, failed, _ = run(GATE_TESTS[name], name)
        print(f"{name:<24} {ran:>5} {len(failed):>7}  {failed[0] if failed else '-'}", flush=True)
        if not failed:
            bad.append(name)
    if bad:
        print(f"no test fails with the code of gate(s) {', '.join(bad)} removed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
