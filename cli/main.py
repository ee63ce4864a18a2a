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
def token(subject: str = typer.Argument(None, help="the subject (`sub`) of a caller token"),
          groups: str = typer.Option("", help="comma-separated groups of the caller"),
          service: str = typer.Option(None, help="mint a service token for this account instead, "
                                                 "e.g. system:serviceaccount:agentfn:agentfn-model"),
          ttl: int = typer.Option(3600, help="seconds the token is valid")):
    """Print a dev token from the local dev issuer: a caller token, or with --service a service token."""
    if (subject is None) == (service is None):
        console.print("[red]name a subject, or --service ACCOUNT[/]")
        raise typer.Exit(2)
    if service:
        door, body = "/v1/service-tokens", {"account": service}
    else:
        door, body = "/v1/tokens", {"subject": subject, "groups": [g for g in groups.split(",") if g], "ttl": ttl}
    try:
        response = requests.post(ISSUER + door, json=body, timeout=5)
    except requests.ConnectionError:
        console.print(f"[red]the dev issuer is not answering at {ISSUER}[/]: start the platform with ./dev up")
        raise typer.Exit(1) from None
    if response.status_code != 200:
        console.print(f"[red]{response.json().get('error', response.text)}[/]")
        raise typer.Exit(1)
    print(response.json()["token"])
