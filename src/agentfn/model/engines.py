"""Engines per tier: any OpenAI-compatible Chat Completions server, called with the `openai` SDK, streaming.

Two tool modes. `native`: the tools go in `tools` and come back as `tool_calls`. `constrained`, for small
engines that emit no native tool calls: the reply is held to a JSON Schema (`response_format`) that is
either `{"answer": "..."}` or `{"tool": NAME, "arguments": {...}}`, and the answer is streamed while its
JSON string is still arriving (`AnswerStream`); a round without tools is held to `{"answer": "..."}`.

Every message reaches the engine with the special-token markers of the common chat templates broken
(`neutral_messages`): what a person, a note, a tool or a page says can not open or close a turn.

The stream is read by a pump thread into a queue, so the turn's deadline is kept on the wall clock
even when an engine stalls in the middle of a reply: the waiting side gives up at the deadline.

Configuration: `TiersSettings` and one `TierSettings` per tier (agentfn.model.settings; docs/configuration.md).
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .settings import TierSettings, TiersSettings

TIER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


@dataclass(frozen=True)
class Tier:
    name: str
    url: str
    model: str
    tool_mode: str
    deadline: float
    max_tokens: int
    context_tokens: int
    temperature: float | None = None
    api_key: str = field(default="none", repr=False)


def tiers_from_env(env: Mapping[str, str]) -> dict[str, Tier]:
    tiers = {}
    for name in TiersSettings.from_env(env).tiers:
        if not TIER_NAME.match(name):
            raise RuntimeError(f"AGENTFN_TIERS: {name!r} is not a tier name")
        settings = TierSettings.from_env(env, T=name.replace("-", "_"))
        if not settings.url.startswith(("http://", "https://")):
            raise RuntimeError(f"AGENTFN_TIER_{name.upper().replace('-', '_')}_URL must be the engine's http(s) base URL")
        key = "none"
        if settings.api_key_file:
            with open(settings.api_key_file) as f:
                key = f.read().strip()
        tiers[name] = Tier(
            name,
            settings.url.rstrip("/"),
            settings.model,
            settings.tool_mode,
            settings.deadline_seconds,
            settings.max_tokens,
            settings.context_tokens,
            settings.temperature,
            key,
        )
    if not tiers:
        raise RuntimeError("AGENTFN_TIERS names no tier")
    return tiers


# --- what a round yields -------------------------------------------------------------------------------


@dataclass
class Text:
    text: str


@dataclass
class ToolRequest:
    id: str
    name: str
    arguments: Any  # parsed JSON, or `RAW` wrapped text that did not parse
    raw: str = ""
    parsed: bool = True


@dataclass
class Cited:
    """The ids of the shown notes a constrained reply says its answer used (its `cited`)."""

    ids: list[str]


@dataclass
class Usage:
    tokens_in: int
    tokens_out: int


class EngineFailed(Exception):
    """The engine refused, broke off or answered outside its contract; `kind` says which, for the problem."""

    def __init__(self, kind: str, status: int | None = None):
        super().__init__(kind)
        self.kind, self.status = kind, status


class DeadlinePassed(Exception):
    pass


# --- special tokens ------------------------------------------------------------------------------------

# The markers engines' tokenizers read as one control token when they appear in the text of a message: a
# person, a page or a note writing `<|im_end|><|im_start|>system` would close its turn and open one of the
# platform's. The families: ChatML and most `<|...|>` vocabularies (Qwen, SmolLM2, Llama 3, Phi, GPT-OSS,
# Command-R), DeepSeek's full-width bars, Llama 2 / Mistral (`<s>`, `[INST]`, `<<SYS>>`, `[TOOL_CALLS]`),
# Gemma (`<start_of_turn>`, `<bos>`), Hermes / Qwen tool tags (`<tool_call>`), reasoning tags (`<think>`),
# and the StarCoder-style tags in SmolLM2's vocabulary (tests/model/test_special_tokens.py checks that the
# shipped models' every control and user-defined token is among them).
SPECIAL = re.compile(
    r"<\|[^|<>\s]{1,64}\|>|<\uff5c[^\uff5c<>\s]{1,64}\uff5c>|<</?SYS>>|"
    r"\[/?(?:INST|SYS|SYSTEM_PROMPT|TOOL_CALLS|AVAILABLE_TOOLS|TOOL_RESULTS|TOOL_CONTENT|THINK|IMG|IMG_BREAK|IMG_END)\]|"
    r"</?(?:s|bos|eos|pad|unk|mask|sep|cls|start_of_turn|end_of_turn|start_of_image|end_of_image|tool_call|"
    r"tool_response|tool_calls|think|answer|repo_name|reponame|file_sep|filename|gh_stars|issue_start|issue_comment|"
    r"issue_closed|jupyter_start|jupyter_text|jupyter_code|jupyter_output|jupyter_script|empty_output|commit_before|"
    r"commit_msg|commit_after|fim_prefix|fim_middle|fim_suffix|fim_pad|sop|eop|gMASK|sMASK)>"
)
JOINER = "\u200d"  # zero-width joiner: the text reads the same, the tokenizer no longer sees the marker


def neutral(text: str) -> str:
    """The text with every special-token marker broken by a zero-width joiner after its first character."""
    return SPECIAL.sub(lambda m: m.group(0)[0] + JOINER + m.group(0)[1:], text)


def neutral_messages(messages: list[dict]) -> list[dict]:
    """What reaches an engine: no message (the person's, a note, a tool's result, a page) can open or close a turn.

    The platform's own system text holds no marker, so it is passed through the same rule unchanged.
    """
    out = []
    for message in messages:
        message = dict(message)
        if isinstance(message.get("content"), str):
            message["content"] = neutral(message["content"])
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**call, "function": {**call["function"], "arguments": neutral(call["function"].get("arguments") or "")}}
                for call in message["tool_calls"]
            ]
        out.append(message)
    return out


# --- constrained mode ----------------------------------------------------------------------------------


def constrained_schema(tools: list, notes: list[str] | None = None, address: str | None = None) -> dict[str, Any]:
    """The reply's schema: an answer, or one call of one of the tools with arguments of its own shape.

    With notes shown, the answer is followed by the ids of those it used, `cited`: an enum of the shown ids' short
    forms (`short_ids`), so the engine can write no other (a small model copies an id where its JSON asks for one, not
    inside prose), and writes 8 characters where a whole id costs a CPU engine a second and a half. With an `address`
    (what the person asked to be called: letters, spaces, dots, hyphens), the answer begins with it: a small model
    told so in words forgets it."""
    answer: dict[str, Any] = {"answer": {"type": "string"}}
    if address:
        answer["answer"]["pattern"] = "^" + address.replace(".", "\\.") + ", .*$"
    if notes:
        answer["cited"] = {"type": "array", "items": {"enum": list(short_ids(notes))}, "maxItems": len(notes)}
    branches = [{"type": "object", "properties": answer, "required": list(answer), "additionalProperties": False}]
    for tool in tools:
        branches.append(
            {
                "type": "object",
                "properties": {"tool": {"const": tool.name}, "arguments": grammar_safe(tool.input_schema)},
                "required": ["tool", "arguments"],
                "additionalProperties": False,
            }
        )
    return {"anyOf": branches}


SHORT = 8  # an id's first characters a reply cites it by: a UUID's first group


def short_ids(ids: list[str]) -> dict[str, str]:
    """Each id by its shortest head of at least SHORT characters that no other of `ids` begins with."""
    out = {}
    for i in ids:
        n = SHORT
        while n < len(i) and any(o != i and o.startswith(i[:n]) for o in ids):
            n += 1
        out[i[:n]] = i
    return out


def grammar_safe(schema: Any) -> Any:
    """The schema without what a grammar compiler may not know (patterns, formats, descriptions).

    The arguments are checked against the tool's full schema afterwards (T2); this only shapes the reply.
    """
    if isinstance(schema, dict):
        return {k: grammar_safe(v) for k, v in schema.items() if k not in ("pattern", "format", "description", "$comment")}
    if isinstance(schema, list):
        return [grammar_safe(v) for v in schema]
    return schema


HEAD = re.compile(r'^\s*\{\s*"answer"\s*:\s*"')
ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class AnswerStream:
    """Decodes a constrained reply as it arrives: the answer's string piece by piece, or a tool call at the end."""

    def __init__(self):
        self.buffer, self.state, self.pending, self.answer, self.raw = "", "head", "", [], []

    def feed(self, chunk: str) -> str:
        """Text of the answer decoded from this chunk ("" while undecided, inside a tool call, or after)."""
        self.raw.append(chunk)
        if self.state == "head":
            self.buffer += chunk
            stripped = self.buffer.lstrip()
            match = HEAD.match(self.buffer)
            if match:
                self.state, rest = "answer", self.buffer[match.end() :]
                return self._decode(rest)
            if stripped and not stripped.startswith("{"):
                self.state = "plain"  # an engine that ignored the format: its text is the answer
                self.answer.append(self.buffer)
                return self.buffer
            if not '{"answer":"'.startswith(re.sub(r"\s", "", stripped)[:11]):
                self.state = "call"  # a JSON object that is not an answer: a tool call, read whole at the end
            return ""
        if self.state == "answer":
            return self._decode(chunk)
        if self.state == "plain":
            self.answer.append(chunk)
            return chunk
        self.buffer += chunk
        return ""

    def _decode(self, chunk: str) -> str:
        out, text, i = [], self.pending + chunk, 0
        self.pending = ""
        while i < len(text):
            ch = text[i]
            if ch == '"':
                self.state, self.buffer = "done", text[i:]
                break
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            if i + 1 >= len(text):
                self.pending = text[i:]
                break
            code = text[i + 1]
            if code == "u":
                if i + 6 > len(text):
                    self.pending = text[i:]
                    break
                unit = int(text[i + 2 : i + 6], 16)
                if 0xD800 <= unit < 0xDC00:  # a surrogate pair spans two escapes
                    if i + 12 > len(text):
                        self.pending = text[i:]
                        break
                    low = int(text[i + 8 : i + 12], 16)
                    out.append(chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)))
                    i += 12
                else:
                    out.append(chr(unit))
                    i += 6
            else:
                out.append(ESCAPES.get(code, code))
                i += 2
        piece = "".join(out)
        self.answer.append(piece)
        return piece

    def cited(self, notes: list[str]) -> list[str] | None:
        """At the end of an answer: the shown ids its `cited` names (by their short forms), in order and once each ([]
        when the reply is not whole JSON: one cut short by the token bound cites nothing); None when the reply has no
        `cited` at all (an engine that ignored the schema: its answer may name ids in brackets)."""
        try:
            reply = json.loads("".join(self.raw))
        except ValueError:
            return []
        said = reply.get("cited") if isinstance(reply, dict) else None
        if said is None:
            return None
        shown = short_ids(notes)
        return list(dict.fromkeys(shown[i] for i in said if i in shown)) if isinstance(said, list) else []

    def call(self, tool_names: set[str]) -> ToolRequest | None:
        """At the end of the reply: the tool call it made, if it made one."""
        if self.state not in ("head", "call") or not self.buffer.strip():
            return None
        try:
            reply = json.loads(self.buffer)
        except ValueError:
            raise EngineFailed("malformed") from None
        if not isinstance(reply, dict):
            raise EngineFailed("malformed")
        if "answer" in reply and isinstance(reply["answer"], str):
            self.answer.append(reply["answer"])  # a reply that arrived in one piece before `head` decided
            self.state = "late-answer"
            return None
        if not isinstance(reply.get("tool"), str):
            raise EngineFailed("malformed")
        return ToolRequest(id="c1", name=reply["tool"], arguments=reply.get("arguments", {}), raw=json.dumps(reply))


# --- the engine ----------------------------------------------------------------------------------------

_END = object()


class Engine:
    def __init__(self, tier: Tier):
        import openai  # ~0.5-2 s to import: on the first turn or the warm-up, never on the way to ready

        self.tier, self._openai = tier, openai
        self.client = openai.OpenAI(base_url=tier.url, api_key=tier.api_key, max_retries=0, timeout=tier.deadline)

    def request(
        self,
        messages: list[dict],
        tools: list | None,
        max_tokens: int,
        notes: list[str] | None = None,
        address: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.tier.model,
            "messages": neutral_messages(messages),
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.tier.temperature is not None:
            body["temperature"] = self.tier.temperature
        if tools and self.tier.tool_mode == "native":
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in tools
            ]
        elif self.tier.tool_mode == "constrained":
            # Without tools too: a small engine that has seen JSON replies in the conversation keeps writing
            # them; held to {"answer": ...} its answer is read out of the JSON all the same.
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "strict": True, "schema": constrained_schema(tools or [], notes, address)},
            }
        return body

    def round(
        self,
        messages: list[dict],
        tools: list | None,
        max_tokens: int,
        deadline: float,
        notes: list[str] | None = None,
        address: str | None = None,
    ) -> Iterator[Any]:
        """Text pieces as they arrive, then the tool requests (if tools were offered), the notes an answer says it
        used (constrained mode, with `notes` shown) and the usage. `address`: what an answer begins with."""
        body = self.request(messages, tools, max_tokens, notes, address)
        events: queue.Queue = queue.Queue()
        stop = threading.Event()
        threading.Thread(target=self._pump, args=(body, deadline, events, stop), name="engine-pump", daemon=True).start()
        offered = {t.name for t in tools or ()}
        constrained = self.tier.tool_mode == "constrained"
        decoder = AnswerStream() if constrained else None
        calls: dict[int, dict[str, str]] = {}
        usage = None
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeadlinePassed()
                try:
                    item = events.get(timeout=left)
                except queue.Empty:
                    raise DeadlinePassed() from None
                if item is _END:
                    break
                if isinstance(item, EngineFailed):
                    # The pump's timeout is the time left to the deadline: its timeout is the deadline,
                    # however near the waiting side was to seeing it first.
                    if item.kind == "timeout" and time.monotonic() >= deadline - 0.25:
                        raise DeadlinePassed() from None
                    raise item
                if item.usage is not None:
                    usage = Usage(item.usage.prompt_tokens or 0, item.usage.completion_tokens or 0)
                for choice in item.choices or ():
                    delta = choice.delta
                    if delta is None:
                        continue
                    if delta.content:
                        text = decoder.feed(delta.content) if decoder else delta.content
                        if text:
                            yield Text(text)
                    for call in delta.tool_calls or ():
                        slot = calls.setdefault(call.index or 0, {"id": "", "name": "", "arguments": ""})
                        slot["id"] = call.id or slot["id"]
                        if call.function is not None:
                            slot["name"] += call.function.name or ""
                            slot["arguments"] += call.function.arguments or ""
        finally:
            stop.set()
        if decoder is not None:
            request = decoder.call(offered)
            if decoder.state == "late-answer":
                yield Text(decoder.answer[-1])
            if request is not None:
                yield request
            elif notes and (said := decoder.cited(notes)) is not None:
                yield Cited(said)
        elif tools:
            for index in sorted(calls):
                slot = calls[index]
                try:
                    arguments, parsed = (json.loads(slot["arguments"]) if slot["arguments"].strip() else {}), True
                except ValueError:
                    arguments, parsed = None, False
                yield ToolRequest(slot["id"] or f"call_{index}", slot["name"], arguments, slot["arguments"], parsed)
        yield usage

    def _pump(self, body: dict, deadline: float, events: queue.Queue, stop: threading.Event) -> None:
        openai = self._openai
        stream = None
        try:
            timeout = max(deadline - time.monotonic(), 0.05)
            stream = self.client.with_options(timeout=timeout).chat.completions.create(**body)
            for chunk in stream:
                if stop.is_set():
                    break
                events.put(chunk)
            events.put(_END)
        except openai.APITimeoutError:
            events.put(EngineFailed("timeout"))
        except openai.APIStatusError as error:
            events.put(EngineFailed("status", error.status_code))
        except (openai.APIError, ValueError, OSError):
            events.put(EngineFailed("broken"))
        finally:
            if stream is not None:
                try:
                    stream.close()
                except Exception:  # closing a broken stream may fail again; the reply is over either way
                    pass
