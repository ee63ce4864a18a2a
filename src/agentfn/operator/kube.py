"""A small synchronous Kubernetes REST client over the credentials kopf logged in with.

kopf's own API client is private, and the operator needs only a handful of calls on plain dicts (list,
get, create, merge-patch), so this is `requests` over the `kopf.ConnectionInfo` of the login
handler: one set of credentials for kopf's watches and for the operator's writes.
"""

from __future__ import annotations

import base64
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import Any

import kopf
import requests

TIMEOUT = (3.05, 30)


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


def _file(data: str | bytes) -> str:
    """A kubeconfig's inline *-data (PEM, or base64 of PEM) as a file, since requests takes paths."""
    raw = data.encode() if isinstance(data, str) else data
    if not raw.startswith(b"-----BEGIN "):
        raw = base64.b64decode(raw)
    f = tempfile.NamedTemporaryFile(prefix="agentfn-operator-", suffix=".pem", delete=False)
    with f:
        f.write(raw)
    return f.name


class Api:
    """Kubernetes REST calls as dicts. `credentials` is read on every call, so a re-login takes effect."""

    def __init__(self, credentials: Callable[[], kopf.ConnectionInfo]):
        self._credentials = credentials
        self._local = threading.local()  # requests.Session is not thread-safe; handlers run in threads
        self._files: dict[Any, str] = {}

    def _session(self) -> tuple[requests.Session, str]:
        info = self._credentials()
        session = getattr(self._local, "session", None)
        if session is None or self._local.info is not info:
            session = requests.Session()
            session.trust_env = False  # no proxy from the environment between the operator and its apiserver
            if info.token:
                session.headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
            elif info.username:
                session.auth = (info.username, info.password or "")
            if info.insecure:
                session.verify = False
            elif info.ca_path or info.ca_data:
                session.verify = str(info.ca_path) if info.ca_path else self._cached(info.ca_data)
            cert = (
                str(info.certificate_path)
                if info.certificate_path
                else self._cached(info.certificate_data)
                if info.certificate_data
                else None
            )
            key = (
                str(info.private_key_path)
                if info.private_key_path
                else self._cached(info.private_key_data)
                if info.private_key_data
                else None
            )
            if cert:
                session.cert = (cert, key) if key else cert
            self._local.session, self._local.info = session, info
        return session, info.server.rstrip("/")

    def _cached(self, data: str | bytes) -> str:
        if data not in self._files:
            self._files[data] = _file(data)
        return self._files[data]

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        session, server = self._session()
        response = session.request(
            method,
            server + path,
            json=body,
            params=params,
            timeout=TIMEOUT,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        )
        if response.status_code >= 400:
            try:
                status = response.json()
            except ValueError:
                status = {}
            raise ApiError(
                response.status_code, status.get("reason", response.reason), status.get("message", response.text[:300])
            )
        return response.json() if response.content else {}

    def get(self, path: str, **kw) -> dict[str, Any]:
        return self.request("GET", path, **kw)

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return self.get(path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body=body)

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body=body, content_type="application/merge-patch+json")


def namespaced(group_version: str, namespace: str, plural: str, name: str = "") -> str:
    """The REST path of a namespaced resource (`v1` is the core group)."""
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    return f"{base}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")
