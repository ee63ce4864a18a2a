"""The local platform as a person runs it (`agentfn up` in a process of its own, waited for until its banner, asked
for tokens as the banner says, stopped with Ctrl-C) and as a library (`local_platform`, the same parts in this
process)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import time
from pathlib import Path

from agentfn.cli.postgres import EmbeddedPostgres

from .servers import BIN

BANNER = "agentfn is up"


class Up:
    """`agentfn up --var HOME/var` on the ports from `base` (the gateway on `base`, the issuer on `base + 1`), its
    output in HOME/up.log."""

    def __init__(self, home: Path, base: int, env: dict[str, str] | None = None):
        self.home, self.base = Path(home), base
        self.url = f"http://127.0.0.1:{base}"
        self.env = {
            **(os.environ if env is None else env),
            "AGENTFN_DEV_PORT_BASE": str(base),
            "AGENTFN_ISSUER_URL": f"http://127.0.0.1:{base + 1}",
        }
        self.log = self.home / "up.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 300) -> float:
        """Seconds from the command to its banner (the offline engine loads a 1.1 GB model beside the rest)."""
        began = time.monotonic()
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                [str(BIN / "agentfn"), "up", "--var", str(self.home / "var")],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        while BANNER not in self.log.read_text():
            if self.process.poll() is not None:
                raise RuntimeError(f"agentfn up exited:\n{self.log.read_text()[-3000:]}")
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"no banner in {timeout:.0f} s:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        return time.monotonic() - began

    def token(self, *args: str) -> str:
        """`agentfn token ARGS`: a caller's (`alice`, `--groups`, ...) or a service's (`--service`) token."""
        return subprocess.run(
            [str(BIN / "agentfn"), "token", *args], env=self.env, capture_output=True, text=True, check=True
        ).stdout.strip()

    def stop(self) -> None:
        """Ctrl-C, as a person stops it; then its Postgres, which outlives a killed `up` by design."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        EmbeddedPostgres(self.home / "var" / "postgres").stop("immediate")


def local_platform(var: Path, **options):
    """The local platform (`agentfn up` as a library) in `var`, its progress lines kept off the caller's output."""
    from rich.console import Console

    from agentfn.cli.stack import Stack

    return Stack(var, Console(file=io.StringIO()), **options)
