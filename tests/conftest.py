"""Real parts for every test: embedded Postgres, the dev issuer on loopback, functions under gunicorn."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from support import CHROMIUM, MCP_RESOURCE, Issuer, exchange_clients, web_clients
from support.model import SERVED_READS, SMALL_DAILY, TOOL_TIMEOUT, Engine, GatewayServer, Person, registry_document, tier_env
from support.page import Lab
from support.slow import starts_processes
from support.tools import CANARY, RUN_LIMITS, read_tools_served, tool_env

from agentfn.devstack import weights
from agentfn.devstack.harness import page_lab
from agentfn.devstack.harness.identity import MODEL_SERVICE, dev_issuer
from agentfn.devstack.harness.ports import free_port
from agentfn.devstack.harness.postgres import Postgres, postgres_dir
from agentfn.devstack.harness.servers import READ_TOOLS, Client, Gunicorn, Served, dev_upstream
from agentfn.devstack.scripted_engine import create_app as engine_app


def pytest_addoption(parser):
    parser.addoption(
        "--images", action="store_true", help="collect tests/images too: the platform from its images (after ./dev images)"
    )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    """A test that uses a fixture starting processes is slow (support.slow); `-m "not slow"` leaves it out.

    The modules that drive a browser run last, whole and in their order: Playwright's sync API keeps an event loop
    running in this thread from the session's first browser on, and `asyncio.run` (the MCP SDK's client, kopf's
    runner) cannot start beside it."""
    slow = pytest.mark.slow
    for item in items:
        if starts_processes(item):
            item.add_marker(slow)
    browsing = {item.path for item in items if "browser" in item.fixturenames}
    items.sort(key=lambda item: item.path in browsing)


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
    from agentfn.devstack.harness.apiserver import KubeAPI, build

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
    issuer, served = dev_issuer(
        tmp_path_factory.mktemp("issuer"), exchange_clients(), kind=Issuer, web_clients=web_clients()
    )
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


# --- the tool functions under gunicorn -------------------------------------------------------------------


@pytest.fixture(scope="session")
def read_tools(upstreams, issuer, tmp_path_factory):
    """Each read tool under gunicorn, as in a cluster, its upstream timeout short (the tools' own tests)."""
    with read_tools_served(issuer, upstreams, READ_TOOLS, tmp_path_factory.mktemp("tool-logs")) as servers:
        yield servers


@pytest.fixture(scope="session")
def run_code_env(postgres, issuer):
    return {
        **issuer.env(),
        "AGENTFN_DATABASE_URL": postgres.provision("run_code", "agentfn_run_code"),
        **RUN_LIMITS,
        "AGENTFN_WORKERS": "2",
        "AGENTFN_THREADS": "4",
        "AGENTFN_TEST_CANARY": CANARY,
    }


@pytest.fixture(scope="session")
def run_code(run_code_env, tmp_path_factory):
    server = Gunicorn(
        "agentfn.run_code.app:create_app()", run_code_env, tmp_path_factory.mktemp("run-code-logs") / "run_code.log"
    )
    server.started_in = server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def every_tool(read_tools, run_code):
    return {**read_tools, "run_code": run_code}


@pytest.fixture
def coder(run_code, issuer):
    """A fresh caller of run_code each test, so daily runs never carry over."""
    return Client(run_code.url, issuer.tool_headers("run_code", f"coder-{secrets.token_hex(4)}"))


@pytest.fixture
def fragile(issuer):
    """A read tool (built by its factory) before a dev upstream that the test may stop."""
    made = []

    def make(tool: str, upstream_tool: str | None = None):
        upstream = dev_upstream(upstream_tool or tool, issuer.upstream_env(tool))
        from importlib import import_module

        served = Served(import_module(f"agentfn.{tool}.app").create_app(tool_env(issuer, tool, upstream.url)))
        made.extend([upstream, served])
        return upstream, served

    yield make
    for served in made:
        served.stop()


# --- the model function under gunicorn, and the parts it calls ------------------------------------------------


@pytest.fixture(scope="session")
def scripted_engine():
    """The scripted engine (a TEST DOUBLE of an LLM's choices) in this process, for every folder's tests."""
    served = Engine(engine_app())
    yield served
    served.stop()


@pytest.fixture(scope="session")
def model_logs(tmp_path_factory) -> Path:
    """Where the model function and the parts it calls write their logs (tests read them: nothing said is there)."""
    return tmp_path_factory.mktemp("model-logs")


@pytest.fixture(scope="session")
def model_read_tools(upstreams, issuer, model_logs):
    """The read tools the model function's tests grant, their upstream timeout longer than the model function's bound
    on a tool call (TOOL_TIMEOUT), so that a slow upstream is the model function's timeout."""
    with read_tools_served(issuer, upstreams, SERVED_READS, model_logs, timeout=5) as servers:
        yield servers


@pytest.fixture(scope="session")
def page_fetcher(postgres, issuer, model_logs):
    server = Gunicorn(
        "agentfn.page.app:create_app()",
        {**issuer.env(), "AGENTFN_DATABASE_URL": postgres.provision("page", "agentfn_page")},
        model_logs / "page.log",
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def registry_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("registry") / "registry.json"
    path.write_text(json.dumps(registry_document()))
    return path


@pytest.fixture(scope="session")
def service_token_file(issuer, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "memory-token"
    path.write_text(issuer.service_token(MODEL_SERVICE))
    return path


@pytest.fixture(scope="session")
def approval_key_file(tmp_path_factory) -> Path:
    """The key approval tokens are signed with, as the chart's Secret or the dev stack's file holds it."""
    path = tmp_path_factory.mktemp("approval") / "approval-key"
    path.write_text(secrets.token_urlsafe(48))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def exchange_token_file(issuer, tmp_path_factory) -> Path:
    """The model function's workload token for the issuer (client authentication of its token exchanges)."""
    return issuer.assertion_file(tmp_path_factory.mktemp("secrets"), "model")


@pytest.fixture(scope="session")
def offline_port() -> int:
    """Where the real offline engine listens when test_offline_engine.py starts it (the tier is configured ahead)."""
    return free_port()


@pytest.fixture(scope="session")
def model_env(
    model_dsn,
    issuer,
    scripted_engine,
    model_read_tools,
    memory,
    page_fetcher,
    registry_file,
    service_token_file,
    offline_port,
    approval_key_file,
    exchange_token_file,
):
    return {
        **issuer.env(),
        "AGENTFN_DATABASE_URL": model_dsn,
        "AGENTFN_REGISTRY_FILE": str(registry_file),
        "AGENTFN_MEMORY_URL": memory.url,
        "AGENTFN_PAGE_URL": page_fetcher.url,
        "AGENTFN_TOOL_PLATFORM_STATUS_URL": model_read_tools["platform_status"].url,
        "AGENTFN_TOOL_LIST_MODELS_URL": model_read_tools["list_models"].url,
        "AGENTFN_SERVICE_TOKEN_FILE": str(service_token_file),
        "AGENTFN_TIERS": "fast,small,offline",
        "AGENTFN_APPROVAL_KEY_FILE": str(approval_key_file),
        "AGENTFN_EXCHANGE_TOKEN_FILE": str(exchange_token_file),
        "AGENTFN_MCP_RESOURCE": MCP_RESOURCE,
        **tier_env("fast", scripted_engine.url + "/v1", "native"),
        **tier_env("small", scripted_engine.url + "/v1", "constrained"),
        **tier_env(
            "offline",
            f"http://127.0.0.1:{offline_port}/v1",
            "constrained",
            MODEL=weights.chosen().alias,
            DEADLINE_SECONDS="240",
            MAX_TOKENS="40",
            CONTEXT_TOKENS="2048",
            TEMPERATURE="0",
        ),
        "AGENTFN_TOOL_TIMEOUT_SECONDS": str(TOOL_TIMEOUT),
        "AGENTFN_THREADS": "8",
        "AGENTFN_LOG_LEVEL": "INFO",
    }


@pytest.fixture(scope="session")
def model(model_env, model_logs):
    server = Gunicorn("agentfn.model.app:create_app()", model_env, model_logs / "model.log")
    server.started_in = server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def frugal_model(model_env, model_logs):
    """The model function with a small daily budget, in two processes, for the budget cases."""
    env = {
        **model_env,
        "AGENTFN_DAILY_TOKENS": str(SMALL_DAILY),
        "AGENTFN_WORKERS": "2",
        "AGENTFN_THREADS": "12",
        **tier_env("fast", model_env["AGENTFN_TIER_FAST_URL"], "native", MAX_TOKENS="100"),
        **tier_env("small", model_env["AGENTFN_TIER_SMALL_URL"], "constrained", MAX_TOKENS="100"),
    }
    server = Gunicorn("agentfn.model.app:create_app()", env, model_logs / "model-frugal.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def person(issuer):
    return Person(issuer)


@pytest.fixture
def stranger(issuer):
    """A caller in no group: the dev upstreams refuse it (a 403 behind the tool)."""
    return Person(issuer, groups=())


@pytest.fixture(scope="session")
def gateway(memory, model, workbench, model_logs):
    """The one public URL: the dev gateway in front of memory, the model function and the workbench."""
    server = GatewayServer(
        "agentfn.cli.gateway:create_app()",
        {
            "AGENTFN_GATEWAY_MEMORY_URL": memory.url,
            "AGENTFN_GATEWAY_MODEL_URL": model.url,
            "AGENTFN_GATEWAY_WORKBENCH_URL": workbench.url,
        },
        model_logs / "gateway.log",
    )
    server.start()
    yield server
    server.stop()


# --- the page fetcher's lab ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def lab(postgres, issuer, tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the lab is a network namespace of the tests' own: run as root")
    directory = tmp_path_factory.mktemp("lab")
    lab = Lab(directory, *page_lab.launch(directory, [postgres.port, urlsplit(issuer.url).port]))
    yield lab
    lab.stop()
