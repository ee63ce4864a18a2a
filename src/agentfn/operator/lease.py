"""The single-replica guard: a `coordination.k8s.io` Lease, held and renewed by the replica that writes.

The Deployment runs one replica with the Recreate strategy; the Lease makes that a guarantee rather
than a hope (a rollout, a stuck node): a replica writes only while its hold is fresh, a second one stands
by and takes over when the hold lapses or is released. The thread also drives the retry of a failed
publish and a periodic resync (someone edited the ConfigMap by hand; a watch missed an event).
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .config import Config
from .kube import Api, ApiError, namespaced

RESYNC_SECONDS = 300.0


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _micro(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


class Elector:
    def __init__(
        self,
        api: Api,
        config: Config,
        logger: logging.Logger | logging.LoggerAdapter,
        *,
        on_acquired: Callable[[], None],
        on_tick: Callable[[bool], None],
    ):
        self.api, self.config, self.logger = api, config, logger
        self.on_acquired, self.on_tick = on_acquired, on_tick
        self.path = namespaced("coordination.k8s.io/v1", config.namespace, "leases", config.lease)
        self._renewed = float("-inf")  # monotonic time of the last successful hold
        self._stop = threading.Event()
        self._holder: str | None = None
        self._thread = threading.Thread(target=self._loop, name="agentfn-lease", daemon=True)

    @property
    def period(self) -> float:
        return max(self.config.lease_seconds / 3, 0.5)

    def held(self) -> bool:
        # A margin of one period: stop writing before another replica may take over.
        return time.monotonic() - self._renewed < self.config.lease_seconds - self.period

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self.held():
            self._release()

    def _loop(self) -> None:
        last_resync = time.monotonic()
        while not self._stop.is_set():
            was_held = self.held()
            try:
                self._attempt()
            except Exception as e:  # the apiserver is away: keep trying; the hold lapses on its own
                self.logger.warning(f"lease {self.config.lease}: {e}")
            if self.held() and not was_held:
                self.logger.info(f"lease {self.config.lease} held by {self.config.identity}: this replica writes")
                self.on_acquired()
                last_resync = time.monotonic()
            elif self.held():
                resync = time.monotonic() - last_resync >= RESYNC_SECONDS
                self.on_tick(resync)
                if resync:
                    last_resync = time.monotonic()
            self._stop.wait(self.period)

    def _spec(self, moment: datetime.datetime, current: dict[str, Any] | None) -> dict[str, Any]:
        transitions = (current or {}).get("leaseTransitions") or 0
        mine = (current or {}).get("holderIdentity") == self.config.identity
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": self.config.lease_seconds,
            "acquireTime": (current or {}).get("acquireTime") if mine else _micro(moment),
            "renewTime": _micro(moment),
            "leaseTransitions": transitions if mine or not current else transitions + 1,
        }

    def _attempt(self) -> None:
        started, moment = time.monotonic(), _now()
        lease = self.api.get_or_none(self.path)
        try:
            if lease is None:
                self.api.create(
                    self.path.rsplit("/", 1)[0],
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.config.lease, "namespace": self.config.namespace},
                        "spec": self._spec(moment, None),
                    },
                )
            else:
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity") or None
                renewed = _parse(spec.get("renewTime"))
                duration = spec.get("leaseDurationSeconds") or self.config.lease_seconds
                lapsed = renewed is None or renewed + datetime.timedelta(seconds=duration) < moment
                if holder not in (None, self.config.identity) and not lapsed:
                    if holder != self._holder:
                        self.logger.info(f"standing by: lease {self.config.lease} is held by {holder}")
                    self._holder = holder
                    return
                # resourceVersion makes the patch conditional: of two replicas racing, one gets 409.
                self.api.merge_patch(
                    self.path,
                    {
                        "metadata": {"resourceVersion": lease["metadata"].get("resourceVersion")},
                        "spec": self._spec(moment, spec),
                    },
                )
        except ApiError as e:
            if e.status == 409:  # another replica wrote first; it holds the lease
                return
            raise
        self._holder = self.config.identity
        self._renewed = started

    def _release(self) -> None:
        try:
            lease = self.api.get(self.path)
            if (lease.get("spec") or {}).get("holderIdentity") == self.config.identity:
                # As client-go does: an empty holder with a 1 s duration lets the next replica in at once.
                self.api.merge_patch(
                    self.path,
                    {
                        "metadata": {"resourceVersion": lease["metadata"].get("resourceVersion")},
                        "spec": {"holderIdentity": None, "leaseDurationSeconds": 1},
                    },
                )
                self.logger.info(f"lease {self.config.lease} released")
        except Exception as e:
            self.logger.warning(f"lease {self.config.lease} not released: {e}")
        self._renewed = float("-inf")
