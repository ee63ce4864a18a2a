"""A newcomer's first hour, end to end: a fresh clone, the README's first command, the tour through the CLI.

Everything is real and offline: embedded Postgres, the multilingual embedder, the default shipped model
(Qwen2.5-Coder-1.5B) on llama.cpp (greedy), every function under gunicorn behind the dev gateway.
The small model's wording is never asserted; the events, the records and the entries are. The dev upstreams
behind the read tools are the one test double (the platform services), as in `agentfn up` itself.

The tests of this module run in order and share one platform (it is started, stopped and restarted).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import py3langid
import pytest
import requests

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FIRST_COMMAND = re.search(r"```\w*\n(.*?)```", README, re.S).group(1).splitlines()[0]
BANNER = "agentfn is up"
PROBLEM = "application/problem+json"


def fresh_clone(into: Path) -> Path:
    """A clone of this repository, with the working tree's uncommitted changes laid over it (so a change is
    tried as it will land)."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(into)], check=True)
    changed = subprocess.run(
        ["git", "ls-files", "-m", "-o", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    for name in changed:
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


class Platform:
    """`./dev up` in a clone, in the background, as a newcomer runs it in a second terminal."""

    def __init__(self, clone: Path):
        self.clone = clone
        self.base = random.randrange(20000, 32000, 100)
        self.url = f"http://127.0.0.1:{self.base}"
        self.env = {**os.environ, "AGENTFN_DEV_PORT_BASE": str(self.base)}
        for name in [n for n in self.env if n.startswith(("AGENTFN_TIER", "AGENTFN_URL", "AGENTFN_TOKEN"))]:
            del self.env[name]
        self.process: subprocess.Popen | None = None
        self.starts: list[float] = []
        self.log = clone / "up.log"
        self.netns: str | None = None  # set once the platform moves into the tour's web (web_lab.py)

    def start(self, timeout: float = 900) -> str:
        offset = self.log.stat().st_size if self.log.exists() else 0
        started = time.monotonic()
        out = open(self.log, "a")
        enter = ["nsenter", f"--net={self.netns}", "--"] if self.netns else []
        self.process = subprocess.Popen(
            [*enter, "bash", "-c", FIRST_COMMAND],
            cwd=self.clone,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        while BANNER not in (text := self.since(offset)):
            assert self.process.poll() is None, text[-3000:]
            assert time.monotonic() - started < timeout, f"no banner in {timeout} s:\n{text[-3000:]}"
            time.sleep(0.25)
        time.sleep(0.5)  # the rest of the banner
        self.starts.append(time.monotonic() - started)
        return self.since(offset)

    def stop(self) -> str:
        offset = self.log.stat().st_size
        assert self.process.poll() is None, f"the platform stopped by itself:\n{self.log.read_text()[-3000:]}"
        os.killpg(self.process.pid, signal.SIGINT)  # Ctrl-C in its terminal reaches the whole group
        assert self.process.wait(90) == 0
        return self.since(offset)

    def since(self, offset: int) -> str:
        """The log from a byte offset on (its lines hold characters of several bytes: ✓, ─)."""
        return self.log.read_bytes()[offset:].decode(errors="replace")

    def cli(
        self, *args: str, token: str | None = None, stdin: str | None = None, timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess:
        env = {**self.env, **({"AGENTFN_TOKEN": token} if token else {}), "COLUMNS": "160"}
        done = subprocess.run(
            [str(self.clone / ".venv/bin/agentfn"), *args],
            cwd=self.clone,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert not check or done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def token(self, subject: str, groups: str = "developers,platform-users") -> str:
        return self.cli("token", subject, "--groups", groups).stdout.strip()

    def get(self, path: str, token: str, **params) -> requests.Response:
        return requests.get(self.url + path, headers={"Authorization": f"Bearer {token}"}, params=params, timeout=30)


@pytest.fixture(scope="module")
def newcomer_platform():
    # Not in pytest's temp tree: another pytest run on the machine prunes old trees, and Postgres (its own
    # user) must reach its data directory and the venv's pgvector inside.
    home = Path(tempfile.mkdtemp(prefix="agentfn-newcomer-"))
    home.chmod(0o755)
    clone = fresh_clone(home / "agentfn")
    up = Platform(clone)
    up.first = up.start()
    yield up
    if up.process.poll() is None:
        up.stop()
    subprocess.run(
        [
            str(clone / ".venv/bin/python"),
            "-c",
            "from agentfn.cli.postgres import EmbeddedPostgres as P; P('var/postgres').stop('immediate')",
        ],
        cwd=clone,
        check=False,
    )
    shutil.rmtree(home, ignore_errors=True)
    timings = {"first_start_s": round(up.starts[0], 1), "later_starts_s": [round(s, 1) for s in up.starts[1:]]}
    (ROOT / "var").mkdir(exist_ok=True)
    (ROOT / "var" / "newcomer-timings.json").write_text(json.dumps(timings))


@pytest.fixture(scope="module")
def web(newcomer_platform, tmp_path_factory):
    """The tour's web: the platform, installed and started once on the host, moves into a network namespace
    where https://example.com is the test's own page (web_lab.py); its gateway and issuer stay reachable at
    the same host ports. Every later test of the module runs against it there."""
    if os.geteuid() != 0:
        pytest.skip("the tour's web is a network namespace of the test's own: run as root")
    directory = tmp_path_factory.mktemp("web")
    newcomer_platform.stop()
    lab = subprocess.Popen(
        [
            sys.executable,  # the tests' own: the lab needs what only they install (dnslib), never the clone's platform
            str(Path(__file__).with_name("web_lab.py")),
            "--dir",
            str(directory),
            "--expose",
            str(newcomer_platform.base),
            "--expose",
            str(newcomer_platform.base + 1),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(directory / "lab.log", "wb"),
    )
    line = lab.stdout.readline()
    assert line, (directory / "lab.log").read_text()
    newcomer_platform.netns = f"/proc/{json.loads(line)['pid']}/ns/net"
    newcomer_platform.env.update({"AGENTFN_DNS_SERVERS": "127.0.0.1:53", "AGENTFN_PAGE_CA_FILE": str(directory / "ca.pem")})
    newcomer_platform.start()
    yield lab
    if newcomer_platform.process.poll() is None:
        newcomer_platform.stop()
    lab.stdin.close()
    lab.wait(10)


def events(output: str) -> list[tuple[str, dict]]:
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return [(e["event"], e["data"]) for e in lines]


def steps_of(found: list[tuple[str, dict]]) -> list[dict]:
    return [d for n, d in found if n == "step"]


SINGLE = ("needs_approval", "declined", "repeat")  # steps streamed once: nothing ran, or the earlier result


def check_turn(found: list[tuple[str, dict]], tools: set[str]) -> dict:
    """The shape every turn has, whatever the model chose: recall first, steps that ran in started/ended
    pairs of the agent's own tools (a call awaiting approval, declined or repeated is one event), deltas,
    then `done` with the citations among what was recalled, or, when the small model on a busy machine
    runs out the agent's deadline or writes outside the tool format, that problem."""
    names = [n for n, _ in found]
    assert names[0] == "recall" and names[-1] in ("done", "error"), names
    everything = steps_of(found)
    single = [s for s in everything if s["status"] in SINGLE]
    steps = [s for s in everything if s["status"] not in SINGLE]
    pairs = len(steps) // 2 + len(steps) % 2
    assert [s["status"] == "started" for s in steps] == [True, False] * (len(steps) // 2) + [True] * (len(steps) % 2)
    assert all(s["tool"] in tools for s in everything) and pairs + len(single) <= 4  # at most 4 calls a turn
    end = found[-1][1]
    if names[-1] == "error":
        # The loop's bound (the deadline), or the small model writing outside the tool format: a problem.
        assert (end["status"], end["type"].rsplit("/", 1)[-1]) in ((504, "deadline"), (502, "engine")), end
        assert "generation_id" in end, end
        return end
    recalled = {e["id"] for e in found[0][1]["entries"]}
    assert set(end["cited"]) <= recalled and end["steps"] == pairs + len(single) and len(steps) % 2 == 0
    assert [s["n"] for s in everything if s["status"] == "needs_approval"] == end["pending"]
    return end


def turns_of(found: list[tuple[str, dict]]) -> list[list[tuple[str, dict]]]:
    """The turns of one `chat -m` (the person's answers to approvals go in a second turn): each starts with
    its recall."""
    turns: list[list[tuple[str, dict]]] = []
    for name, data in found:
        if name == "recall":
            turns.append([])
        if turns and name != "approval":
            turns[-1].append((name, data))
    return turns


REVIEWER_TOOLS = {"run_code", "platform_status", "open_page", "remember", "forget"}


def test_the_first_command_shows_progress_then_one_banner(newcomer_platform):
    shown = newcomer_platform.first
    for progress in (
        "installing agentfn",
        "Postgres on",
        "engine ready",
        "memory ready",
        "page ready",
        "run_code ready",
        "model ready",
        "gateway ready",
    ):
        assert progress in shown, progress
    assert shown.count(BANNER) == 1
    banner = shown[shown.index(BANNER) :]
    assert newcomer_platform.url in banner and "agentfn token alice --groups developers,platform-users" in banner
    assert "agentfn chat code-reviewer" in banner
    assert "Qwen2.5-Coder-1.5B-Instruct offline on llama.cpp (AGENTFN_ENGINE_MODEL=qwen2.5-coder-1.5b)" in banner
    resident = int(re.search(r"(\d+) MiB resident", banner).group(1))
    assert 1500 < resident < 4096, resident  # the engine alone holds the 1.1 GB model and its caches


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/internal/v1/episodes"),
        ("GET", "/internal/v1/episodes"),
        ("PUT", "/internal/anything"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/openapi.json"),
        ("POST", "/v1/open"),  # the page fetcher
        ("POST", "/v1/call"),  # a tool function
        ("GET", "/v1/tool"),
        ("GET", "/index.html"),  # the workbench is "/", its files and its settings, nothing else
        ("GET", "/assets/../internal/v1/episodes"),
        ("POST", "/v1/agents/../../internal/v1/episodes"),
        ("POST", "/v1/agents/%2e%2e/%2e%2e/internal/v1/episodes"),
        ("GET", "/v1/entriesx"),
        ("PATCH", "/v1/recall/x"),
        ("OPTIONS", "/mcpx"),
        ("GET", "/.well-known/jwks.json"),  # the dev issuer is not behind the gateway
        ("GET", "/v1/adminx"),
        ("GET", "/v1/admin/../../internal/v1/episodes"),
    ],
)
def test_the_gateway_answers_404_for_every_door_that_is_not_public(newcomer_platform, method, path):
    answer = requests.request(method, newcomer_platform.url + path, timeout=10)
    assert answer.status_code == 404 and answer.headers["Content-Type"] == PROBLEM


@pytest.mark.parametrize(
    "path", ["/v1/entries", "/v1/agents", "/v1/tools", "/v1/admin/generations", "/v1/admin/grants", "/v1/admin/calls"]
)
def test_the_public_doors_reach_their_function_which_checks_the_token(newcomer_platform, path):
    answer = requests.get(newcomer_platform.url + path, timeout=10)
    assert answer.status_code == 401 and answer.headers["Content-Type"] == PROBLEM


def test_the_workbench_is_at_the_site_root(newcomer_platform):
    page = requests.get(newcomer_platform.url + "/", timeout=10)
    assert page.status_code == 200 and "<title>agentfn workbench</title>" in page.text
    settings = requests.get(newcomer_platform.url + "/workbench.json", timeout=10).json()
    assert (
        settings["client_id"] == "agentfn-workbench"
        and settings["issuer"] == f"http://127.0.0.1:{newcomer_platform.base + 1}"
    )


def answer_of(turn: list[tuple[str, dict]]) -> str:
    return "".join(d["text"] for n, d in turn if n == "delta")


def test_the_tour(newcomer_platform, web):
    """README's five-minute tour, step by step, through the CLI, on the default offline engine at
    temperature 0: what the README says happens, happens."""
    alice = newcomer_platform.token("alice")
    # Keep a preference.
    kept = newcomer_platform.cli(
        "memory", "add", "Answer me in one short sentence.", "--kind", "preference", "--source", "tour", token=alice
    )
    entries = newcomer_platform.get("/v1/entries", alice).json()["entries"]
    assert [(e["kind"], e["text"], e["source"]) for e in entries] == [
        ("preference", "Answer me in one short sentence.", "tour")
    ]
    preference = entries[0]["id"]
    assert preference[:8] in kept.stdout

    # The chat, as the README has it: one session, its lines typed in order, the person answering `y` to the
    # one call they asked for; then /end. --json shows the same turns as events.
    typed = [
        "How long should your answers be?",
        "Run this Python code in the sandbox: print(6 * 7)",
        "y",
        "Open the page https://example.com and read it",
        "/end",
        "/quit",
    ]
    session = newcomer_platform.cli("chat", "code-reviewer", "--json", token=alice, stdin="\n".join(typed) + "\n")
    found = events(session.stdout)
    episode = [d for n, d in found if n == "episode"]
    asked, ran, approved, opened = turns_of([(n, d) for n, d in found if n != "episode"])
    for turn in (asked, ran, approved, opened):
        check_turn(turn, REVIEWER_TOOLS)

    # A question the preference answers: recalled and answered without a tool; a citation, when the model
    # writes one, names the preference (the README says the model may not cite or follow it).
    assert preference in [e["id"] for e in asked[0][1]["entries"]]
    done = asked[-1][1]
    assert done["cited"] in ([], [preference]) and done["steps"] == 0, done
    assert answer_of(asked).strip()

    # Code to run: the model asks, the person approves, the sandbox prints 42, the answer says it.
    asks = [d for n, d in ran if n == "step" and d["status"] == "needs_approval"]
    assert [(a["tool"], a["arguments"]["code"].replace(" ", "")) for a in asks] == [("run_code", "print(6*7)")], ran
    assert ran[-1][0] == "done" and ran[-1][1]["pending"] == [asks[0]["n"]]
    assert [d["approve"] for n, d in found if n == "approval"] == [True]
    runs = [d for n, d in approved if n == "step" and d["tool"] == "run_code" and d["status"] == "ok"]
    assert len(runs) == 1 and runs[0]["result"]["stdout"].strip() == "42", approved
    assert "42" in answer_of(approved)

    # A page to open: the person's own URL, fetched once, without asking (it changes nothing); its title shows.
    pages = [d for d in steps_of(opened) if d["tool"] == "open_page" and d["status"] == "ok"]
    assert len(pages) == 1 and pages[0]["result"]["title"] == "Example Domain", steps_of(opened)
    assert answer_of(opened).strip() and opened[-1][1]["pending"] == []

    # /end: the whole conversation, code and address included, is kept as an episode in alice's language.
    assert len(episode) == 1, session.stdout + session.stderr
    episodes = newcomer_platform.get("/v1/entries", alice, kind="episode").json()["entries"]
    assert [(e["id"], e["source"]) for e in episodes] == [(episode[0]["id"], "session")]
    assert py3langid.classify(episodes[0]["text"])[0] == "en", episodes[0]["text"]

    # The same tools, on their own where the table allows it: a reviewed read, as alice.
    assert "platform_status" in newcomer_platform.cli("tools", token=alice).stdout
    assert "services" in newcomer_platform.cli("call", "platform_status", token=alice).stdout
    refused = newcomer_platform.cli("call", "run_code", "--arg", "code=print(1)", token=alice, check=False)
    assert refused.returncode != 0 and "Not Found" in refused.stderr  # never callable on its own

    # memory list: the preference and the episode, nothing else (no junk the model kept on its own).
    listed = newcomer_platform.cli("memory", "list", token=alice).stdout
    mine = newcomer_platform.get("/v1/entries", alice).json()["entries"]
    assert sorted(e["kind"] for e in mine) == ["episode", "preference"], mine
    assert all(e["id"][:8] in listed for e in mine)

    # Nobody else sees alice's entries; she forgets one and it is gone.
    bob = newcomer_platform.token("bob")
    assert newcomer_platform.get("/v1/entries", bob).json()["entries"] == []
    newcomer_platform.cli("memory", "forget", episodes[0]["id"], token=alice)
    assert episodes[0]["id"] not in json.dumps(newcomer_platform.get("/v1/entries", alice).json())

    # Who may call what, from the registry the operator's local mode wrote from examples/.
    audit = newcomer_platform.cli("audit", "var/registry/registry.json").stdout
    assert "code-reviewer-runs-code" in audit and "platform-status-for-everyone" in audit


def test_editing_an_example_updates_the_agents_while_it_runs(newcomer_platform):
    alice = newcomer_platform.token("alice")
    agents = newcomer_platform.clone / "examples" / "agents.yaml"
    agents.write_text(agents.read_text().replace("Guides visitors of the site:", "Greets visitors of the site:"))
    deadline = time.monotonic() + 30
    while "Greets visitors" not in json.dumps(newcomer_platform.get("/v1/agents", alice).json()):
        assert time.monotonic() < deadline, "the registry did not follow examples/"
        time.sleep(0.5)


def test_chat_in_a_terminal(newcomer_platform, tmp_path):
    """`agentfn chat` as a person sees it, in tmux: the prompt, the answer, the recalled entries, /end."""
    alice = newcomer_platform.token("alice")
    preference = "Answer me in one short sentence."
    if preference not in json.dumps(
        newcomer_platform.get("/v1/entries", alice).json()
    ):  # the small model may have forgotten it
        newcomer_platform.cli("memory", "add", preference, "--kind", "preference", "--source", "tour", token=alice)
    session = f"agentfn-chat-{newcomer_platform.base}"
    # --yes: the small model may ask to keep or forget a note
    command = f"cd {newcomer_platform.clone} && AGENTFN_TOKEN={alice} .venv/bin/agentfn chat code-reviewer --yes"
    env = {k: v for k, v in newcomer_platform.env.items() if k != "TMUX"}
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "60", command], env=env, check=True)

    def screen() -> str:
        return subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session, "-S", "-200"], capture_output=True, text=True, check=True
        ).stdout

    def until(predicate, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        while not predicate(text := screen()):
            assert time.monotonic() < deadline, text
            time.sleep(0.5)
        return text

    try:
        until(lambda s: "you>" in s, 60)
        subprocess.run(["tmux", "send-keys", "-t", session, "How short should your answers be?", "Enter"], check=True)
        answered = until(lambda s: s.count("you>") >= 2)
        # done's usage line and the recalled preference beside the answer; or the problem that ended the turn
        # (the small model writing outside the tool format, or the deadline), shown as its title.
        if "Engine failed" not in answered and "Deadline" not in answered:
            assert "tokens" in answered and preference in answered, answered
        subprocess.run(["tmux", "send-keys", "-t", session, "/end", "Enter"], check=True)
        ended = until(lambda s: "episode" in s.split("/end", 1)[-1] and s.count("you>") >= 3)
        (tmp_path / "chat-screen.txt").write_text(ended)
        (ROOT / "var").mkdir(exist_ok=True)
        (ROOT / "var" / "chat-screen.txt").write_text(ended)  # kept for the README and the closing note
        subprocess.run(["tmux", "send-keys", "-t", session, "/quit", "Enter"], check=True)
        deadline = time.monotonic() + 20
        while subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode == 0:
            assert time.monotonic() < deadline, "chat did not leave on /quit"
            time.sleep(0.2)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_a_restart_keeps_entries_and_a_forgotten_one_stays_gone(newcomer_platform):
    alice = newcomer_platform.token("alice")
    for text in ("The ledger's facts are append-only.", "The staging cluster is named kestrel."):
        newcomer_platform.cli("memory", "add", text, "--kind", "fact", "--source", "tour", token=alice)
    before = {e["id"]: e["text"] for e in newcomer_platform.get("/v1/entries", alice).json()["entries"]}
    assert "stopped" in newcomer_platform.stop()

    newcomer_platform.start()
    alice = newcomer_platform.token("alice")  # the dev issuer keeps its key pair in var/: old tokens stay valid too
    after = {e["id"]: e["text"] for e in newcomer_platform.get("/v1/entries", alice).json()["entries"]}
    assert after == before
    gone = next(i for i, t in after.items() if "kestrel" in t)
    newcomer_platform.cli("memory", "forget", gone, token=alice)
    newcomer_platform.stop()

    newcomer_platform.start()
    alice = newcomer_platform.token("alice")
    final = {e["id"] for e in newcomer_platform.get("/v1/entries", alice).json()["entries"]}
    assert final == set(before) - {gone}
    recalled = requests.post(
        newcomer_platform.url + "/v1/recall",
        headers={"Authorization": f"Bearer {alice}"},
        json={"query": "What is the staging cluster called?"},
        timeout=30,
    ).json()["entries"]
    assert gone not in [e["id"] for e in recalled]
    assert newcomer_platform.starts[-1] < newcomer_platform.starts[0]  # a second start reuses the install and the data
