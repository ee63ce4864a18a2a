"""The workbench's settings (docs/configuration.md is written from them: `python -m agentfn.shared.settings`)."""

from __future__ import annotations

from dataclasses import dataclass

from agentfn.shared.settings import Settings, setting

CLIENT_ID = "agentfn-workbench"


@dataclass(frozen=True)
class WorkbenchSettings(Settings):
    issuer: str | None = setting(
        "AGENTFN_WORKBENCH_ISSUER",
        None,
        "the OIDC issuer the page signs people in at (the browser reads its discovery document, so it must answer "
        "CORS for the site)",
        shown="`AGENTFN_JWT_ISSUER`",
    )
    jwt_issuer: str | None = setting(
        "AGENTFN_JWT_ISSUER", None, "the caller tokens' issuer (identity's): the page's when the one above is unset"
    )
    client_id: str = setting(
        "AGENTFN_WORKBENCH_CLIENT_ID",
        CLIENT_ID,
        "the page's client id there: a public client with PKCE, its redirect URI the site root",
    )
    scope: str = setting("AGENTFN_WORKBENCH_SCOPE", "openid", "the scopes the page asks for")
    admin_groups: tuple[str, ...] = setting(
        "AGENTFN_ADMIN_GROUPS",
        ("platform-admins",),
        "comma-separated groups shown the admin page: the model function's (the chart's `functions.model.adminGroups`); "
        "the page asks for the admin doors only for a person in one (the doors decide, whatever the page shows)",
        keep_empty=True,
    )
