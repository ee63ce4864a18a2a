"""The platform from its images: `agentfn up --images` on this machine, every function and the operator's local mode
a container of the image `./dev images` built, under the chart's runtime settings.

Run after `./dev images`, with `./dev test --images tests/images` (CI does both after the main suite); without
`--images` this folder is not collected, so `./dev test` needs no container engine. The engine is the scripted
one (a test double of an LLM's choices), in this process; the dev upstreams behind the read tools are the stack's.
"""

from __future__ import annotations

import pytest
from support.images import BANNER, HOST_SECRETS, Platform

from agentfn.cli import images


@pytest.fixture(scope="session", autouse=True)
def built():
    """Every image is here (`./dev images`): a missing one fails the suite, never skips it."""
    images.check_built()


@pytest.fixture(scope="session")
def image_platform(scripted_engine, tmp_path_factory):
    # Postgres (its own user) reaches its data directory; the containers read what var/ hands them.
    home = tmp_path_factory.mktemp("platform")
    home.chmod(0o755)
    # This environment holds what a person's shell may: their own token, a collector's header, the path of their
    # engine's key. None of it is any container's but the engine key's, copied into the model function's own folder.
    key = home / "engine" / "api-key"
    key.parent.mkdir()
    key.write_text(HOST_SECRETS["engine key"])
    key.chmod(0o600)
    up = Platform(
        home / "var",
        f"{scripted_engine.url}/v1",
        AGENTFN_TOKEN=HOST_SECRETS["person's token"],
        OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer {HOST_SECRETS['collector header']}",
        AGENTFN_TIER_FAST_API_KEY_FILE=str(key),
    )
    up.engine_key = key
    shown = up.start()
    assert BANNER in shown, shown[-3000:]
    up.shown = shown
    yield up
    up.stop()
