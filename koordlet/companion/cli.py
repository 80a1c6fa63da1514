"""``koord-companion``: the cluster-side controller (NodeSLO from slo-controller-config, batch resources, the
load-aware scheduler extender, the gRPC endpoint koordlets report to).

Kubernetes comes from ``--kube-api-server`` with ``--kube-token-file``/``--kube-ca-file``, else from the pod's
service account (in-cluster); ``--config-file`` runs it without Kubernetes from a ConfigMap YAML file.
Exit codes: 0 after SIGTERM/SIGINT, 1 when it cannot start, 2 for bad flags.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from koordlet.cli.common import add_version_flag
from koordlet.errors import KoordletError

if TYPE_CHECKING:
    from koordlet.companion.app import Companion

EXIT_OK = 0
EXIT_FAILURE = 1
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}

log = logging.getLogger("koord-companion")


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="koord-companion",
        description="Cluster-side controller for koordlet: NodeSLO from slo-controller-config, batch "
        "resources, load-aware scheduler extender.",
    )
    add_version_flag(parser, "koord-companion")
    parser.add_argument("--grpc-addr", default=":9320", help="address koordlets report to and watch NodeSLO on")
    parser.add_argument("--extender-addr", default=":9321", help="kube-scheduler extender HTTP address")
    parser.add_argument("--metrics-addr", default=":9322", help="Prometheus /metrics address (empty: none)")
    parser.add_argument("--token-file", default="", help="bearer token koordlets must present (empty: none)")
    parser.add_argument("--tls-cert-file", default="", help="TLS certificate of the gRPC endpoint")
    parser.add_argument("--tls-key-file", default="", help="TLS key of the gRPC endpoint")
    parser.add_argument("--scheduler-config", default="", help="koord-scheduler config (or LoadAwareSchedulingArgs) "
                        "whose load-aware arguments the extender uses (empty: Koordinator's defaults)")
    parser.add_argument("--config-file", default="", help="slo-controller-config ConfigMap YAML: run without "
                        "Kubernetes")
    parser.add_argument("--kube-api-server", default="", help="kube-apiserver URL (empty: in-cluster)")
    parser.add_argument("--kube-token-file", default="", help="bearer token for kube-apiserver")
    parser.add_argument("--kube-ca-file", default="", help="CA of kube-apiserver")
    parser.add_argument("--leader-elect", type=_bool, default=True, metavar="true|false")
    parser.add_argument("--leader-elect-namespace", default="koordinator-system")
    parser.add_argument("--leader-elect-id", default="koord-companion", help="name of the leader-election Lease")
    parser.add_argument("--config-namespace", default="koordinator-system")
    parser.add_argument("--config-name", default="slo-controller-config")
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    return parser


def _read(path: str) -> str | None:
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


def _host_port(addr: str) -> str:
    return addr if not addr.startswith(":") else f"0.0.0.0{addr}"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from koordlet.log import setup_logging

    setup_logging(args.log_level, args.log_format)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        try:
            companion = _build(args)
            companion.start()
        except (KoordletError, OSError, ValueError) as exc:
            log.error("cannot start", extra={"error": str(exc)})
            return EXIT_FAILURE
        log.info("koord-companion started", extra={"grpc": args.grpc_addr, "extender": args.extender_addr,
                                                    "kubernetes": not args.config_file})
        received = signal.sigwait(STOP_SIGNALS)
        log.info("stopping", extra={"signal": signal.Signals(received).name})
        companion.stop()
        return EXIT_OK
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _build(args: argparse.Namespace) -> Companion:
    from koordlet.companion.app import Companion, CompanionOptions
    from koordlet.companion.extender import LoadAwareArgs

    api_client = None
    if not args.config_file:
        from koordlet.companion import kube

        if not args.kube_api_server and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise KoordletError("not in a cluster (KUBERNETES_SERVICE_HOST is unset): pass --kube-api-server, or "
                                "--config-file to run without Kubernetes")

        api_client = (kube.make_api_client(args.kube_api_server, args.kube_token_file or None,
                                           args.kube_ca_file or None)
                      if args.kube_api_server else kube.make_in_cluster_client())
    options = CompanionOptions(
        grpc_addr=_host_port(args.grpc_addr), extender_addr=_host_port(args.extender_addr),
        token=_read(args.token_file), cert_file=args.tls_cert_file or None, key_file=args.tls_key_file or None,
        config_file=args.config_file,
        scheduler_args=LoadAwareArgs.load(args.scheduler_config) if args.scheduler_config else None,
        leader_elect=args.leader_elect, lease_namespace=args.leader_elect_namespace,
        lease_name=args.leader_elect_id, config_namespace=args.config_namespace, config_name=args.config_name)
    companion = Companion(options, api_client)
    if args.metrics_addr:
        from prometheus_client import start_http_server

        host, _, port = _host_port(args.metrics_addr).rpartition(":")
        start_http_server(int(port), addr=host)
    return companion


if __name__ == "__main__":
    sys.exit(main())
