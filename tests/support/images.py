"""The platform from its images, as a person runs it: `agentfn up --images` in the background (tests/images)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentfn.cli import images
from agentfn.cli.postgres import EmbeddedPostgres

BIN = Path(sys.executable).parent
BANNER = "agentfn is up"
# What the environment of `agentfn up --images` holds that no container may see (tests/images/conftest.py).
HOST_SECRETS = {
    "person's token": "eyJhbGciOiJFUzI1NiJ9.person-token-of-the-shell",
    "collector header": "otlp-key-of-the-shell",
    "engine key": "engine-api-key-of-the-shell",
}


class Platform:
    """`agentfn up --images` in the background, as a person runs it in a second terminal."""

    def __init__(self, var: Path, engine_url: str, **env: str):
        self.var = var
        self.base = random.randrange(20000, 32000, 100)
        self.url = f"http://127.0.0.1:{self.base}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTFN_TIER", "AGENTFN_URL", "AGENTFN_TOKEN"))},
            "AGENTFN_DEV_PORT_BASE": str(self.base),
            "AGENTFN_ISSUER_URL": f"http://127.0.0.1:{self.base + 1}",
            "AGENTFN_TIERS": "fast",
            "AGENTFN_TIER_FAST_URL": engine_url,
            "AGENTFN_TIER_FAST_MODEL": "scripted",
            "AGENTFN_TIER_FAST_TOOL_MODE": "native",
            **env,
        }
        self.log = var.parent / "up.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 300) -> str:
        self.process = subprocess.Popen(
            [str(BIN / "agentfn"), "up", "--images", "--var", str(self.var)],
            env=self.env,
            stdout=open(self.log, "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started = time.monotonic()
        while BANNER not in (text := self.log.read_text()):
            if self.process.poll() is not None:
                return text  # it stopped: the caller reads why
            assert time.monotonic() - started < timeout, f"no banner in {timeout} s:\n{text[-3000:]}"
            time.sleep(0.2)
        time.sleep(0.5)  # the rest of the banner
        return self.log.read_text()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        EmbeddedPostgres(self.var / "postgres").stop("immediate")  # survives a killed `up` by design
        images.remove(self.containers())

    def containers(self) -> list[str]:
        """The names of this platform's containers that exist, running or not."""
        listed = subprocess.run(
            [*images.podman(), "ps", "--all", "--format", "json"], capture_output=True, text=True, check=True
        )
        names = [n for c in json.loads(listed.stdout or "[]") for n in c["Names"]]
        return [n for n in names if n.endswith(f"-{self.base}")]

    def token(self, subject: str, groups: str = "developers,platform-users") -> str:
        done = subprocess.run(
            [str(BIN / "agentfn"), "token", subject, "--groups", groups], env=self.env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}
