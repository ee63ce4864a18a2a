"""The workbench's test helpers: the dev stack a test drives, and a screenshot of a screen.

Screenshots are kept in var/screenshots/workbench/ (test artifacts, never committed).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import requests

from agentfn.devstack.harness.servers import BIN, ROOT

SHOTS = ROOT / "var" / "screenshots" / "workbench"


@dataclass
class Stack:
    url: str
    issuer: str
    engine: str
    env: dict

    def token(self, subject: str, groups: str = "developers,platform-users") -> str:
        return subprocess.run(
            [str(BIN / "agentfn"), "token", subject, "--groups", groups],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def door(self, method: str, path: str, token: str, **kwargs) -> requests.Response:
        return requests.request(method, self.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=60, **kwargs)

    def script(self, *rounds: dict) -> str:
        """A script for the engine's next rounds; the person's message names it (`script:<id>`)."""
        return requests.post(self.engine + "/scripts", json={"rounds": list(rounds)}, timeout=5).json()["id"]


def shot(page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
