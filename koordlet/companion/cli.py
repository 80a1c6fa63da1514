"""``koord-companion``: the cluster-side controller (NodeSLO from slo-controller-config, batch resources, the
load-aware scheduler extender, the gRPC endpoint koordlets report to).

With Kubernetes it can also serve the pod admission webhook of ClusterColocationProfiles (``--webhook-addr``)
and run the descheduler on the elected leader (``--descheduler-config``).

Kubernetes comes from ``--kube-api-server`` with ``--kube-token-file``/``--kube-ca-file``, else from the pod's
service account (in-cluster); ``--config-file`` runs it without Kubernetes from a ConfigMap YAML file.

Koordlets authenticate with their projected service-account tokens, checked by TokenReview and bound to their
node (``--auth=tokenreview``, the default with Kubernetes); a shared token (``--auth=token``) or none
(``--auth=none``) bind nobody to a node and serve only a loopback address or a unix socket unless ``--insecure``.
Exit codes: 0 after SIGTERM/SIGINT, 1 when it cannot start, 2 for bad flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from koordlet.companion.api import DEFAULT_MAX_CONCURRENT_RPCS
from koordlet.companion.auth import (
    AUTH_MODES,
    CACHE_TTL_SECONDS,
    DEFAULT_AUDIENCE,
    DEFAULT_SERVICE_ACCOUNT,
    parse_service_account,
)
from koordlet.companion.ratelimit import (
    DEFAULT_BURST,
    DEFAULT_NODE_BURST,
    DEFAULT_NODE_RATE,
    DEFAULT_RATE,
    RateLimit,
)
from koordlet.config.flags import new_parser
from koordlet.errors import KoordletError

if TYPE_CHECKING:
    from koordlet.companion.app import Companion

EXIT_OK = 0
EXIT_FAILURE = 1
SERVICE_NAME = "koord-companion"
"""The Service koordlets reach the companion through (the default DNS names of a --tls-secret certificate)."""
WEBHOOK_SECRET_NAME = "koord-companion-webhook-certs"
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}

log = logging.getLogger("koord-companion")


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("koord-companion", "Cluster-side controller for koordlet: NodeSLO from "
                        "slo-controller-config, batch resources, load-aware scheduler extender.")
    parser.add_argument("--grpc-addr", default=":9320", help="address koordlets report to and watch NodeSLO on")
    parser.add_argument("--extender-addr", default=":9321", help="kube-scheduler extender HTTP address")
    parser.add_argument("--metrics-addr", default=":9322", help="Prometheus /metrics address (empty: none); "
                        "served with koordlet's limits (16 connections, 10 s for a request, 30 s for an answer)")
    parser.add_argument("--max-concurrent-rpcs", type=int, default=DEFAULT_MAX_CONCURRENT_RPCS,
                        help="gRPC calls served at once, beyond which a call is refused with RESOURCE_EXHAUSTED "
                        "and retried by its koordlet.  Every koordlet holds one NodeSLO watch open, so keep it "
                        "above the number of nodes (default %(default)s)")
    auth = parser.add_argument_group("koordlet authentication and eviction limits")
    auth.add_argument("--auth", choices=AUTH_MODES, default="",
                      help="how koordlets authenticate: tokenreview (each koordlet's projected service-account "
                      "token, checked with TokenReview and bound to the node of its pod: a node speaks only for "
                      "itself), token (one shared --token-file; no per-node identity) or none.  Default: "
                      "tokenreview with Kubernetes, none with --config-file (token when --token-file is given).  "
                      "token and none serve only a loopback address or a unix socket unless --insecure")
    auth.add_argument("--token-audience", default=DEFAULT_AUDIENCE,
                      help="audience the koordlets' projected tokens are issued for (auth=tokenreview; "
                      "comma-separated for several; default %(default)s)")
    auth.add_argument("--koordlet-service-account", default=DEFAULT_SERVICE_ACCOUNT,
                      help="the only user allowed to call (auth=tokenreview; default %(default)s)")
    auth.add_argument("--auth-cache-seconds", type=float, default=CACHE_TTL_SECONDS,
                      help="how long an accepted token review is reused (default %(default)ss; never past the "
                      "token's expiry)")
    auth.add_argument("--token-file", default="", help="the shared bearer token koordlets must present (auth=token)")
    auth.add_argument("--insecure", action="store_true",
                      help="allow --auth=token or --auth=none on an address other hosts reach: any pod that can "
                      "reach the port may then evict pods and report metrics for every node")
    auth.add_argument("--eviction-rate", type=float, default=DEFAULT_RATE,
                      help="evictions per second across the cluster, per companion replica (0: no limit; default "
                      "%(default)s); a refused eviction is retried by its koordlet on a later round")
    auth.add_argument("--eviction-burst", type=int, default=DEFAULT_BURST,
                      help="evictions allowed at once across the cluster (default %(default)s)")
    auth.add_argument("--node-eviction-rate", type=float, default=DEFAULT_NODE_RATE,
                      help="evictions per second of one node (0: no limit; default %(default)s)")
    auth.add_argument("--node-eviction-burst", type=int, default=DEFAULT_NODE_BURST,
                      help="evictions one node may make at once (default %(default)s)")
    tls = parser.add_argument_group("TLS of the gRPC endpoint")
    tls.add_argument("--tls-cert-file", default="", help="TLS certificate of the gRPC endpoint")
    tls.add_argument("--tls-key-file", default="", help="TLS key of the gRPC endpoint")
    tls.add_argument("--tls-secret", default="", metavar="NAMESPACE/NAME",
                     help="serve with the certificate of this kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt), "
                     "creating it with a self-signed CA when absent, invalid or expiring; koordlets trust its "
                     "ca.crt (companion.caFile).  Instead of --tls-cert-file/--tls-key-file")
    tls.add_argument("--tls-dns-names", default="",
                     help="comma-separated DNS names of the certificate --tls-secret creates (default: the "
                     "koord-companion Service's names in the Secret's namespace)")
    webhook = parser.add_argument_group("pod admission webhook (ClusterColocationProfiles)")
    webhook.add_argument("--webhook-addr", default="",
                         help="HTTPS address of the webhook (/mutate-pod, /validate-pod), e.g. :9443; empty: off.  "
                         "Needs Kubernetes: it watches ClusterColocationProfiles, Namespaces and PriorityClasses")
    webhook.add_argument("--webhook-cert-dir", default="",
                         help="directory of a mounted kubernetes.io/tls Secret (tls.crt, tls.key; ca.crt is written "
                         "into the webhooks' caBundle when present), re-read when it changes.  Empty: the "
                         "--webhook-secret-name Secret, created with a self-signed CA and renewed before expiry")
    webhook.add_argument("--webhook-secret-name", default=WEBHOOK_SECRET_NAME,
                         help="the bootstrap Secret of the webhook's certificate, in --leader-elect-namespace (the "
                         "companion's namespace; default %(default)s)")
    webhook.add_argument("--webhook-service-name", default=SERVICE_NAME,
                         help="the Service kube-apiserver calls the webhook through: the certificate names "
                         "<service>.<namespace>.svc (default %(default)s)")
    webhook.add_argument("--webhook-configuration-name", default=SERVICE_NAME,
                         help="the MutatingWebhookConfiguration and ValidatingWebhookConfiguration whose caBundle the "
                         "companion keeps (default %(default)s)")
    desched = parser.add_argument_group("descheduler")
    desched.add_argument("--descheduler-config", default="",
                         help="DeschedulerConfiguration YAML file (descheduler/v1alpha2, or a ConfigMap holding "
                         "one); empty: the descheduler is off.  Runs on the elected leader only")
    desched.add_argument("--descheduler-dry-run", type=_bool, nargs="?", const=True, default=None,
                         metavar="true|false",
                         help="log the evictions instead of making them (overrides the configuration's dryRun; "
                         "absent: the configuration decides)")
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


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Flag combinations argparse cannot express (exit 2 with the usage)."""
    if args.auth == "token" and not args.token_file:
        parser.error("--auth=token needs --token-file")
    if args.token_file and args.auth not in ("", "token"):
        parser.error(f"--token-file is the shared token of --auth=token, not of --auth={args.auth}")
    if args.auth == "tokenreview" and args.config_file:
        parser.error("--auth=tokenreview needs Kubernetes, not --config-file")
    if args.tls_secret:
        namespace, _, name = args.tls_secret.partition("/")
        if not namespace or not name or "/" in name:
            parser.error(f"--tls-secret: expected NAMESPACE/NAME, got {args.tls_secret!r}")
        if args.tls_cert_file or args.tls_key_file:
            parser.error("--tls-secret and --tls-cert-file/--tls-key-file exclude each other")
        if args.config_file:
            parser.error("--tls-secret needs Kubernetes, not --config-file")
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        parser.error("--tls-cert-file and --tls-key-file go together")
    if not [a for a in args.token_audience.split(",") if a.strip()]:
        parser.error("--token-audience: empty")
    try:
        parse_service_account(args.koordlet_service_account)
    except ValueError as exc:
        parser.error(f"--koordlet-service-account: {exc}")
    for flag, rate, burst in (("eviction", args.eviction_rate, args.eviction_burst),
                              ("node-eviction", args.node_eviction_rate, args.node_eviction_burst)):
        if rate < 0:
            parser.error(f"--{flag}-rate: must be >= 0 (0: no limit), got {rate}")
        if rate > 0 and burst < 1:
            parser.error(f"--{flag}-burst: must be >= 1, got {burst}")
    if args.metrics_addr:
        from koordlet.metrics.server import parse_addr

        try:
            parse_addr(args.metrics_addr)
        except KoordletError as exc:
            parser.error(f"--metrics-addr: {exc}")
    if args.config_file and (args.webhook_addr or args.descheduler_config):
        parser.error("--webhook-addr and --descheduler-config need Kubernetes, not --config-file")
    if args.webhook_addr:
        from koordlet.companion.colocation.webhook import parse_addr

        try:
            parse_addr(args.webhook_addr)
        except KoordletError as exc:
            parser.error(f"--webhook-addr: {exc}")
    if args.descheduler_dry_run is not None and not args.descheduler_config:
        parser.error("--descheduler-dry-run needs --descheduler-config")
    if args.max_concurrent_rpcs < 1:
        parser.error(f"--max-concurrent-rpcs: must be >= 1, got {args.max_concurrent_rpcs}")
    if args.auth_cache_seconds < 0:
        parser.error(f"--auth-cache-seconds: must be >= 0, got {args.auth_cache_seconds}")


def _read(path: str) -> str | None:
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


def _host_port(addr: str) -> str:
    return addr if not addr.startswith(":") else f"0.0.0.0{addr}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check(parser, args)
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
                                                    "kubernetes": not args.config_file,
                                                    "webhook": args.webhook_addr or "off",
                                                    "descheduler": args.descheduler_config or "off"})
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
    cert_pem = key_pem = None
    if args.tls_secret and api_client is not None:  # _check refused --tls-secret with --config-file
        from koordlet.companion.certs import ensure_serving_secret

        namespace, _, name = args.tls_secret.partition("/")
        dns_names = [n.strip() for n in args.tls_dns_names.split(",") if n.strip()] or [
            SERVICE_NAME, f"{SERVICE_NAME}.{namespace}", f"{SERVICE_NAME}.{namespace}.svc",
            f"{SERVICE_NAME}.{namespace}.svc.cluster.local"]
        cert_pem, key_pem, _ca = ensure_serving_secret(api_client, namespace, name, dns_names)
    token = _read(args.token_file)
    if args.token_file and not token:
        raise KoordletError(f"--token-file {args.token_file} is empty")
    webhook = None
    if args.webhook_addr:
        from koordlet.companion.colocation.webhook import WebhookOptions

        webhook = WebhookOptions(addr=args.webhook_addr, cert_dir=args.webhook_cert_dir,
                                 namespace=args.leader_elect_namespace, secret_name=args.webhook_secret_name,
                                 service_name=args.webhook_service_name,
                                 configuration_name=args.webhook_configuration_name)
    descheduler = None
    if args.descheduler_config:
        from koordlet.companion.descheduler.config import load_config_file

        descheduler = load_config_file(args.descheduler_config)
        if args.descheduler_dry_run is not None:
            descheduler = dataclasses.replace(descheduler, dry_run=args.descheduler_dry_run)
    options = CompanionOptions(
        grpc_addr=_host_port(args.grpc_addr), extender_addr=_host_port(args.extender_addr),
        metrics_addr=args.metrics_addr, max_concurrent_rpcs=args.max_concurrent_rpcs,
        auth=args.auth, token=token, insecure=args.insecure,
        token_audiences=tuple(a.strip() for a in args.token_audience.split(",") if a.strip()),
        koordlet_service_account=args.koordlet_service_account, auth_cache_seconds=args.auth_cache_seconds,
        eviction_limit=RateLimit(args.eviction_rate, args.eviction_burst),
        node_eviction_limit=RateLimit(args.node_eviction_rate, args.node_eviction_burst),
        cert_file=args.tls_cert_file or None, key_file=args.tls_key_file or None, cert_pem=cert_pem, key_pem=key_pem,
        config_file=args.config_file,
        scheduler_args=LoadAwareArgs.load(args.scheduler_config) if args.scheduler_config else None,
        leader_elect=args.leader_elect, lease_namespace=args.leader_elect_namespace,
        lease_name=args.leader_elect_id, config_namespace=args.config_namespace, config_name=args.config_name,
        webhook=webhook, descheduler=descheduler)
    # The metrics server starts and stops with the companion (Companion.start/stop).
    return Companion(options, api_client)


if __name__ == "__main__":
    sys.exit(main())
