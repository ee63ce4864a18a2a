"""The operator's life: start (settings, catalog, the lease, the first publish), the liveness probe, stop.

What it publishes (publisher.py): the registry ConfigMap, the NetworkPolicy, statuses and events. The
first publish runs when this replica takes the lease, so start-up reconciles every object even when
none changes; from then on, every Agent or ToolGrant event asks for one (agents.py, grants.py).
"""

from __future__ import annotations

import logging

import kopf

from . import catalog
from .cluster import Cluster
from .config import Config
from .kube import Api
from .lease import Elector
from .login import Credentials
from .publisher import Publisher


@kopf.on.startup()
def operator_started(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_) -> None:
    # No kopf peering (the Lease guards writing) and no kopf state on the objects (no change handlers).
    settings.peering.standalone = True
    settings.scanning.disabled = True  # no cluster-wide watch of CRDs or namespaces: a Role is enough
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 270  # below the apiserver's own cut-off: reconnects stay orderly
    config = Config.from_env()
    tools = catalog.load()
    logger.info(f"namespace {config.namespace}; catalog: {', '.join(sorted(tools))}")
    credentials = memo.setdefault("credentials", Credentials())
    cluster = Cluster(Api(credentials), config)
    elector: Elector | None = None
    publisher = Publisher(cluster, tools, logger, may_write=lambda: elector is not None and elector.held())

    def tick(resync: bool) -> None:
        if resync or publisher.failed:
            publisher.request("resync" if resync else "retry")

    elector = Elector(cluster.api, config, logger, on_acquired=lambda: publisher.request("start-up"), on_tick=tick)
    memo.config, memo.publisher, memo.elector = config, publisher, elector
    elector.start()


@kopf.on.probe(id="registry")
def registry_revision(memo: kopf.Memo, **_) -> dict:
    publisher: Publisher | None = memo.get("publisher")
    elector: Elector | None = memo.get("elector")
    return {
        "writing": bool(elector and elector.held()),
        "revision": publisher.revision if publisher else None,
        "published_at": publisher.published_at if publisher else None,
    }


@kopf.on.cleanup()
def operator_stopped(memo: kopf.Memo, logger: logging.Logger, **_) -> None:
    elector: Elector | None = memo.get("elector")
    if elector:
        elector.stop()  # releases the lease: a standby replica takes over at once
    logger.info("stopped")
