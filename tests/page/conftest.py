"""The page fetcher's fixtures: the fetcher under gunicorn inside the namespace lab.

pytest stays in the host's network namespace. The lab (agentfn.devstack.harness.page_lab, the `lab` fixture of
tests/conftest.py) makes a namespace of its own; gunicorn is started inside it with `nsenter`, listening on a socket
this process opened on host loopback (`-b fd://N`), so tests call the door as usual while every connection the fetcher
makes starts in the namespace, where the only "public" hosts are the lab's and loopback holds recorders.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.page import Opener, PageFunction, fresh_subject, page_env

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def page_dsn(postgres):
    return postgres.provision("page", "agentfn_page")


@pytest.fixture(scope="session")
def lab_fetcher(lab, issuer, page_dsn, tmp_path_factory):
    """The page fetcher as configured for the tests: 2 s deadline, 1 MiB cap, proxies set in its environment."""
    server = PageFunction(lab, page_env(lab, issuer, page_dsn), tmp_path_factory.mktemp("logs") / "page.log")
    server.ready_seconds = server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tight_page(lab, issuer, page_dsn, tmp_path_factory):
    """A second instance whose callers have only 4 pages a day, whose cache forgets after 4 seconds, and which
    allows tokens no clock skew (a token's end is its `exp`, not 10 s later)."""
    server = PageFunction(
        lab,
        page_env(
            lab,
            issuer,
            page_dsn,
            AGENTFN_PAGE_DAILY_PAGES="4",
            AGENTFN_PAGE_CACHE_SECONDS="4",
            AGENTFN_JWT_LEEWAY_SECONDS="0",
        ),
        tmp_path_factory.mktemp("logs") / "tight.log",
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def opener(lab_fetcher, issuer) -> Opener:
    return Opener(lab_fetcher.url, issuer)


@pytest.fixture
def page_subject() -> str:
    return fresh_subject()
