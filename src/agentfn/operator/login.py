"""Logging in: the pod's ServiceAccount in a cluster, else the kubeconfig; one set of credentials for all.

kopf uses what this handler returns for its watches and events; the operator's own writes (kube.py)
read the same `kopf.ConnectionInfo` from the memo, and a re-login (kopf calls this again after a 401)
replaces it for both.
"""

from __future__ import annotations

import threading

import kopf


class Credentials:
    """The current ConnectionInfo; readers wait for the first login."""

    def __init__(self):
        self._info: kopf.ConnectionInfo | None = None
        self._ready = threading.Event()

    def set(self, info: kopf.ConnectionInfo) -> None:
        self._info = info
        self._ready.set()

    def __call__(self) -> kopf.ConnectionInfo:
        if not self._ready.wait(timeout=60):
            raise RuntimeError("not logged in to the API after 60 s")
        return self._info


@kopf.on.login()
def logged_in(memo: kopf.Memo, **kwargs) -> kopf.ConnectionInfo:
    info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    if info is None:
        raise kopf.LoginError("no ServiceAccount token and no kubeconfig (KUBECONFIG or ~/.kube/config)")
    memo.setdefault("credentials", Credentials()).set(info)
    return info
