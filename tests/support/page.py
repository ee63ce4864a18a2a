"""The page fetcher's test helpers: the namespace lab a fixture starts (agentfn.devstack.harness.page_lab), the fetcher
under gunicorn inside it, its settings, and a caller of its door."""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from agentfn.devstack.harness.servers import BIN, ROOT
from agentfn.shared.contract import audience

PROXY = "http://127.0.0.1:3128"  # an internal recorder: a fetcher that used it would be caught


def die_with_parent() -> None:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Lab:
    """The lab: a network namespace of agentfn.devstack.harness.page_lab's making, and what its servers and recorders saw."""

    def __init__(self, directory: Path, process: subprocess.Popen, pid: int):
        self.dir, self.process, self.pid = directory, process, pid
        self.netns = f"/proc/{pid}/ns/net"

    def _lines(self, name: str) -> list[dict]:
        return [json.loads(line) for line in (self.dir / name).read_text().splitlines() if line.strip()]

    def internal_hits(self) -> list[dict]:
        return self._lines("internal.jsonl")

    def public_hits(self) -> list[dict]:
        return self._lines("public.jsonl")

    def dns_queries(self) -> list[dict]:
        return self._lines("dns.jsonl")

    def inside(self, code: str, timeout: float = 20) -> subprocess.CompletedProcess:
        """Run Python code inside the lab's namespace (for probes of the lab itself)."""
        return subprocess.run(
            ["nsenter", f"--net={self.netns}", "--", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.terminate()
            self.process.wait(10)


class PageFunction:
    """The page fetcher under gunicorn inside the lab's namespace, answering on host loopback."""

    def __init__(self, lab: Lab, env: dict[str, str], log: Path):
        self.lab, self.log = lab, log
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.set_inheritable(True)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> float:
        """Start gunicorn; returns the seconds from start to ready."""
        started = time.monotonic()
        self._out = open(self.log, "ab")
        fd = self.listener.fileno()
        self.process = subprocess.Popen(
            [
                "nsenter",
                f"--net={self.lab.netns}",
                "--",
                str(BIN / "gunicorn"),
                "-c",
                "python:agentfn.shared.gunicorn_conf",
                "-b",
                f"fd://{fd}",
                "agentfn.page.app:create_app()",
            ],
            env=self.env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            pass_fds=[fd],
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the page fetcher exited; see {self.log}:\n{self.log.read_text()[-3000:]}")
            try:
                if requests.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return time.monotonic() - started
            except (requests.ConnectionError, requests.Timeout):
                pass
            time.sleep(0.02)
        raise RuntimeError(f"the page fetcher was not ready in {timeout}s; see {self.log}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)  # gunicorn's quick shutdown: the tests are done with it
            self.process.wait(15)
        self._out.close()
        self.listener.close()


def page_env(lab: Lab, issuer, dsn: str, **overrides: str) -> dict[str, str]:
    env = {
        **issuer.env(),
        "AGENTFN_DATABASE_URL": dsn,
        "AGENTFN_DNS_SERVERS": "127.0.0.1:53",
        "AGENTFN_PAGE_CA_FILE": str(lab.dir / "ca.pem"),
        "AGENTFN_PAGE_DEADLINE_SECONDS": "2",
        "AGENTFN_PAGE_MAX_BYTES": str(1 << 20),
        "AGENTFN_LOG_LEVEL": "INFO",
        "AGENTFN_THREADS": "8",
        # Proxies in the environment must change nothing: each points at an internal recorder. Loopback
        # is exempt only for the token issuer's keys (fetched by the shared identity code, which honours
        # proxies); the fetcher never goes to loopback, so every page it opens would meet the proxy.
        "HTTP_PROXY": PROXY,
        "HTTPS_PROXY": PROXY,
        "ALL_PROXY": PROXY,
        "http_proxy": PROXY,
        "https_proxy": PROXY,
        "all_proxy": PROXY,
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }
    env.update(overrides)
    return env


class Opener:
    """A caller of the page door: `opener(url, subject=..., **body)` -> the HTTP response."""

    def __init__(self, base: str, issuer):
        self.base, self.issuer, self.session = base, issuer, requests.Session()
        self.session.trust_env = False

    def __call__(
        self, url: str, *, subject: str | None = None, headers: dict[str, str] | None = None, **body
    ) -> requests.Response:
        token = self.issuer.exchanged(audience("page"), subject or fresh_subject())
        return self.session.post(
            self.base + "/v1/open",
            json={"url": url, **body},
            headers={**(headers or {}), "Authorization": f"Bearer {token}"},
            timeout=30,
        )


def settle_audit(base: str, issuer) -> None:
    """Wait until the fetcher has written the audit rows of every fetch it answered: reading the audit waits for
    them (rows are written off the response path)."""
    token = issuer.exchanged(audience("page"), "page-settler", ["platform-admins"])
    answer = requests.get(
        base + "/v1/audit",
        params={"generation_id": "00000000-0000-0000-0000-000000000000"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    answer.raise_for_status()


def fresh_subject() -> str:
    return f"page-{secrets.token_hex(5)}"
