"""The offline default engine: one of the shipped models (`weights.MODELS`, chosen by `AGENTFN_ENGINE_MODEL`,
default Qwen2.5-Coder-1.5B-Instruct Q4_K_M) served by llama.cpp's OpenAI-compatible server, in-process through
`xllamacpp`, on loopback only.

    python -m agentfn.devstack.engine_server --port 8810 [--model NAME] [--threads N] [--ctx 4096] [--parallel 2]

Its own process (the dev stack starts it; the model function only ever talks to it over HTTP). It prints
one JSON line `{"ready": URL, "model": ALIAS, "seconds": S}` when it answers, and stops on SIGTERM or SIGINT.
With these models native `tools` give no tool calls: their tier is configured `TOOL_MODE=constrained`.
llama.cpp keeps each slot's prompt (its KV cache) between requests, so a request that starts with the
same system prompt and tool listing reads only what is new.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import sys
import threading
import time
import urllib.request

from . import weights
from .settings import EngineSettings


def serve(
    host: str,
    port: int,
    threads: int,
    ctx: int,
    parallel: int,
    model: weights.Model,
    file: str | None = None,
    batch_threads: int | None = None,
):
    """Start the server; returns the xllamacpp Server object (the server lives as long as it does)."""
    import xllamacpp as xlc

    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit("the offline engine listens on loopback only")
    params = xlc.CommonParams()
    params.model.path = file or str(weights.path(model))
    params.model_alias = model.alias
    params.hostnames = [host]
    params.port = port
    params.n_parallel = parallel
    params.n_ctx = ctx * parallel  # the context is split between the parallel slots
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = batch_threads or threads
    params.endpoint_metrics = False
    return xlc.Server(params)


def threads() -> int:
    """The cores but one: llama.cpp's threads meet at a barrier at every layer, so one thread descheduled by
    the rest of the stack (Postgres, the functions, the embedder) stalls them all. On a busy 2-core machine
    one thread decoded 7.7 tokens/s where two decoded 0.6 (Qwen2.5-Coder-1.5B)."""
    return max(1, min(8, (os.cpu_count() or 2) - 1))


def batch_threads() -> int:
    """Every core (at most 8) for reading a prompt: each layer of a batch is work enough that a thread waiting
    at its barrier costs little, unlike a decoded token's."""
    return max(1, min(8, os.cpu_count() or 2))


def wait_ready(url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def main(argv: list[str] | None = None) -> int:
    settings = EngineSettings.from_env()
    parser = argparse.ArgumentParser(prog="python -m agentfn.devstack.engine_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=settings.port)
    parser.add_argument(
        "--threads",
        type=int,
        default=settings.threads or threads(),
        help="threads (default: the cores but one, at most 8)",
    )
    parser.add_argument(
        "--batch-threads",
        type=int,
        default=settings.batch_threads or batch_threads(),
        help="threads reading a prompt (default: the cores, at most 8)",
    )
    parser.add_argument(
        "--ctx",
        type=int,
        default=settings.context or None,
        help="context tokens per parallel slot (default: the model's)",
    )
    parser.add_argument("--parallel", type=int, default=settings.parallel)
    parser.add_argument(
        "--model",
        default=None,
        help=f"one of {', '.join(weights.MODELS)} (default: AGENTFN_ENGINE_MODEL, else {weights.DEFAULT})",
    )
    parser.add_argument("--file", default=None, help="serve this GGUF file as the model instead of the installed one")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        model = weights.chosen(args.model)
        server = serve(
            args.host,
            args.port,
            args.threads,
            args.ctx or model.context,
            args.parallel,
            model,
            args.file,
            args.batch_threads,
        )
    except weights.Missing as error:
        print(json.dumps({"error": str(error)}), flush=True)
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    url = f"http://{args.host}:{args.port}"
    if not wait_ready(url, 300):
        print(json.dumps({"error": "the engine did not become ready"}), flush=True)
        return 1
    print(
        json.dumps({"ready": url + "/v1", "model": model.alias, "seconds": round(time.monotonic() - started, 2)}), flush=True
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    del server  # the server stops when the object goes
    return 0


if __name__ == "__main__":
    sys.exit(main())
