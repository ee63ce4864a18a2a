"""The workbench's test parts: the dev stack as `agentfn up` runs it, its engine the scripted one (a TEST DOUBLE
of the LLM's choices, outside this project), and Debian's Chromium driven by Playwright.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest
from support.workbench import Stack

from agentfn.cli.postgres import EmbeddedPostgres
from agentfn.devstack.harness.servers import BIN, ROOT, Served
from agentfn.devstack.scripted_engine import create_app as engine_app


@pytest.fixture(scope="session")
def workbench_stack(tmp_path_factory):
    engine = Served(engine_app())
    home = tmp_path_factory.mktemp("workbench")
    home.chmod(0o755)  # Postgres (its own user) reaches its data directory
    base = random.randrange(20000, 32000, 100)
    env = {
        **os.environ,
        "AGENTFN_DEV_PORT_BASE": str(base),
        "AGENTFN_URL": f"http://127.0.0.1:{base}",
        "AGENTFN_ISSUER_URL": f"http://127.0.0.1:{base + 1}",
        "AGENTFN_TIER_FAST_URL": engine.url + "/v1",
        "AGENTFN_TIER_FAST_MODEL": "scripted",
        "AGENTFN_TIER_FAST_TOOL_MODE": "native",
    }
    log = home / "up.log"
    process = subprocess.Popen(
        [str(BIN / "agentfn"), "up", "--var", str(home / "var")],
        env=env,
        cwd=ROOT,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while "agentfn is up" not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no banner in 300 s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    yield Stack(f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}", engine.url, env)
    process.send_signal(signal.SIGINT)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
    EmbeddedPostgres(home / "var" / "postgres").stop("immediate")
    engine.stop()


@pytest.fixture
def browser_page(browser, request):
    """A fresh browser (no storage, no sign-in) at desktop size; a script error or a dialog fails the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    troubles: list[str] = []
    opened.on("pageerror", lambda error: troubles.append(f"script error: {error}"))
    opened.on("dialog", lambda dialog: (troubles.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    yield opened
    context.close()
    assert not troubles, troubles
