"""Publishing: read every Agent and ToolGrant, reconcile, write what changed. Asked for on every event.

Each publish reads the objects fresh from the API (two lists) rather than from a cache, so what it
writes is a true snapshot: a deleted grant is gone from the next registry whatever the order of events.
Requests coalesce: while one publish runs, the events arriving meanwhile are served by one more
publish, not one each. Only the replica holding the lease writes.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable

from .catalog import Catalog
from .cluster import Cluster
from .network import policy
from .reconcile import functions_in_use, reconcile
from .status import changed_readiness, desired


class Publisher:
    def __init__(
        self,
        cluster: Cluster,
        catalog: Catalog,
        logger: logging.Logger | logging.LoggerAdapter,
        may_write: Callable[[], bool],
    ):
        self.cluster, self.catalog, self.logger = cluster, catalog, logger
        self.may_write = may_write
        self._publishing = threading.Lock()
        self._counting = threading.Lock()
        self._asked = self._served = 0
        self.failed = False
        self.revision: str | None = None
        self.published_at: str | None = None
        self.seconds: float | None = None

    def request(self, why: str) -> None:
        """Publish a snapshot taken after this call, unless one already is; errors are logged and retried."""
        if not self.may_write():
            return
        with self._counting:
            self._asked += 1
            ticket = self._asked
        with self._publishing:
            if self._served >= ticket:
                return  # a publish that started after this request has already covered it
            with self._counting:
                covers = self._asked
            try:
                self._publish(why)
                self.failed = False
            except Exception as e:
                self.failed = True  # the lease thread retries
                self.logger.error(f"publish failed ({why}): {e}")
                return
            self._served = covers

    def _publish(self, why: str) -> None:
        started = time.monotonic()
        agents, grants = self.cluster.objects("Agent"), self.cluster.objects("ToolGrant")
        outcome = reconcile(self.catalog, agents, grants)
        if not self.may_write():
            return  # the hold lapsed while reading: the next holder publishes
        if self.cluster.write_registry(outcome.registry):
            self.logger.info(f"registry {outcome.revision[:19]} written: {len(outcome.registry['agents'])} agents ({why})")
        functions = functions_in_use(outcome.registry, self.catalog)
        if self.cluster.write_network_policy(policy(self.cluster.config, functions)):
            self.logger.info(f"network policy written: the model function may reach {', '.join(functions) or 'no tool'}")
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        objects = {(o["kind"], o["metadata"]["name"]): o for o in agents + grants}
        for verdict in outcome.verdicts:
            obj = objects[(verdict.kind, verdict.name)]
            body = desired(verdict, obj.get("status"), now)
            if body is None:
                continue
            # The event first: if the status write then fails, the retry posts it again rather than never.
            if changed_readiness(verdict, obj.get("status")):
                self.cluster.post_event(obj, "Normal" if verdict.ready else "Warning", verdict.reason, verdict.message)
            self.cluster.write_status(obj, body)
        self.revision, self.published_at = outcome.revision, now
        self.seconds = time.monotonic() - started
