"""The local platform's processes: each part started in a session of its own that dies with `agentfn up`, stopped
with its whole group, and the words its log ends with when it dies."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import BinaryIO

from .parts import BIN, HOST, Part

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child before exec: the kernel sends it SIGTERM if `agentfn up` itself dies (even by SIGKILL)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def command(part: Part) -> list[str]:
    """The part's own command, or gunicorn serving its app, as a function is served in a cluster."""
    return part.argv or [str(BIN / "gunicorn"), "-c", "python:agentfn.shared.gunicorn_conf", part.app]


def start(part: Part, argv: list[str], log: BinaryIO) -> None:
    env = {**os.environ, **part.env, "PORT": str(part.port), "AGENTFN_BIND": HOST}
    part.process = subprocess.Popen(
        argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent
    )


def stop(parts: list[Part]) -> None:
    """SIGTERM to every part's group, the last started first; a group still there after 15 s is killed."""
    for part in reversed(parts):
        if part.process and part.process.poll() is None:
            os.killpg(part.process.pid, signal.SIGTERM)
    for part in parts:
        if part.process:
            try:
                part.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(part.process.pid, signal.SIGKILL)


def last_words(log: Path) -> str:
    """The error that ended a process: the last line of the last exception gunicorn logged (as JSON), else the
    log's last line (a plain process's own message)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("exc"), str):
            return record["exc"].strip().splitlines()[-1][:300]
    return lines[-1][:300] if lines else "(no output)"
