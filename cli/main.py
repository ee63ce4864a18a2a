"""`agentfn`: the command line of the local platform."""

from __future__ import annotations

import os
from pathlib import Path

import requests
import typer
from rich.console import Console

from .stack import PORTS, Stack

app = typer.Typer(help="agentfn: memory that cites, tools that run as the caller, a bounded agent loop.",
                  no_args_is_help=True, add_completion=False)
console = Console(stderr=True)

ISSUER = os.environ.get("AGENTFN_ISSUER_URL", f"http://127.0.0.1:{PORTS['issuer']}")


@app.command()
def up(var: Path = typer.Option(Path("var"), help="where data, secrets and logs are kept")):
    """Bring the whole platform up on this machine; Ctrl-C stops it."""
    stack = Stack(var, console)
    try:
        stack.up()
        stack.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stack.down()


@app.command()
def token(subject: str = typer.Argument(..., help="the subject (`sub`) of the caller"),
          groups: str = typer.Option("", help="comma-separated groups"),
          ttl: int = typer.Option(3600, help="seconds the token is valid")):
    """Print a dev caller token from the local dev issuer."""
    try:
        response = requests.post(f"{ISSUER}/v1/tokens", timeout=5, json={
            "subject": subject, "groups": [g for g in groups.split(",") if g], "ttl": ttl})
    except requests.ConnectionError:
        console.print(f"[red]the dev issuer is not answering at {ISSUER}[/]: start the platform with ./dev up")
        raise typer.Exit(1) from None
    response.raise_for_status()
    print(response.json()["token"])
