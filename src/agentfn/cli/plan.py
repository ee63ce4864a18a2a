"""The plan of the local platform: each part's command and environment (its identity settings, the dev issuer's
clients, the model function's tiers), from the files the stack keeps in var/. Pure data: nothing is started here."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from agentfn.shared.contract import audience

from .parts import ADMINS, BIN, HOST, MODEL_SERVICE_AUDIENCE, PORTS, READS, ROOT, SERVICE_ACCOUNT, WORKBENCH, Part, account
from .var import Var

if TYPE_CHECKING:
    from agentfn.devstack import weights

# The offline tier: a shipped model (AGENTFN_ENGINE_MODEL, see agentfn.devstack.weights) on llama.cpp,
# JSON-constrained tool calls, greedy so a tour repeats itself. Set AGENTFN_TIER_FAST_URL (and its siblings)
# to use an engine of your own instead; then none is started.
OFFLINE_TIER = {
    "AGENTFN_TIERS": "fast",
    "AGENTFN_TIER_FAST_TOOL_MODE": "constrained",
    "AGENTFN_TIER_FAST_DEADLINE_SECONDS": "120",
    "AGENTFN_TIER_FAST_MAX_TOKENS": "160",
    "AGENTFN_TIER_FAST_TEMPERATURE": "0",
}
MCP_RESOURCE = f"http://{HOST}:{PORTS['gateway']}/mcp"


def identity_env(var: Var) -> dict[str, str]:
    issuer = f"http://{HOST}:{PORTS['issuer']}"
    return {
        "AGENTFN_JWT_ISSUER": issuer,
        "AGENTFN_JWKS_URL": f"{issuer}/.well-known/jwks.json",
        "AGENTFN_TRUSTED_SERVICE_ACCOUNTS": SERVICE_ACCOUNT,
        "AGENTFN_TRUSTED_ACTORS": SERVICE_ACCOUNT,
        "AGENTFN_SUBJECT_HASH_KEY_FILE": str(var.subject_hash_key_file()),
    }


def exchange_clients() -> str:
    """Who may exchange what at the dev issuer: the model function toward every part, each read tool toward
    its upstream (the configuration a real issuer keeps as clients and their allowed audiences)."""
    clients = {
        SERVICE_ACCOUNT: {
            "subject_audiences": ["agentfn", MCP_RESOURCE],
            "audiences": [
                audience("memory"),
                audience("page"),
                *(audience("tool", tool) for tool in (*READS, "run_code")),
            ],
        }
    }
    for tool in READS:
        clients[account(tool)] = {
            "subject_audiences": [audience("tool", tool)],
            "audiences": [audience("upstream", tool)],
        }
    return json.dumps(clients)


def web_clients() -> str:
    """Who signs people in at the dev issuer: the workbench, sent back to the gateway's site root (exactly)."""
    return json.dumps({WORKBENCH: {"redirect_uris": [f"http://{HOST}:{PORTS['gateway']}/"], "audience": "agentfn"}})


def offline_model() -> weights.Model | None:
    """The offline engine's model, or None when the caller's own engine is configured in the environment."""
    if os.environ.get("AGENTFN_TIER_FAST_URL"):
        return None
    from agentfn.devstack import weights  # the stand-ins' distribution: checked to be there before this

    model = weights.chosen()
    weights.path(model)  # not installed: one line saying how, before anything starts
    return model


def tier_env(model: weights.Model | None) -> dict[str, str]:
    """The model function's tiers: the offline engine's, or none (the caller's own engine, from the environment)."""
    if model is None:
        return {}
    return {
        **OFFLINE_TIER,
        "AGENTFN_TIER_FAST_URL": f"http://{HOST}:{PORTS['engine']}/v1",
        "AGENTFN_TIER_FAST_MODEL": model.alias,
        "AGENTFN_TIER_FAST_CONTEXT_TOKENS": str(model.context),
    }


def plan(var: Var, dsns: dict[str, str], model: weights.Model | None) -> list[Part]:
    """Every part in the order it is started: the issuer and the registry first, the gateway last."""
    ident = identity_env(var)
    registry = var.registry
    url = {name: f"http://{HOST}:{port}" for name, port in PORTS.items()}
    tiers = tier_env(model)
    parts = [
        Part(
            "issuer",
            "agentfn.devstack.issuer:create_app()",
            PORTS["issuer"],
            {
                **ident,
                "AGENTFN_DEV_ISSUER_DIR": str(var.root / "issuer"),
                "AGENTFN_DEV_ISSUER_CLIENTS": exchange_clients(),
                "AGENTFN_DEV_ISSUER_WEB_CLIENTS": web_clients(),
            },
            ready="/healthz",
        ),
        Part(
            "registry",
            "operator local mode over examples/",
            None,
            doing="reconciling examples/",
            argv=[
                str(BIN / "python"),
                "-m",
                "agentfn.operator.local",
                str(ROOT / "examples"),
                "--out",
                str(registry),
                "--watch",
            ],
            ready_file=registry,
        ),
    ]
    if model is not None:
        parts.append(
            Part(
                "engine",
                "the offline engine",
                PORTS["engine"],
                ready="/health",
                doing=f"loading {model.alias} on llama.cpp",
                argv=[
                    str(BIN / "python"),
                    "-m",
                    "agentfn.devstack.engine_server",
                    "--port",
                    str(PORTS["engine"]),
                    "--model",
                    model.name,
                ],
            )
        )
    parts += [
        Part(
            "memory",
            "agentfn.memory.app:create_app()",
            PORTS["memory"],
            {**ident, "AGENTFN_DATABASE_URL": dsns["memory"]},
            doing="loading the multilingual embedder",
        ),
        Part("page", "agentfn.page.app:create_app()", PORTS["page"], {**ident, "AGENTFN_DATABASE_URL": dsns["page"]}),
    ]
    for tool in READS:  # each read tool and the dev upstream (a test double) standing for its service
        upstream = f"{tool}-upstream"
        parts += [
            Part(
                upstream,
                f"agentfn.devstack.{tool}:create_app()",
                PORTS[upstream],
                {**ident, "AGENTFN_TRUSTED_ACTORS": account(tool)},
                ready="/healthz",
            ),
            Part(
                tool,
                f"agentfn.{tool}.app:create_app()",
                PORTS[tool],
                {
                    **ident,
                    f"AGENTFN_{tool.upper()}_UPSTREAM_URL": url[upstream],
                    "AGENTFN_EXCHANGE_TOKEN_FILE": str(var.exchange_token_files[tool]),
                },
            ),
        ]
    parts += [
        Part(
            "run_code",
            "agentfn.run_code.app:create_app()",
            PORTS["run_code"],
            {**ident, "AGENTFN_DATABASE_URL": dsns["run_code"]},
        ),
        Part(
            "model",
            "agentfn.model.app:create_app()",
            PORTS["model"],
            {
                **ident,
                **tiers,
                "AGENTFN_DATABASE_URL": dsns["model"],
                "AGENTFN_REGISTRY_FILE": str(registry),
                "AGENTFN_MEMORY_URL": url["memory"],
                "AGENTFN_PAGE_URL": url["page"],
                "AGENTFN_SERVICE_TOKEN_FILE": str(var.service_token_file),
                "AGENTFN_THREADS": "8",
                "AGENTFN_APPROVAL_KEY_FILE": str(var.approval_key_file()),
                "AGENTFN_EXCHANGE_TOKEN_FILE": str(var.exchange_token_files["model"]),
                "AGENTFN_MCP_RESOURCE": MCP_RESOURCE,
                "AGENTFN_ADMIN_GROUPS": ADMINS,
                "AGENTFN_SERVICE_JWT_AUDIENCE": MODEL_SERVICE_AUDIENCE,
                **{f"AGENTFN_TOOL_{tool.upper()}_URL": url[tool] for tool in (*READS, "run_code")},
            },
        ),
        # The workbench serves a page and names no caller: no subject_hash key, as in the chart.
        Part(
            "workbench",
            "agentfn.workbench.app:create_app()",
            PORTS["workbench"],
            {**{k: v for k, v in ident.items() if k != "AGENTFN_SUBJECT_HASH_KEY_FILE"}, "AGENTFN_ADMIN_GROUPS": ADMINS},
        ),
        # Ready when a public door answers through it: the model function's 401 to a caller without a token.
        Part(
            "gateway",
            "agentfn.cli.gateway:create_app()",
            PORTS["gateway"],
            {
                "AGENTFN_GATEWAY_MEMORY_URL": url["memory"],
                "AGENTFN_GATEWAY_MODEL_URL": url["model"],
                "AGENTFN_GATEWAY_WORKBENCH_URL": url["workbench"],
                "AGENTFN_THREADS": "16",
            },
            ready="/v1/agents",
            ready_status=401,
        ),
    ]
    return parts
