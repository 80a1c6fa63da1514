"""TCP traffic for the network QoS tests, run inside a namespace with ``ip netns exec``.

``sink``: accepts ``--expect`` connections, then counts the bytes each peer address delivers during a
window that opens ``--warmup`` seconds after the last accept and lasts ``--measure`` seconds; prints
``ready`` once listening and finally one JSON object ``{address: bits_per_second}``, the address being
the peer's or (``--key local``) the one it connected to.
``send``: connects from ``--src`` to ``--dst`` and writes as fast as TCP allows for ``--seconds``.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

CHUNK = 256 * 1024


def sink(args: argparse.Namespace) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((args.addr, args.port))
    server.listen(args.expect)
    server.settimeout(args.accept_timeout)
    print("ready", flush=True)
    conns = [server.accept() for _ in range(args.expect)]
    start = time.monotonic() + args.warmup
    end = start + args.measure
    counted: dict[str, int] = {}
    lock = threading.Lock()

    def drain(conn: socket.socket, peer: str) -> None:
        buf = bytearray(CHUNK)
        total = 0
        conn.settimeout(1.0)
        while True:
            try:
                n = conn.recv_into(buf)
            except (TimeoutError, OSError):
                n = 0 if time.monotonic() > end else -1
            if n == 0:
                break
            now = time.monotonic()
            if n > 0 and start <= now <= end:
                total += n
            if now > end:
                break
        conn.close()
        with lock:
            counted[peer] = counted.get(peer, 0) + total

    threads = [
        threading.Thread(target=drain, args=(conn, conn.getsockname()[0] if args.key == "local" else addr[0]))
        for conn, addr in conns
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({peer: n * 8 / args.measure for peer, n in counted.items()}), flush=True)


def send(args: argparse.Namespace) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((args.src, 0))
    sock.connect((args.dst, args.port))
    payload = b"\0" * CHUNK
    deadline = time.monotonic() + args.seconds
    try:
        while time.monotonic() < deadline:
            sock.send(payload)
    except OSError:
        pass  # the sink closed after its window
    sock.close()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("sink")
    s.add_argument("--addr", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--expect", type=int, required=True)
    s.add_argument("--warmup", type=float, default=0.7)
    s.add_argument("--measure", type=float, default=2.5)
    s.add_argument("--accept-timeout", type=float, default=10.0)
    s.add_argument("--key", choices=("peer", "local"), default="peer", help="count per peer or per local address")
    c = sub.add_parser("send")
    c.add_argument("--src", required=True)
    c.add_argument("--dst", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    (sink if args.mode == "sink" else send)(args)


if __name__ == "__main__":
    main(sys.argv[1:])
