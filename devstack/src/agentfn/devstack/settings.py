"""The offline engine's settings: the local platform's llama.cpp server and its weights' install step (written into
docs/configuration.md with the rest: `python -m agentfn.shared.settings`)."""

from __future__ import annotations

from dataclasses import dataclass

from agentfn.shared.settings import Settings, setting


@dataclass(frozen=True)
class EngineSettings(Settings):
    """The offline engine (`python -m agentfn.devstack.engine_server`) and its weights' install step."""

    model: str = setting(
        "AGENTFN_ENGINE_MODEL",
        "qwen2.5-coder-1.5b",
        "the offline engine's model: `qwen2.5-coder-1.5b`, `qwen2.5-coder-0.5b` or `smollm2-135m` (`agentfn up`, the "
        "engine server and the install step)",
    )
    models_dir: str | None = setting(
        "AGENTFN_ENGINE_MODELS_DIR",
        None,
        "where the install step keeps the joined model files",
        shown="`.venv/share/agentfn/models`",
    )
    port: int = setting(
        "AGENTFN_ENGINE_PORT",
        8810,
        "the offline engine (`python -m agentfn.devstack.engine_server`): its port",
        minimum=1,
        maximum=65535,
    )
    threads: int | None = setting(
        "AGENTFN_ENGINE_THREADS",
        None,
        "its threads (llama.cpp's threads wait for each other at every layer: on a busy 2-core machine one thread "
        "decoded 12x faster than two)",
        shown="the cores but one (at most 8)",
        parse=int,
        minimum=0,
    )
    batch_threads: int | None = setting(
        "AGENTFN_ENGINE_BATCH_THREADS",
        None,
        "its threads for reading a prompt (a batch of tokens is work enough that a descheduled thread costs little: "
        "two read a summary's prompt 1.7x faster than one on a quiet 2-core machine)",
        shown="the cores (at most 8)",
        parse=int,
        minimum=0,
    )
    context: int | None = setting(
        "AGENTFN_ENGINE_CONTEXT",
        None,
        "its context tokens per slot",
        shown="the model's (`4096`; SmolLM2 `2048`)",
        parse=int,
        minimum=0,
    )
    parallel: int = setting(
        "AGENTFN_ENGINE_PARALLEL", 2, "its parallel slots (each slot keeps its own prompt cache)", minimum=1
    )
