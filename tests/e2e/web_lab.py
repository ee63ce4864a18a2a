"""The tour's own web: a network namespace where `https://example.com` is a page the test serves.

The README's tour opens `https://example.com`; these machines have no internet, and the page fetcher
refuses loopback (as it must). So the tour's platform runs inside a network namespace of this process's
making, where example.com resolves (through a DNS server in the namespace) to an address `ipaddress`
calls global, served over TLS by a throwaway CA the page fetcher is told to trust. Nothing leaves the
namespace.

Run as root: `python web_lab.py --dir DIR --expose PORT [--expose PORT ...]`. It moves itself into a new
network namespace, prints one JSON line (`{"ready": true, "pid": ...}`) and runs until its stdin closes.
Processes join it with `nsenter --net=/proc/PID/ns/net`. `--expose PORT` makes 127.0.0.1:PORT inside the
namespace (the gateway, the issuer) reachable at 127.0.0.1:PORT on the host: the host's listener is bound
before the move, and the connections inward are opened by threads started after it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from dnslib import QTYPE, RCODE, RR, A
from dnslib.server import BaseResolver, DNSServer

from agentfn.devstack.harness.ca import throwaway_ca
from agentfn.devstack.harness.page_lab import pump  # the same byte pump as the page fetcher's lab

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
ADDRESS = "44.0.0.20"  # global by ipaddress's reckoning; exists only inside the namespace
NAMES = ("example.com", "www.example.com")
TITLE = "Example Domain"
PAGE = f"""<!doctype html><html><head><title>{TITLE}</title></head><body><div>
<h1>{TITLE}</h1>
<p>This domain is for use in illustrative examples in documents. You may use this domain in literature
without prior coordination or asking for permission.</p>
<p><a href="https://www.iana.org/domains/example">More information...</a></p>
</div></body></html>"""


class Page(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        body = PAGE.encode() if self.path in ("/", "/index.html") else b"<html><body>not here</body></html>"
        self.send_response(200 if self.path in ("/", "/index.html") else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


class Zone(BaseResolver):
    def resolve(self, request, handler):
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        if name not in NAMES:
            reply.header.rcode = RCODE.NXDOMAIN
        elif QTYPE[request.q.qtype] == "A":
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(ADDRESS), ttl=60))
        return reply


class _Quiet:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--expose", type=int, action="append", default=[])
    args = parser.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # never outlive the test that started it
    listeners = [listen(port) for port in args.expose]  # in the host's namespace: bound before the move
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed (run as root)")
    subprocess.run(["ip", "-batch", "-"], input=f"link set lo up\naddr add {ADDRESS}/32 dev lo\n", text=True, check=True)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    issued = throwaway_ca(args.dir, "agentfn tour lab CA", NAMES, [ADDRESS])  # ca.pem: what the fetcher trusts
    tls.load_cert_chain(issued.cert, issued.key)
    for port, context in ((80, None), (443, tls)):
        server = ThreadingHTTPServer((ADDRESS, port), Page)
        if context:
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    DNSServer(Zone(), port=53, address="127.0.0.1", logger=_Quiet()).start_thread()
    for listener in listeners:
        threading.Thread(target=inward, args=(listener,), daemon=True).start()  # threads of the new namespace
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    sys.stdin.read()  # until the test closes it


def listen(port: int) -> socket.socket:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    return listener


def inward(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    while True:
        outside, _ = listener.accept()
        try:
            inside = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            outside.close()
            continue
        inside.settimeout(None)
        for a, b in ((outside, inside), (inside, outside)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main()
