"""The model function's settings and its tiers' (docs/configuration.md is written from them:
`python -m agentfn.shared.settings`)."""

from __future__ import annotations

from dataclasses import dataclass

from agentfn.shared.contract import audience
from agentfn.shared.settings import REQUIRED, Settings, setting

MCP_RESOURCE = "http://127.0.0.1:8800/mcp"  # the dev gateway's /mcp
TOOL_MODES = ("native", "constrained")
LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")


@dataclass(frozen=True)
class ModelSettings(Settings):
    database_url: str = setting(
        "AGENTFN_DATABASE_URL", REQUIRED, "DSN of the model function's own role; its schema is `model`"
    )
    registry_file: str = setting(
        "AGENTFN_REGISTRY_FILE",
        "var/registry/registry.json",
        "the operator's registry (agent -> tools -> who), reloaded on change",
    )
    memory_url: str | None = setting(
        "AGENTFN_MEMORY_URL", None, "memory's base URL: recall, `remember`/`forget`, WriteEpisode; unset: no memory"
    )
    page_url: str | None = setting(
        "AGENTFN_PAGE_URL", None, "the page fetcher's base URL (`open_page`); unset: no `open_page`"
    )
    memory_audience: str = setting(
        "AGENTFN_MEMORY_AUDIENCE",
        audience("memory"),
        "audience of the tokens exchanged for memory (recall, `remember`, `forget`)",
    )
    page_audience: str = setting(
        "AGENTFN_PAGE_AUDIENCE", audience("page"), "audience of the tokens exchanged for the page fetcher"
    )
    mcp_resource: str = setting(
        "AGENTFN_MCP_RESOURCE",
        MCP_RESOURCE,
        "`/mcp`'s public URL: the only audience it takes, and its RFC 9728 `resource` (the default is the dev gateway's)",
    )
    service_token_file: str = setting(
        "AGENTFN_SERVICE_TOKEN_FILE",
        "/var/run/secrets/agentfn/memory-token",
        "the model function's own token for WriteEpisode (a projected ServiceAccount token; read on each use)",
    )
    daily_tokens: int = setting(
        "AGENTFN_DAILY_TOKENS", 200000, "tokens per caller per UTC day, all turns and session ends together", minimum=1
    )
    approval_key_file: str | None = setting(
        "AGENTFN_APPROVAL_KEY_FILE",
        None,
        "the HS256 key (32+ bytes, read on each use) approval tokens are signed with, and the digest of the "
        "conversation each is bound to keyed with; the chart mounts a Secret, "
        "`agentfn up` keeps one in `var/secrets/model/approval-key` (mode 0600); unset, a call that needs approval is the "
        "tool's problem (503)",
    )
    approval_seconds: int = setting("AGENTFN_APPROVAL_SECONDS", 300, "how long an approval token is good for", minimum=1)
    tool_timeout_seconds: float = setting(
        "AGENTFN_TOOL_TIMEOUT_SECONDS", 15.0, "one tool call's bound (the turn's deadline may cut it shorter)", minimum=0.1
    )
    tool_result_chars: int = setting(
        "AGENTFN_TOOL_RESULT_CHARS", 8000, "characters of a tool's result the model reads", minimum=1
    )
    descriptor_ttl_seconds: float = setting(
        "AGENTFN_DESCRIPTOR_TTL_SECONDS", 300.0, "how long a tool function's descriptor is kept", minimum=0
    )
    recall_limit: int = setting("AGENTFN_RECALL_LIMIT", 5, "entries recalled for a turn (memory caps it at 5)", minimum=0)
    recall_max_tokens: int = setting("AGENTFN_RECALL_MAX_TOKENS", 800, "token cap of the recalled block", minimum=1)
    episode_tier: str = setting("AGENTFN_EPISODE_TIER", "fast", "the tier that summarises a session")
    admin_groups: tuple[str, ...] = setting(
        "AGENTFN_ADMIN_GROUPS",
        ("platform-admins",),
        "comma-separated groups whose callers may use the admin doors (`/v1/admin/*`); empty: no one (the chart's "
        "`functions.model.adminGroups`)",
        keep_empty=True,
    )
    mcp_allowed_hosts: tuple[str, ...] = setting(
        "AGENTFN_MCP_ALLOWED_HOSTS",
        LOOPBACK_HOSTS,
        "Host headers `/mcp` answers (DNS-rebinding protection); add the gateway's name",
    )
    mcp_allowed_origins: tuple[str, ...] = setting(
        "AGENTFN_MCP_ALLOWED_ORIGINS",
        tuple(f"http://{host}" for host in LOOPBACK_HOSTS),
        "browser Origins `/mcp` accepts",
    )
    warm_up: bool = setting("AGENTFN_WARM_UP", True, "`0`: import the SDKs on first use instead of after the first answer")
    max_request_bytes: int = setting("AGENTFN_MAX_REQUEST_BYTES", 256 * 1024, "larger bodies get 413", minimum=1024)
    db_pool_size: int = setting("AGENTFN_DB_POOL_SIZE", 8, "connections per process", minimum=1)


@dataclass(frozen=True)
class ToolFunctionSettings(Settings):
    """One tool function the model function calls; `<NAME>` is the tool's name in capitals."""

    url: str | None = setting(
        "AGENTFN_TOOL_<NAME>_URL", None, "a tool function's base URL, e.g. `AGENTFN_TOOL_PLATFORM_STATUS_URL`"
    )
    audience: str | None = setting(
        "AGENTFN_TOOL_<NAME>_AUDIENCE",
        None,
        "audience of the tokens exchanged for a tool function",
        shown="`agentfn:tool:<name>`",
    )


@dataclass(frozen=True)
class TiersSettings(Settings):
    tiers: tuple[str, ...] = setting("AGENTFN_TIERS", ("fast",), "the tiers served, comma-separated")


@dataclass(frozen=True)
class TierSettings(Settings):
    """One tier; `<T>` is its name in capitals, `-` written `_`."""

    url: str = setting(
        "AGENTFN_TIER_<T>_URL", REQUIRED, "the engine's OpenAI-compatible base URL, e.g. `http://127.0.0.1:8810/v1`"
    )
    model: str = setting("AGENTFN_TIER_<T>_MODEL", "default", "the model name sent to the engine")
    api_key_file: str | None = setting(
        "AGENTFN_TIER_<T>_API_KEY_FILE", None, "a file holding the engine's API key (else the key `none`)"
    )
    tool_mode: str = setting("AGENTFN_TIER_<T>_TOOL_MODE", "native", "`native` or `constrained`", choices=TOOL_MODES)
    deadline_seconds: float = setting(
        "AGENTFN_TIER_<T>_DEADLINE_SECONDS",
        60.0,
        "wall clock of a whole turn (an agent's own limit may be shorter)",
        minimum=0.1,
    )
    max_tokens: int = setting("AGENTFN_TIER_<T>_MAX_TOKENS", 512, "completion tokens of one round", minimum=1)
    context_tokens: int = setting(
        "AGENTFN_TIER_<T>_CONTEXT_TOKENS", 8192, "the prompt's bound; older messages are dropped to fit", minimum=1
    )
    temperature: float | None = setting(
        "AGENTFN_TIER_<T>_TEMPERATURE", None, "sampling temperature", shown="(engine's)", parse=float, minimum=0
    )
