"""`agentfn`: the command line of the platform, the table of contents of its commands.

The local platform (`up`, `token`), and a caller's view of any gateway (`chat`, `memory`, `tools`,
`call`, `agents`) with `--url`/`AGENTFN_URL` and `--token`/`AGENTFN_TOKEN`; `audit` reads the registry.
The work is in the modules beside this one: client (the doors, problems), chat, entries, audit, render.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import images as containers
from . import render
from .client import Client, Failure, default_url, printable
from .parts import PORTS
from .settings import CliSettings
from .stack import Stack

app = typer.Typer(
    help="agentfn: memory that cites, tools that run as the caller, a bounded agent loop.",
    no_args_is_help=True,
    add_completion=False,
)
memory = typer.Typer(
    help="The caller's memory: facts and preferences kept, episodes of ended sessions.", no_args_is_help=True
)
app.add_typer(memory, name="memory")
console = Console(stderr=True)
out = Console()

ISSUER = CliSettings.from_env().issuer_url or f"http://127.0.0.1:{PORTS['issuer']}"


@dataclass
class Connection:
    url: str
    token: str | None

    def client(self) -> Client:
        return Client(self.url, self.token)


@app.callback()
def connection(
    ctx: typer.Context,
    url: str = typer.Option(
        None,
        envvar="AGENTFN_URL",
        show_default=False,
        help="the gateway (default: the local one, port $AGENTFN_DEV_PORT_BASE or 8800)",
    ),
    token: str = typer.Option(
        None, envvar="AGENTFN_TOKEN", show_default=False, help="the caller's token (agentfn token SUBJECT --groups ...)"
    ),
):
    ctx.obj = Connection(url or default_url(), token)


@contextmanager
def shown() -> Iterator[None]:
    """A failure is its title and detail on stderr and an exit code, never a traceback."""
    try:
        yield
    except Failure as failure:
        console.print(Text(failure.title, style="bold red"))
        if failure.detail:
            console.print(Text(failure.detail))
        raise typer.Exit(failure.code) from None


@app.command()
def up(
    var: Path = typer.Option(Path("var"), help="where data, secrets and logs are kept"),
    images: bool = typer.Option(
        False, "--images", help="run each function and the operator from its image (agentfn images), as the chart does"
    ),
):
    """Bring the whole platform up on this machine; Ctrl-C stops it."""
    stack = Stack(var, console, images=images)
    try:
        stack.up()
        stack.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stack.down()


@app.command()
def images(
    parts: list[str] = typer.Argument(None, help=f"which images (default: all): {', '.join(containers.IMAGES)}"),
    base: str = typer.Option(
        None,
        help=f"the base image (default {containers.PUBLIC_BASE}; where it cannot be pulled, a stand-in is made from "
        "Debian's packages)",
    ),
    embedding_model: str = typer.Option(
        containers.default_embedding_model(),
        help="memory's embedder, baked into its image (qwen3-embedding-0.6b is fetched from the hub at build time)",
    ),
    logs: Path = typer.Option(Path("var/logs/images"), help="where each image's build log is kept"),
    cache: bool = typer.Option(True, help="reuse layers built before (--no-cache builds every layer anew)"),
):
    """Build every function's image and the operator's with podman, from the repository's Dockerfiles, each
    installing its group's lock (locks/) with the hashes checked."""
    started = time.monotonic()
    unknown = sorted(set(parts or ()) - set(containers.IMAGES))
    if unknown:
        console.print(
            Text.assemble((f"no such image: {', '.join(unknown)}", "red"), f" (the images: {', '.join(containers.IMAGES)})")
        )
        raise typer.Exit(2)
    built = containers.build(base, embedding_model, logs, console, parts or containers.IMAGES, cache=cache)
    table = Table("image", "built in", "size", "over the base", box=None)
    for one in built:
        table.add_row(
            containers.image(one.part), f"{one.seconds:.0f} s", containers.mib(one.size), containers.mib(one.added)
        )
    out.print(table)
    out.print(f"{len(built)} images in {time.monotonic() - started:.0f} s; run the platform from them: ./dev up --images")


@app.command()
def token(
    subject: str = typer.Argument(None, help="the subject (`sub`) of a caller token"),
    groups: str = typer.Option("", help="comma-separated groups of the caller"),
    service: str = typer.Option(
        None, help="mint a service token for this account instead, e.g. system:serviceaccount:agentfn:agentfn-model"
    ),
    audience: str = typer.Option(
        None,
        help="the token's audience (default: agentfn for a caller, agentfn-memory "
        "for a service); /mcp takes only its resource URL, "
        "e.g. http://127.0.0.1:8800/mcp",
    ),
    ttl: int = typer.Option(3600, help="seconds the token is valid"),
):
    """Print a dev token from the local dev issuer: a caller token, or with --service a service token."""
    if (subject is None) == (service is None):
        console.print("[red]name a subject, or --service ACCOUNT[/]")
        raise typer.Exit(2)
    if service:
        door, body = "/v1/service-tokens", {"account": service}
    else:
        door, body = "/v1/tokens", {"subject": subject, "groups": [g for g in groups.split(",") if g], "ttl": ttl}
    if audience:
        body["audience"] = audience
    try:
        response = requests.post(ISSUER + door, json=body, timeout=5)
    except requests.ConnectionError:
        console.print(f"[red]the dev issuer is not answering at {ISSUER}[/]: start the platform with ./dev up")
        raise typer.Exit(1) from None
    if response.status_code != 200:
        console.print(Text(printable(str(response.json().get("error", response.text))), style="red"))
        raise typer.Exit(1)
    print(response.json()["token"])


@app.command()
def chat(
    ctx: typer.Context,
    agent: str = typer.Argument(..., help="the agent's name (`agentfn agents` lists them)"),
    message: str = typer.Option(None, "--message", "-m", help="send this one turn, print the answer and exit"),
    as_json: bool = typer.Option(False, "--json", help="print the turn's events as JSON lines"),
    yes: bool = typer.Option(False, "--yes", "-y", help="approve every call that changes state (for scripts)"),
):
    """Talk with an agent: lines from the terminal or a pipe; /end keeps the session as an episode, /quit leaves.

    A call that changes state (remember, forget, run_code) waits for you: `approve? [y/N]`."""
    from .chat import Chat

    with shown():
        session = Chat(ctx.obj.client(), agent, out, console, as_json, yes)
        if message is None:
            session.run()
        elif not session.turn(message):
            raise typer.Exit(1)


@memory.command("list")
def memory_list(ctx: typer.Context, kind: str = typer.Option(None, help="fact, preference or episode")):
    """The caller's entries, newest first."""
    with shown():
        found = ctx.obj.client().entries(kind)
    out.print(render.entries(found) if found else Text("no entries", style="dim"))


@memory.command("search")
def memory_search(
    ctx: typer.Context,
    query: str = typer.Argument(..., help="a question, as recall would see it"),
    kind: list[str] = typer.Option(None, help="only this kind (repeat for more)"),
):
    """What recall finds for a question: the caller's nearest entries above the model's threshold."""
    with shown():
        found = ctx.obj.client().json("POST", "/v1/recall", json={"query": query, **({"kinds": kind} if kind else {})})
    out.print(render.recalled(found["entries"], ()) if found["entries"] else Text("recall finds nothing", style="dim"))
    out.print(Text(f"similarity >= {found['threshold']} · {found['model']}", style="dim"))


@memory.command("add")
def memory_add(
    ctx: typer.Context,
    text: str = typer.Argument(..., help="what to keep"),
    kind: str = typer.Option("fact", help="fact or preference"),
    source: str = typer.Option("agentfn cli", help="where it comes from: the source it is cited by"),
):
    """Keep a fact or a preference."""
    from . import entries

    with shown():
        kept = entries.add(ctx.obj.client(), kind, text, source)
        out.print(render.entry(kept, "already kept" if kept.get("existing") else "kept"))


@memory.command("edit")
def memory_edit(
    ctx: typer.Context,
    entry_id: str = typer.Argument(..., metavar="ID", help="an id or its prefix"),
    text: str = typer.Option(None, help="the corrected text"),
    source: str = typer.Option(None, help="the corrected source"),
):
    """Correct an entry's text or source."""
    from . import entries

    with shown():
        out.print(render.entry(entries.edit(ctx.obj.client(), entry_id, text, source), "corrected"))


@memory.command("forget")
def memory_forget(
    ctx: typer.Context,
    entry_id: str = typer.Argument(None, metavar="ID", help="an id or its prefix", show_default=False),
    every: bool = typer.Option(False, "--all", help="forget every entry you have, of every kind"),
    yes: bool = typer.Option(False, "--yes", "-y", help="with --all: do not ask for the phrase (scripts)"),
):
    """Forget an entry: it and its vector are deleted. --all forgets every entry, once you type `forget everything`."""
    from . import entries

    with shown():
        if every == (entry_id is not None):
            raise Failure("name one entry, or --all", "agentfn memory forget ID  |  agentfn memory forget --all", code=2)
        if entry_id is not None:
            out.print(Text(f"forgot {entries.forget(ctx.obj.client(), entry_id)}"))
            return
        client = ctx.obj.client()
        if not yes:
            confirm_forget_all(entries.counts(client))
        out.print(render.receipt(entries.forget_all(client)), highlight=False)


def confirm_forget_all(counted: dict[str, int]) -> None:
    """The person types the phrase memory asks for; anything else (or no answer) forgets nothing."""
    from .entries import PHRASE

    console.print(
        f"You have {render.kinds(counted)}. Forgetting everything deletes them all, with their vectors; "
        "it cannot be undone.",
        highlight=False,
    )
    try:
        typed = console.input(f"Type [bold]{PHRASE}[/] to go on: ")
    except EOFError:
        typed = ""
    if typed.strip() != PHRASE:
        raise Failure("nothing was forgotten", f"the confirmation is the phrase `{PHRASE}` (or --yes in a script)")


@app.command()
def agents(ctx: typer.Context):
    """The agents the caller may use, with the tools each may call for them and their limits."""
    with shown():
        found = ctx.obj.client().json("GET", "/v1/agents")["agents"]
    out.print(render.agents(found) if found else Text("no agent is granted to this caller", style="dim"))


@app.command()
def tools(ctx: typer.Context):
    """The tools the caller may call on their own (ListTools)."""
    with shown():
        found = ctx.obj.client().json("GET", "/v1/tools")["tools"]
    out.print(render.tools(found) if found else Text("no tool is granted to this caller", style="dim"))


def argument_value(raw: str):
    """A value as JSON when it parses (numbers, booleans, lists), else the string itself."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@app.command()
def call(
    ctx: typer.Context,
    tool: str = typer.Argument(..., help="the tool's name (`agentfn tools` lists them)"),
    arg: list[str] = typer.Option([], "--arg", "-a", help="an argument as key=value; repeat for more"),
    as_json: str = typer.Option(None, "--json", help="the arguments as one JSON object"),
):
    """Call a tool on its own, as the caller (CallTool), and print what it found."""
    with shown():
        arguments = {}
        if as_json is not None:
            try:
                arguments = json.loads(as_json)
            except ValueError as error:
                raise Failure("--json is not JSON", str(error), code=2) from None
            if not isinstance(arguments, dict):
                raise Failure("--json must be a JSON object", code=2)
        for pair in arg:
            key, equals, value = pair.partition("=")
            if not equals or not key:
                raise Failure(f"--arg {pair}: not key=value", code=2)
            arguments[key] = argument_value(value)
        content = ctx.obj.client().json("POST", f"/v1/tools/{tool}/call", json={"arguments": arguments})["content"]
    print(content if isinstance(content, str) else json.dumps(content, indent=2, ensure_ascii=False))


@app.command()
def audit(
    ctx: typer.Context,
    registry: str = typer.Argument(
        CliSettings.from_env().registry_file,
        help="the registry file, or - for standard input; or `calls`: the tool calls made, from the gateway (admins only)",
    ),
    kube: bool = typer.Option(False, "--kube", help="read the ConfigMap agentfn-registry through kubectl"),
    namespace: str = typer.Option("agentfn", help="the ConfigMap's namespace (with --kube)"),
    as_json: bool = typer.Option(False, "--json", help="rows as JSON objects (calls: one a line)"),
    as_csv: bool = typer.Option(False, "--csv", help="calls: rows as CSV with a header"),
    agent: str = typer.Option(None, help="calls: of this agent only"),
    tool: str = typer.Option(None, help="calls: of this tool only"),
    channel: str = typer.Option(None, help="calls: step, alone or mcp"),
    outcome: str = typer.Option(None, help="calls: ok, error, needs_approval, declined or repeat"),
    since: str = typer.Option(None, help="calls: from this ISO 8601 time"),
    before: str = typer.Option(None, help="calls: before this ISO 8601 time"),
    limit: int = typer.Option(50, min=1, help="calls: at most this many, newest first"),
):
    """Who may call what: one row per agent, tool and channel, from the registry. `agentfn audit calls`: the tool
    calls made (when, who hashed, agent, tool, channel, outcome, ms, grant; never arguments or results)."""
    if registry == "calls":
        from .audit import CALL_COLUMNS, calls, csv_text, flat

        with shown():
            found = calls(
                ctx.obj.client(), limit, agent=agent, tool=tool, channel=channel, outcome=outcome, since=since, before=before
            )
        if as_json:
            for row in found:
                print(json.dumps(row, ensure_ascii=False))
        elif as_csv:
            print(csv_text(found), end="")
        else:
            out.print(
                render.grants(
                    [c.upper() for c in CALL_COLUMNS], [[_cell(flat(r).get(c)) for c in CALL_COLUMNS] for r in found]
                )
            )
        return
    from agentfn.shared.grants import HEADER, records, rows

    from .audit import registry as read

    with shown():
        found = rows(read(registry, kube, namespace))
    if as_json:
        print(json.dumps(records(found), indent=2))
    else:
        out.print(render.grants(HEADER, found))


def _cell(value) -> str:
    return "-" if value is None else str(value)
