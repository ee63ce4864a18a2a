"""Real parts for every test: embedded Postgres, the dev issuer on loopback, functions under gunicorn."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

import pytest
from support import (
    CHROMIUM,
    READ_TOOLS,
    Client,
    Gunicorn,
    Issuer,
    Postgres,
    Served,
    exchange_clients,
    postgres_dir,
    web_clients,
)
from support.slow import starts_processes
from support.tools import dev_upstream

from agentfn.cli.postgres import free_port
from agentfn.devstack.issuer import create_app as issuer_app


def pytest_addoption(parser):
    parser.addoption(
        "--images", action="store_true", help="collect tests/images too: the platform from its images (after ./dev images)"
    )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    """A test that uses a fixture starting processes is slow (support.slow); `-m "not slow"` leaves it out."""
    slow = pytest.mark.slow
    for item in items:
        if starts_processes(item):
            item.add_marker(slow)


def pytest_ignore_collect(collection_path, config):
    """tests/images runs against the images `./dev images` built, only when asked (`--images`): the main suite needs no
    container engine."""
    if collection_path == Path(__file__).parent / "images" and not config.getoption("--images"):
        return True
    return None


@pytest.fixture(scope="session")
def apiserver():
    """One real kube-apiserver (and etcd) on loopback for the session, for every folder that needs one
    (tests/support/apiserver.py; the binary is built once per machine)."""
    from support.apiserver import KubeAPI, build

    api = KubeAPI()
    try:
        api.start(build())
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="session")
def postgres():
    root = postgres_dir()
    pg = Postgres(root / "data")
    pg.start()
    yield pg
    pg.stop("immediate")
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def model_dsn(postgres) -> str:
    """The model function's role and schema, provisioned once a session (again would change its password)."""
    return postgres.provision("model", "agentfn_model")


@pytest.fixture(scope="session")
def issuer(tmp_path_factory):
    port = free_port()
    issuer = Issuer(
        tmp_path_factory.mktemp("issuer"), f"http://127.0.0.1:{port}", exchange_clients(), web_clients=web_clients()
    )
    served = Served(issuer_app(issuer), port)
    yield issuer
    served.stop()


@pytest.fixture(scope="session")
def upstreams(issuer):
    """Each read tool's dev upstream (a test double of the platform service behind it), in this process."""
    served = {tool: dev_upstream(tool, issuer.upstream_env(tool)) for tool in READ_TOOLS}
    yield served
    for s in served.values():
        s.stop()


@pytest.fixture(autouse=True)
def calm_upstreams(request):
    """Faults a test asked a dev upstream for end with the test."""
    yield
    if "upstreams" in request.fixturenames:
        for served in request.getfixturevalue("upstreams").values():
            served.controls.delay_seconds, served.controls.fail_status = 0, 0


@pytest.fixture(scope="session")
def browser():
    """Debian's headless Chromium driven by Playwright, one for the session: Playwright's sync API runs one event
    loop, so a second one in the same process fails (the workbench's tests and the sign-in page's share this)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is not installed: .ci/run installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=60_000)  # a turn on a busy 2-core machine: recall, the engine, a sandboxed run

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"], headless=True)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def memory_env(postgres, issuer):
    return {
        **issuer.env(),
        "AGENTFN_DATABASE_URL": postgres.provision("memory", "agentfn_memory"),
        "AGENTFN_LOG_LEVEL": "INFO",
    }


@pytest.fixture(scope="session")
def memory(memory_env, tmp_path_factory):
    """The memory function under gunicorn, on the real database, with the default (multilingual) model."""
    server = Gunicorn("agentfn.memory.app:create_app()", memory_env, tmp_path_factory.mktemp("logs") / "memory.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def caller(memory, issuer):
    """A fresh subject each test, so tests never see each other's entries."""
    return Client(memory.url, issuer.headers(f"user-{secrets.token_hex(4)}"))


@pytest.fixture(scope="session")
def workbench(issuer, tmp_path_factory):
    """The workbench function under gunicorn: the page, its files and its sign-in settings."""
    server = Gunicorn("agentfn.workbench.app:create_app()", issuer.env(), tmp_path_factory.mktemp("workbench") / "log")
    server.start()
    yield server
    server.stop()
