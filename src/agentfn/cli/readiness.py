"""When the local platform's parts are ready: each part's door answers (or its file is written), and then the
offline engine's prompt cache is warmed with each agent's system prompt, so that the first turn is as quick as the
later ones."""

from __future__ import annotations

import time
from pathlib import Path

import requests
from rich.console import Console

from . import tokens
from .parts import HOST, MODEL_SERVICE_AUDIENCE, PORTS, SERVICE_ACCOUNT, TOUR, Part
from .processes import last_words


def is_ready(part: Part) -> bool:
    if part.ready_file is not None:
        return part.ready_file.exists()
    try:
        return requests.get(part.url + part.ready, timeout=2).status_code == part.ready_status
    except requests.RequestException:
        return False


def exited(part: Part, log: Path) -> SystemExit:
    """A part that died at start: why, in its own words (a missing dependency says so), not a traceback."""
    return SystemExit(f"{part.name} exited (code {part.process.returncode}): {last_words(log)}\nsee {log}")


def wait_ready(part: Part, log: Path, console: Console, since: float, timeout: float = 180) -> float:
    """Seconds until `part` is ready, showing what it is busy with; `since` is when the stack began starting."""
    started = time.monotonic()
    with console.status(f"starting {part.name}" + (f": {part.doing}" if part.doing else "")):
        while time.monotonic() - started < timeout:
            if part.process.poll() is not None:
                raise exited(part, log)
            if is_ready(part):
                where = part.url if part.port else part.ready_file
                console.print(f"[green]✓[/] {part.name} ready: {where} ({time.monotonic() - since:.1f} s)")
                return time.monotonic() - started
            time.sleep(0.1)
    raise SystemExit(f"{part.name} was not ready in {timeout:.0f} s; see {log}")


def warm_engine(since: float) -> str:
    """The offline engine's prompt cache, given the system prompt of each agent the tour's person is granted, as
    the model function builds it for their turns (the code reviewer's first): the first turn then reads only
    what is new, as later turns do, instead of the whole prompt (about 900 tokens: most of a minute on 2
    cores). An engine of one's own is sent nothing unasked. Returns the line saying how it went."""
    started = time.monotonic()
    subject, groups = TOUR
    try:
        # The door is the platform's own: the model function's account asks (a token of its service audience,
        # as a projected token would be), naming the person whose turns to warm by their token.
        service = tokens.issued(SERVICE_ACCOUNT, MODEL_SERVICE_AUDIENCE)
        person = requests.post(
            f"{tokens.ISSUER}/v1/tokens", json={"subject": subject, "groups": groups.split(","), "ttl": 900}, timeout=5
        )
        person.raise_for_status()
        answer = requests.post(
            f"http://{HOST}:{PORTS['model']}/internal/v1/engines/warm",
            headers={"Authorization": f"Bearer {service}"},
            json={"caller": person.json()["token"]},
            timeout=900,
        )
        answer.raise_for_status()
        agents = answer.json()["agents"]
    except (requests.RequestException, ValueError, KeyError) as error:
        return (
            f"[yellow]![/] the engine's prompt cache was not warmed ({type(error).__name__}): the first turn reads "
            "the whole system prompt"
        )
    warmed = ", ".join(a["agent"] for a in agents if a["ok"]) or "no agent"
    missed = ", ".join(f"{a['agent']} ({a.get('failed', 'failed')})" for a in agents if not a["ok"])
    return (
        f"[green]✓[/] engine's prompt cache warmed for {warmed}{f'; not for {missed}' if missed else ''} "
        f"in {time.monotonic() - started:.1f} s ({time.monotonic() - since:.1f} s)"
    )
