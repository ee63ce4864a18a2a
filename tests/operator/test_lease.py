"""Third tier: the single-replica guard. Two electors on the real apiserver's Lease: one writes, the
other stands by, and takes over when the first releases its hold (or stops renewing it)."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading

import kopf
import pytest
from support.operator import CLUSTER_TIMEOUT, NAMESPACE, wait_for

from agentfn.operator.config import Config
from agentfn.operator.kube import Api
from agentfn.operator.lease import Elector

pytestmark = pytest.mark.timeout(CLUSTER_TIMEOUT)


def elector(operator_kube, identity: str, acquired: list[str]) -> Elector:
    config = dataclasses.replace(Config(namespace=NAMESPACE), lease="guard-test", lease_seconds=3, identity=identity)
    info = kopf.ConnectionInfo(server=operator_kube.url, ca_path=str(operator_kube.ca_file), token=operator_kube.admin_token)
    return Elector(
        Api(lambda: info),
        config,
        logging.getLogger(f"test.{identity}"),
        on_acquired=lambda: acquired.append(identity),
        on_tick=lambda resync: None,
    )


def holder(operator_kube) -> str | None:
    done = operator_kube.kubectl("-n", NAMESPACE, "get", "lease", "guard-test", "-o", "json", check=False)
    return json.loads(done.stdout)["spec"].get("holderIdentity") if done.returncode == 0 else None


def test_one_replica_writes_and_the_other_takes_over_when_it_lets_go(operator_kube):
    acquired: list[str] = []
    first, second = elector(operator_kube, "first", acquired), elector(operator_kube, "second", acquired)
    first.start()
    wait_for(first.held, timeout=10, what="the first hold")
    second.start()
    threading.Event().wait(2.5)  # more than two renewal periods
    assert first.held() and not second.held() and acquired == ["first"] and holder(operator_kube) == "first"
    first.stop()  # releases the hold
    wait_for(second.held, timeout=10, what="the second replica taking over")
    assert acquired == ["first", "second"] and holder(operator_kube) == "second"
    second.stop()
    assert holder(operator_kube) is None


def test_a_hold_that_is_not_renewed_lapses(operator_kube):
    acquired: list[str] = []
    stuck = elector(operator_kube, "stuck", acquired)
    stuck._attempt()  # takes the lease once and never renews it, as a frozen replica would
    assert stuck.held()
    standby = elector(operator_kube, "standby", acquired)
    standby.start()
    try:
        wait_for(lambda: holder(operator_kube) == "standby", timeout=15, what="the lapsed lease taken over")
        wait_for(lambda: not stuck.held(), timeout=5, what="the stuck replica to stop counting itself the writer")
        assert acquired == ["standby"]
    finally:
        standby.stop()
