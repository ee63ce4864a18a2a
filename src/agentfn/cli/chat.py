"""`agentfn chat AGENT`: a conversation with an agent, kept here, sent whole on every turn.

The service keeps no transcript, so this process holds the conversation (in memory only: never written
to a file or a log). Each turn streams: a line saying so when it waits for the engine to read the agent's prompt
(the platform warming it as it starts), tool steps as cards, the answer as it arrives, then the recalled
entries with the cited ones marked, and one dim line of usage and timing.

A step that changes state waits for the person: its card shows the exact arguments and asks
`approve? [y/N]` (`--yes` approves every one, for scripts; a command typed there, such as /end, declines
the call and then runs); then the same conversation is sent again, unchanged, with the answers (an
approval runs only in the conversation that asked for it), and the approved calls run as the first steps
of that turn, which goes on to the answer.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

from rich.console import Console
from rich.text import Text

from . import render
from .client import Client, Failure

HELP = """commands:
  /end [closing words]  end the session: the conversation is summarised and kept as an episode,
                        then a fresh conversation starts (the summary covers the conversation up to
                        the person's last message; closing words are added as one)
  /help                 this list
  /quit                 leave (so does Ctrl-D); Ctrl-C stops an answer while it streams"""
# Approving turns in a row for one message: each may ask for another call, never for the same one again.
MAX_ASKS = 4


class Chat:
    def __init__(self, client: Client, agent: str, out: Console, err: Console, as_json: bool = False, yes: bool = False):
        self.client, self.agent, self.out, self.err, self.as_json = client, agent, out, err, as_json
        self.yes = yes
        self.messages: list[dict[str, str]] = []
        self.asked: list[dict] = []  # the last turn's steps awaiting the person's approval
        self.typed: list[str] = []  # a command typed at an approval prompt: it runs next

    def emit(self, name: str, data: dict) -> None:
        print(json.dumps({"event": name, "data": data}, ensure_ascii=False), flush=True)

    def failed(self, failure: Failure) -> None:
        self.err.print(Text(failure.title, style="bold red"))
        if failure.detail:
            self.err.print(Text(failure.detail))

    def turn(self, text: str) -> bool:
        """One turn; True when it finished. The person's message stays in the conversation when the turn ran,
        even if it ended early (its deadline, the engine), so /end still summarises it; not when it was
        refused or stopped with Ctrl-C."""
        conversation = [*self.messages, {"role": "user", "content": text}]
        approvals = None
        for _ in range(MAX_ASKS + 1):
            stream = self.client.turn(self.agent, conversation, approvals)
            try:
                answer = self.show(stream)
            except KeyboardInterrupt:
                stream.close()  # the connection closes: the platform ends the turn as cancelled
                if not self.as_json:
                    self.out.print()
                    self.out.print(Text("(answer stopped)", style="yellow"))
                return False
            except Failure as failure:
                self.failed(failure)
                return False
            if answer is None:
                self.messages = conversation
                return False
            if not self.asked:
                self.messages = conversation + ([{"role": "assistant", "content": answer}] if answer.strip() else [])
                return True
            # The same conversation again, unchanged (each approval runs only in the conversation that asked for
            # it), with the person's answers: the approved calls run first.
            approvals = [{"token": step["approval"], "approve": self.approve(step)} for step in self.asked]
        self.err.print(f"the agent asked for approval {MAX_ASKS} times in a row; send your message again to go on")
        self.messages = conversation
        return False

    def approve(self, step: dict) -> bool:
        """The person's answer to one call awaiting approval: --yes, or `approve? [y/N]` (anything but y is no)."""
        if self.yes:
            answer = True
        else:
            asker = self.err if self.as_json else self.out
            prompt = Text.assemble(
                (f"step {step.get('n')} · {render.tool_name(step)}: ", "bold"), ("approve? [y/N] ", "magenta")
            )
            try:
                if sys.stdin.isatty():
                    line = asker.input(prompt)
                else:
                    asker.print(prompt, end="")
                    line = sys.stdin.readline()
                    asker.print(Text(line.strip()))
            except (EOFError, KeyboardInterrupt):
                line = ""
            if line.strip().startswith("/"):
                self.typed.append(line.strip())  # the person meant the command: the call is declined, it runs
            answer = line.strip().lower() in ("y", "yes")
        if self.as_json:
            self.emit("approval", {"n": step.get("n"), "tool": step.get("tool"), "approve": answer})
        elif self.yes:
            self.out.print(Text(f"step {step.get('n')} · {render.tool_name(step)}: approved (--yes)", style="dim"))
        return answer

    def show(self, stream: Iterator[tuple[str, dict]]) -> str | None:
        """Draws a turn's events as they come; the answer, or None when the turn ended in an error."""
        pieces: list[str] = []
        recalled: dict = {}
        asked: dict[int, dict] = {}
        self.asked = []
        line_open = False  # the answer's current line is unfinished
        spinner = None
        try:
            for name, data in stream:
                if self.as_json:
                    self.emit(name, data)
                if name == "delta":
                    pieces.append(data.get("text", ""))
                elif name == "recall":
                    recalled = data
                elif name == "step" and data.get("status") == "needs_approval":
                    asked[data.get("n")] = data
                elif name == "done":
                    self.asked = [asked[n] for n in data.get("pending") or () if n in asked]
                if self.as_json:
                    if name in ("done", "error"):
                        return "".join(pieces) if name == "done" else None
                    continue
                if name == "wait":
                    # The platform is still warming the engine with this agent's prompt: the turn waits for it.
                    self.out.print(Text(f"{data.get('detail') or 'the engine is busy'}: the turn waits for it", style="dim"))
                elif name == "delta":
                    if not line_open:
                        self.out.print(Text("agent> ", style="bold cyan"), end="")
                    self.out.print(Text(data.get("text", "")), end="", soft_wrap=True)
                    line_open = True
                elif name == "step":
                    if line_open:
                        self.out.print()
                        line_open = False
                    if data.get("status") == "started":
                        if self.out.is_terminal:
                            spinner = self.out.status(Text(f"step {data.get('n')} · {render.tool_name(data)} …"))
                            spinner.start()
                    else:
                        if spinner is not None:
                            spinner.stop()
                            spinner = None
                        self.out.print(render.step(data))
                elif name in ("done", "error"):
                    if line_open:
                        self.out.print()
                        line_open = False
                    if name == "error":
                        self.failed(Failure(str(data.get("title", "Error")), str(data.get("detail", ""))))
                        return None
                    if recalled.get("unavailable"):
                        self.out.print(Text("memory did not answer: nothing was recalled", style="dim yellow"))
                    elif recalled.get("entries"):
                        self.out.print(render.recalled(recalled["entries"], data.get("cited") or []))
                    self.out.print(render.done(data))
                    return "".join(pieces)
        finally:
            if spinner is not None:
                spinner.stop()
        raise Failure("the stream ended before the turn did")

    def end(self, closing: str) -> bool:
        """Ends the session: the episode the platform kept is shown, and a fresh conversation starts."""
        messages = list(self.messages)
        if closing:
            messages.append({"role": "user", "content": closing})
        while messages and messages[-1]["role"] != "user":
            messages.pop()  # the door takes a conversation that ends with the person's message
        if not messages:
            self.err.print("nothing to end yet: say something first")
            return False
        try:
            episode = self.client.json("POST", f"/v1/agents/{self.agent}/sessions/end", json={"messages": messages})[
                "episode"
            ]
        except Failure as failure:
            self.failed(failure)
            return False
        if self.as_json:
            self.emit("episode", episode)
        else:
            self.out.print(render.entry(episode, "episode kept"))
            self.out.print(Text("a fresh conversation starts", style="dim"))
        self.messages = []
        return True

    def lines(self) -> Iterator[str]:
        """The person's lines: a prompt at a terminal, else standard input line by line, echoed."""
        interactive = sys.stdin.isatty()
        while True:
            if self.typed:
                yield self.typed.pop(0)
                continue
            try:
                if interactive:
                    line = self.out.input(Text("you> ", style="bold green"))
                else:
                    line = sys.stdin.readline()
                    if not line:
                        return
                    line = line.rstrip("\n")
                    if not self.as_json:
                        self.out.print(Text.assemble(("you> ", "bold green"), line))
            except EOFError:
                return
            except KeyboardInterrupt:
                self.out.print()
                self.out.print(Text("(/quit leaves)", style="dim"))
                continue
            yield line

    def run(self) -> None:
        # Asked first so that a wrong gateway, token or agent name is said before the person types.
        granted = {a["name"]: a for a in self.client.json("GET", "/v1/agents")["agents"]}
        if self.agent not in granted:
            raise Failure(f"no agent {self.agent} for this caller", "`agentfn agents` lists the ones you may use")
        if not self.as_json:
            agent = granted[self.agent]
            self.out.print(
                Text(
                    f"chat with {self.agent} ({agent['tier']} tier; tools: {', '.join(agent['tools'])}) "
                    f"at {self.client.url} · /help lists the commands",
                    style="dim",
                )
            )
        for line in self.lines():
            text = line.strip()
            if not text:
                continue
            command, _, rest = text.partition(" ")
            if command in ("/quit", "/exit"):
                return
            if command == "/help":
                self.out.print(HELP, markup=False, highlight=False)
            elif command == "/end":
                self.end(rest.strip())
            elif text.startswith("/"):
                self.err.print(f"no command {command}; /help lists them", markup=False)
            else:
                self.turn(text)
