"""TEST DOUBLE of an LLM engine (outside this project): an OpenAI-compatible Chat Completions server whose
choices are scripted by the test.

A test posts a script (`POST /scripts {rounds}` -> `{id}`) and puts `script:<id>` in the person's message;
each engine request of that turn plays the next round. A round is a dict:

- `text`: the answer, streamed in `chunks` pieces (default 3)
- `call` / `calls`: tool calls `{name, arguments}` (`arguments` a dict, or a string sent as is, e.g. bad
  JSON); sent as native `tool_calls` when the request offered `tools`, and as the constrained JSON reply
  (`{"tool": ..., "arguments": ...}`) when it asked for a `response_format`; text otherwise is what
  a misbehaving engine would do and is sent as native `tool_calls` all the same
- `usage`: `{prompt_tokens, completion_tokens}` (default: estimated from the sizes), or `"bytes"`: counted
  the way the worst byte-level tokenizer would, one token per UTF-8 byte of every message, tool and reply,
  plus 4 per message for the chat template
- `delay`: seconds before answering; `chunk_delay`: seconds between chunks
- `status`: answer this HTTP status (an error) instead
- `disconnect_after`: send this many chunks, then drop the connection without finishing

Every request is kept (`GET /scripts/<id>/requests`) so tests see what the model function sent: which
tools, which format, which messages. A request naming no script gets a plain short answer (the next `times` of
them after the delay `POST /unscripted {delay, times}` sets); the last ones are kept too (`GET /unscripted`).
"""

from __future__ import annotations

import collections
import itertools
import json
import re
import secrets
import threading
import time

from flask import Flask, Response, jsonify, request

SCRIPT = re.compile(r"script:([a-z0-9]{4,32})")


class Broken(Exception):
    """Raised inside a streaming body: werkzeug then drops the connection mid-response."""


def create_app() -> Flask:
    app = Flask("scripted_engine")
    scripts: dict[str, list[dict]] = {}
    requests_seen: dict[str, list[dict]] = {}
    lock = threading.Lock()
    ids = itertools.count(1)
    unscripted: collections.deque[dict] = collections.deque(maxlen=100)
    arrivals = itertools.count(1)  # numbers the unscripted requests, so a test can take those after a mark
    plain = {"delay": 0.0, "times": 0}  # the answer to the next requests naming no script

    @app.post("/scripts")
    def add_script():
        body = request.get_json()
        sid = body.get("id") or secrets.token_hex(6)
        with lock:
            scripts[sid] = list(body["rounds"])
            requests_seen[sid] = []
        return jsonify(id=sid)

    @app.get("/scripts/<sid>/requests")
    def seen(sid):
        with lock:
            return jsonify(requests=requests_seen.get(sid, []))

    @app.get("/unscripted")
    def unscripted_seen():
        with lock:
            return jsonify(requests=list(unscripted))

    @app.post("/unscripted")
    def unscripted_answer():
        body = request.get_json()
        with lock:
            plain.update(delay=float(body.get("delay", 0)), times=int(body.get("times", 1)))
            return jsonify(plain)

    @app.get("/v1/models")
    def models():
        return jsonify(object="list", data=[{"id": "scripted", "object": "model"}])

    @app.post("/v1/chat/completions")
    def completions():
        body = request.get_json()
        text = " ".join(m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user")
        match = SCRIPT.search(text)
        sid = match.group(1) if match else None
        with lock:
            if sid in requests_seen:
                requests_seen[sid].append(body)
            elif sid is None:
                unscripted.append({**body, "arrival": next(arrivals)})
            queue = scripts.get(sid)
            step = queue.pop(0) if queue else {"text": "Scripted answer."}
            if sid is None and plain["times"] > 0:
                plain["times"] -= 1
                step = {**step, "delay": plain["delay"]}
        if step.get("delay"):
            time.sleep(step["delay"])
        if step.get("status"):
            return jsonify(error={"message": "scripted failure", "type": "server_error"}), step["status"]
        return Response(stream(body, step, f"chatcmpl-{next(ids)}"), mimetype="text/event-stream")

    return app


def _chunk(cid: str, delta: dict | None, finish: str | None = None, usage: dict | None = None) -> str:
    data = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "scripted",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        data["usage"] = usage
    return f"data: {json.dumps(data)}\n\n"


def _pieces(text: str, n: int) -> list[str]:
    n = max(1, min(n, len(text) or 1))
    size = -(-len(text) // n) if text else 1
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _bytes_read(body: dict) -> int:
    messages = body.get("messages") or []
    text = [m.get("content") or "" for m in messages]
    text += [json.dumps(c, ensure_ascii=False) for m in messages for c in m.get("tool_calls") or []]
    text += [json.dumps(t.get("function", t), ensure_ascii=False) for t in body.get("tools") or []]
    return sum(len(t.encode()) for t in text) + 4 * len(messages)


def _written(chunks: list[str]) -> str:
    """What the chunks say: their content and their tool calls' arguments."""
    said = []
    for chunk in chunks:
        for choice in json.loads(chunk[len("data: ") :]).get("choices", []):
            delta = choice.get("delta") or {}
            said.append(delta.get("content") or "")
            said += [(c.get("function") or {}).get("arguments") or "" for c in delta.get("tool_calls") or []]
    return "".join(said)


def stream(body: dict, step: dict, cid: str):
    calls = step.get("calls") or ([step["call"]] if "call" in step else [])
    constrained = "response_format" in body
    out: list[str] = []
    if calls and constrained:
        c = calls[0]
        arguments = c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"])
        reply = '{"tool": ' + json.dumps(c["name"]) + ', "arguments": ' + arguments + "}"
        out += [_chunk(cid, {"role": "assistant", "content": p}) for p in _pieces(reply, step.get("chunks", 4))]
        finish = "stop"
    elif calls:
        for i, c in enumerate(calls):
            arguments = c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"])
            out.append(
                _chunk(
                    cid,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "index": i,
                                "id": f"call_{i}_{secrets.token_hex(3)}",
                                "type": "function",
                                "function": {"name": c["name"], "arguments": ""},
                            }
                        ],
                    },
                )
            )
            out += [_chunk(cid, {"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in _pieces(arguments, 2)]
        finish = "tool_calls"
    else:
        answer = step.get("text", "")
        if constrained:
            reply = json.dumps({"answer": answer})
            out += [_chunk(cid, {"role": "assistant", "content": p}) for p in _pieces(reply, step.get("chunks", 3) + 2)]
        else:
            out += [_chunk(cid, {"role": "assistant", "content": p}) for p in _pieces(answer, step.get("chunks", 3))]
        finish = "stop"
    out.append(_chunk(cid, {}, finish))
    usage = step.get("usage") or {
        "prompt_tokens": len(json.dumps(body.get("messages"))) // 4,
        "completion_tokens": max(1, sum(len(c) for c in out) // 40),
    }
    if usage == "bytes":
        usage = {"prompt_tokens": _bytes_read(body), "completion_tokens": max(1, len(_written(out).encode()))}
    usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append(_chunk(cid, None, usage=usage))
    out.append("data: [DONE]\n\n")
    for i, piece in enumerate(out):
        if "disconnect_after" in step and i >= step["disconnect_after"]:
            raise Broken("scripted disconnect")
        if i and step.get("chunk_delay"):
            time.sleep(step["chunk_delay"])
        yield piece


if __name__ == "__main__":
    import argparse

    from werkzeug.serving import make_server

    parser = argparse.ArgumentParser(description="the scripted engine (a test double of an LLM) on a loopback port")
    parser.add_argument("--port", type=int, required=True)
    make_server("127.0.0.1", parser.parse_args().port, create_app(), threaded=True).serve_forever()
