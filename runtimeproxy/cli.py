"""``koord-runtime-proxy``: command line of the CRI proxy (flags as in Koordinator's koord-runtime-proxy,
plus where the hook-server registrations and the checkpoint live).

Exit codes: 0 after a stop by SIGTERM/SIGINT, 1 when the proxy cannot start (socket in use by something
else, backend mode not supported), 2 for bad flags (argparse).
"""

from __future__ import annotations

import argparse
import gc
import logging
import re
import signal
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING

from runtimeproxy import corepolling
from runtimeproxy.skipping import ANY_NAMESPACE, DEFAULT_SKIP_NAMESPACES

if TYPE_CHECKING:
    from runtimeproxy.server import ProxyOptions

# Nothing above imports grpc: main() configures gRPC core first (runtimeproxy.corepolling), then imports the
# proxy.

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
EXIT_OK = 0
EXIT_FAILURE = 1
DISTRIBUTION = "koordlet"

log = logging.getLogger("runtimeproxy")

_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is a field.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class FieldsFormatter(logging.Formatter):
    """The log line, then each ``extra=`` field as ``key=value``: log calls keep a constant message and pass
    their values as fields (the proxy must not import koordlet's own formatter)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's method name)
        fields = "".join(f" {key}={value}" for key, value in vars(record).items() if key not in _RECORD_ATTRS)
        return super().formatMessage(record) + fields


def version() -> str:
    """The installed distribution's version (the proxy must not import koordlet to learn it)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _seconds(text: str) -> float:
    value = float(text[:-1] if text.endswith("s") else text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def _namespaces(text: str) -> frozenset[str]:
    """A comma-separated list of namespace names (DNS-1123 labels) or ``*``; empty: none."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name != ANY_NAMESPACE and not (len(name) <= 63 and _NAMESPACE.fullmatch(name))]
    if bad:
        raise argparse.ArgumentTypeError(f"not namespace names (DNS-1123 labels) or {ANY_NAMESPACE!r}: "
                                         f"{', '.join(map(repr, bad))}")
    return frozenset(names)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="koord-runtime-proxy",
        description="CRI proxy between kubelet and the container runtime that calls koordlet's runtime hooks "
        "around the calls that shape resources; every other call passes through unchanged.",
    )
    parser.add_argument("--version", action="version", version=f"koord-runtime-proxy {version()}")
    parser.add_argument("--koord-runtimeproxy-endpoint", metavar="SOCKET",
                        default="/var/run/koord-runtimeproxy/runtimeproxy.sock",
                        help="unix socket the proxy serves CRI on; point kubelet's --container-runtime-endpoint here")
    parser.add_argument("--remote-runtime-service-endpoint", metavar="SOCKET",
                        default="/var/run/containerd/containerd.sock",
                        help="the real container runtime's CRI socket")
    parser.add_argument("--remote-image-service-endpoint", metavar="SOCKET",
                        default="/var/run/containerd/containerd.sock",
                        help="the real image service's CRI socket")
    parser.add_argument("--backend-runtime-mode", choices=("Containerd", "Docker"), default="Containerd",
                        help="kind of the backend runtime (Docker is not supported: dockershim is gone)")
    parser.add_argument("--runtime-hook-server-key", metavar="KEY",
                        default="runtimeproxy.koordinator.sh/skip-hookserver",
                        help="pod label/annotation key that makes the proxy skip the hook servers for that pod "
                        "(honoured only in --skip-hookserver-namespaces)")
    parser.add_argument("--runtime-hook-server-val", metavar="VALUE", default="true",
                        help="value of --runtime-hook-server-key that skips the hook servers")
    parser.add_argument("--skip-hookserver-namespaces", metavar="NS[,NS...]", type=_namespaces,
                        default=",".join(sorted(DEFAULT_SKIP_NAMESPACES)),
                        help="namespaces whose pods may skip the hook servers with --runtime-hook-server-key: a pod "
                        "names its own labels, so anywhere else the key is ignored (logged once per pod) and the "
                        "pod is hooked like any other; koordlet's own namespace belongs here, its pod must start "
                        "without koordlet. '*': every namespace (Koordinator's behaviour); empty: none "
                        "(default: %(default)s)")
    parser.add_argument("--runtime-hook-config-dir", metavar="DIR", default="/etc/runtime/hookserver.d",
                        help="directory of hook-server registrations (*.json), watched for changes")
    parser.add_argument("--checkpoint-path", metavar="FILE",
                        default="/var/lib/koord-runtime-proxy/checkpoint.json",
                        help="pod and container info kept across restarts (empty: memory only)")
    parser.add_argument("--runtime-hook-timeout", metavar="SECONDS", type=_seconds, default=5.0,
                        help="deadline of one hook call; a late hook counts as failed")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    return parser


def options_from(args: argparse.Namespace) -> ProxyOptions:
    from runtimeproxy.server import ProxyOptions

    return ProxyOptions(
        endpoint=args.koord_runtimeproxy_endpoint,
        runtime_endpoint=args.remote_runtime_service_endpoint,
        image_endpoint=args.remote_image_service_endpoint,
        backend_mode=args.backend_runtime_mode,
        skip=(args.runtime_hook_server_key, args.runtime_hook_server_val),
        skip_namespaces=args.skip_hookserver_namespaces,
        hook_config_dir=args.runtime_hook_config_dir,
        checkpoint_path=args.checkpoint_path or None,
        hook_timeout_seconds=args.runtime_hook_timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    corepolling.configure()
    from runtimeproxy.server import Proxy, ProxyError

    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FieldsFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    # Blocked before any thread exists, so every thread inherits the mask and the stop signals are taken
    # only by sigwait below: no Python signal handler runs in the middle of a lock the main thread holds.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        try:
            proxy = Proxy(options_from(args))
            proxy.start()
        except ProxyError as exc:
            log.error("cannot start", extra={"error": str(exc)})
            return EXIT_FAILURE
        log.info("koord-runtime-proxy serving", extra={"version": version(),
                                                       "endpoint": args.koord_runtimeproxy_endpoint,
                                                       "backend": args.remote_runtime_service_endpoint})
        if ANY_NAMESPACE in args.skip_hookserver_namespaces:
            log.warning("a pod of any namespace can bypass the hook servers with its own skip label",
                        extra={"skip_hookserver_namespaces": ANY_NAMESPACE, "label": args.runtime_hook_server_key})
        # What start-up built lives as long as the process: keep it out of the cyclic collector's full
        # scans, which otherwise pause a CRI call now and then (the tail of the proxy's latency).
        gc.freeze()
        received = signal.sigwait(STOP_SIGNALS)
        log.info("stopping", extra={"signal": signal.Signals(received).name})
        proxy.stop()
        log.info("koord-runtime-proxy stopped")
        return EXIT_OK
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


if __name__ == "__main__":
    sys.exit(main())
