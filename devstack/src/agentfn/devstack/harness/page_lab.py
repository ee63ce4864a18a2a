"""The page fetcher's test lab: a network namespace of its own, with a "public" web at global-looking
addresses, internal targets that record every hit, and a DNS server (dnslib) for the test names.

Run as root: `python -m agentfn.devstack.harness.page_lab --dir DIR [--forward PORT ...]`, or `launch` it. It
moves itself into a new network namespace (so it vanishes with this process), prints one JSON line when ready, and
runs until its stdin closes. Other processes join it with `nsenter --net=/proc/PID/ns/net`.

`--forward PORT` makes host 127.0.0.1:PORT (Postgres, the token issuer) reachable at 127.0.0.1:PORT
inside the namespace: a thread started before the move stays in the host's namespace and opens
those connections, the only way out. The guard refuses loopback, so the fetcher never reaches them.

Hits land in DIR: internal.jsonl (any line is a bypass, apart from the lab's own probes), public.jsonl
(what the fetcher sent to public servers), dns.jsonl (every query).
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import json
import os
import queue
import select
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import ThreadingHTTPServer
from pathlib import Path

from dnslib import AAAA, CNAME, QTYPE, RCODE, RR, A
from dnslib.dns import DNSError
from dnslib.server import BaseResolver, DNSServer

from agentfn.devstack.harness.ca import throwaway_ca
from agentfn.devstack.public_web import PublicWeb

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1

PUBLIC = "44.0.0.10"  # ipaddress calls 44.0.0.0/8 global: a "public" server, inside the namespace only
REBOUND = "44.0.0.11"  # where the rebinding name answers first
PUBLIC6 = "2600:44::10"
TEREDO_LOOPBACK = "2001:0:4136:e378:8000:63bf:80ff:fffe"  # Teredo, client 127.0.0.1 (stored inverted)
# Internal addresses put on the namespace's loopback, so that a bypass would really land on a recorder.
WIRESERVER = "168.63.129.16"  # Azure's platform address: public, answers only inside the cloud
INTERNAL = [
    "10.0.0.5",
    "172.16.0.5",
    "192.168.0.5",
    "100.64.0.5",
    "100.100.100.200",
    "169.254.169.254",
    "169.254.170.2",
    "198.18.0.5",
    "192.0.2.5",
    "192.0.0.170",
    "240.0.0.5",
    WIRESERVER,
    "64:ff9b::a83f:8110",
    "2002:a83f:8110::1",
    "fd00:ec2::254",
    "fc00::5",
    "fec0::5",
    "64:ff9b::7f00:1",
    "64:ff9b::a00:5",
    "64:ff9b:1:7f00:0:100::",
    "2002:7f00:1::1",
    "2002:a00:5::1",
    TEREDO_LOOPBACK,
    "::7f00:1",
    "2001:db8::5",
    "100::5",
    "3fff::5",
]
INTERNAL_PORTS = [80, 443, 8080, 8443, 22, 25, 3128, 6379, 11211, 2375, 9200]
CERT_NAMES = ["www.pub.test", "secure.pub.test", "alias.pub.test", "v6.pub.test", "dual.pub.test"]

ZONE: dict[str, list[tuple[str, str]]] = {
    "www.pub.test": [("A", PUBLIC)],
    "secure.pub.test": [("A", PUBLIC)],
    "wrongcert.pub.test": [("A", PUBLIC)],
    "v6.pub.test": [("AAAA", PUBLIC6)],
    "dual.pub.test": [("A", PUBLIC), ("AAAA", PUBLIC6)],
    "alias.pub.test": [("CNAME", "www.pub.test")],
    "noaddress.pub.test": [("TXT", "no address here")],
    "loop.evil.test": [("A", "127.0.0.1")],
    "loop6.evil.test": [("AAAA", "::1")],
    "private.evil.test": [("A", "10.0.0.5")],
    "meta.evil.test": [("A", "169.254.169.254")],
    "wireserver.evil.test": [("A", WIRESERVER)],
    "metadata.google.internal": [("A", PUBLIC)],  # a private-use name is refused whatever DNS answers
    "cgnat.evil.test": [("A", "100.64.0.5")],
    "zero.evil.test": [("A", "0.0.0.0")],
    "mixed.evil.test": [("A", PUBLIC), ("A", "127.0.0.1")],
    "mixed46.evil.test": [("A", PUBLIC), ("AAAA", "::1")],
    "mapped.evil.test": [("AAAA", "::ffff:127.0.0.1")],
    "nat64.evil.test": [("AAAA", "64:ff9b::7f00:1")],
    "sixtofour.evil.test": [("AAAA", "2002:7f00:1::1")],
    "teredo.evil.test": [("AAAA", TEREDO_LOOPBACK)],
    "ula.evil.test": [("AAAA", "fd00:ec2::254")],
    "cname.evil.test": [("CNAME", "hop1.evil.test")],
    "hop1.evil.test": [("CNAME", "hop2.pub.test")],
    "hop2.pub.test": [("CNAME", "loop.evil.test")],
    "cname-meta.evil.test": [("CNAME", "meta.evil.test")],
}
REBIND = "rebind.evil.test"  # first A answer REBOUND, every later one 127.0.0.1, TTL 0
BLACKHOLE = "blackhole.test"  # never answered
# A slow resolver: these names' answers wait this long (TTL 0, so every lookup waits); an AAAA of a name
# in SILENT_AAAA is never answered.
SLOW_SECONDS = 1.2
ZONE["slow.pub.test"] = [("A", PUBLIC), ("AAAA", PUBLIC6)]
ZONE["slow-silent.pub.test"] = [("A", PUBLIC)]
SLOW = {"slow.pub.test", "slow-silent.pub.test"}
SILENT_AAAA = {"slow-silent.pub.test"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--forward", type=int, action="append", default=[])
    args = parser.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # never outlive the test that started it
    connector = Connector() if args.forward else None  # started in the host's namespace, stays there
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed (run as root)")
    start(args.dir, args.forward, connector)
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    sys.stdin.read()  # until the test closes it


def start(directory: Path, forward: list[int], connector: Connector | None) -> None:
    """Inside the new namespace: addresses, certificates, DNS, the public web, recorders, forwards."""
    network()
    issued = throwaway_ca(directory, "agentfn page lab CA", CERT_NAMES, [PUBLIC, PUBLIC6])  # the fetcher trusts ca.pem
    for name in ("internal.jsonl", "public.jsonl", "dns.jsonl"):
        (directory / name).touch()
    Zone.serve(directory / "dns.jsonl")
    PublicWeb.hits_path = str(directory / "public.jsonl")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(issued.cert, issued.key)
    for address, port, context in [
        (PUBLIC, 80, None),
        (REBOUND, 80, None),
        (PUBLIC6, 80, None),
        (PUBLIC, 443, tls),
        (PUBLIC6, 443, tls),
    ]:
        serve_public(address, port, context)
    record_internal(directory / "internal.jsonl")
    for port in forward:
        connector.listen(port)


def network() -> None:
    commands = ["link set lo up"] + [
        f"addr add {a}/{32 if ':' not in a else 128} dev lo" for a in [PUBLIC, REBOUND, PUBLIC6, *INTERNAL]
    ]
    subprocess.run(["ip", "-batch", "-"], input="\n".join(commands) + "\n", text=True, check=True)


def _reuse(sock: socket.socket, family: int) -> None:
    # SO_REUSEPORT lets the wildcard recorders and the specific public servers share a port; the
    # kernel gives a connection to the most specific listener.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:
        _reuse(self.socket, self.address_family)
        socketserver.TCPServer.server_bind(self)  # not HTTPServer's: its getfqdn() would ask DNS
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address) -> None:
        pass  # refused handshakes and dropped connections are what the tests provoke


def serve_public(address: str, port: int, tls: ssl.SSLContext | None) -> None:
    server_class = type("Server", (_Server,), {"address_family": socket.AF_INET6 if ":" in address else socket.AF_INET})
    server = server_class((address, port), PublicWeb)
    if tls:
        server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def record_internal(path: Path) -> None:
    """Wildcard listeners on every internal port: any connection the guard let through lands here."""
    lock = threading.Lock()

    def answer(conn: socket.socket, where: tuple) -> None:
        conn.settimeout(1)
        try:
            first = conn.recv(4096).split(b"\r\n", 1)[0]
        except OSError:
            first = b""
        with lock, open(path, "a") as f:
            f.write(json.dumps({"address": where[0], "port": where[1], "request": first.decode("latin-1")}) + "\n")
        try:
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 22\r\nConnection: close"
                b"\r\n\r\n<p>internal secret</p>"
            )
        except OSError:
            pass
        conn.close()

    def accept(listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=answer, args=(conn, conn.getsockname()), daemon=True).start()

    for family, wildcard in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        for port in INTERNAL_PORTS:
            listener = socket.socket(family, socket.SOCK_STREAM)
            _reuse(listener, family)
            listener.bind((wildcard, port))
            listener.listen(64)
            threading.Thread(target=accept, args=(listener,), daemon=True).start()


class Zone(BaseResolver):
    """The test names. CNAME chains are answered whole, the way a recursive resolver answers them."""

    def __init__(self, log_path: Path):
        self.log_path, self.lock, self.rebinds = log_path, threading.Lock(), Counter()

    @classmethod
    def serve(cls, log_path: Path) -> None:
        zone = cls(log_path)
        for tcp in (False, True):
            DNSServer(zone, address="127.0.0.1", port=53, tcp=tcp, logger=_Quiet()).start_thread()

    def resolve(self, request, handler):
        name, qtype = str(request.q.qname).rstrip(".").lower(), QTYPE[request.q.qtype]
        with self.lock, open(self.log_path, "a") as f:
            f.write(json.dumps({"name": name, "type": qtype}) + "\n")
        if name == BLACKHOLE or (name in SILENT_AAAA and qtype == "AAAA"):
            raise DNSError("dropped")  # dnslib sends no reply
        if name in SLOW:
            time.sleep(SLOW_SECONDS)  # each query in its own thread (dnslib's servers are threading)
        reply = request.reply()
        current, seen = name, []
        while current not in seen and (current in ZONE or current == REBIND):
            seen.append(current)
            entries = self._rebind(qtype) if current == REBIND else ZONE[current]
            alias = [value for kind, value in entries if kind == "CNAME"]
            if alias:
                reply.add_answer(RR(current, QTYPE.CNAME, rdata=CNAME(alias[0]), ttl=300))
                current = alias[0]
                continue
            for kind, value in entries:
                if kind == qtype and kind in ("A", "AAAA"):
                    ttl = 0 if current == REBIND or current in SLOW else 300
                    rdata = A(value) if kind == "A" else AAAA(list(ipaddress.IPv6Address(value).packed))
                    reply.add_answer(RR(current, getattr(QTYPE, kind), rdata=rdata, ttl=ttl))
            break
        else:
            reply.header.rcode = RCODE.NXDOMAIN
        return reply

    def _rebind(self, qtype: str) -> list[tuple[str, str]]:
        if qtype != "A":
            return []
        self.rebinds[qtype] += 1
        return [("A", REBOUND if self.rebinds[qtype] == 1 else "127.0.0.1")]


class _Quiet:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class Connector:
    """Opens connections to host loopback ports for listeners inside the namespace (Postgres, the issuer)."""

    def __init__(self):
        self.requests: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()  # before unshare: this thread keeps the host's

    def _run(self) -> None:
        while True:
            inside, port = self.requests.get()
            try:
                outside = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                inside.close()
                continue
            outside.settimeout(None)
            for a, b in ((inside, outside), (outside, inside)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    def listen(self, port: int) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)

        def accept() -> None:
            while True:
                conn, _ = listener.accept()
                self.requests.put((conn, port))

        threading.Thread(target=accept, daemon=True).start()


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Bytes from one socket to the other until either end closes; then both are shut."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def launch(directory: Path, forward: list[int] = ()) -> tuple[subprocess.Popen, int]:
    """The lab in a process of its own, dying with this one, once ready: the process (close its stdin to stop it) and
    the pid whose network namespace is the lab's. Its errors go to DIR/lab.log."""
    with open(directory / "lab.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentfn.devstack.harness.page_lab", "--dir", str(directory)]
            + [arg for port in forward for arg in ("--forward", str(port))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=lambda: ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL),
        )
    ready, _, _ = select.select([process.stdout], [], [], 30)
    line = process.stdout.readline() if ready else b""
    if not line:
        process.kill()
        raise RuntimeError(f"the lab did not start; see {directory / 'lab.log'}")
    return process, json.loads(line)["pid"]


if __name__ == "__main__":
    main()
