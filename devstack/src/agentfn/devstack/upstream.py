"""The common part of the dev upstreams: test doubles of the platform services behind the read tools (which
are outside this project), for the dev stack and the tests."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from flask import Flask, jsonify, request

from agentfn.shared.contract import audience
from agentfn.shared.identity import Caller, Identity, bearer_token, verify_caller
from agentfn.shared.problems import ProblemError, forbidden
from agentfn.shared.settings import Settings, setting


@dataclass(frozen=True)
class DevUpstreamSettings(Settings):
    """Test doubles of the platform services: the faults a test (or the dev stack) asks them to play."""

    delay_seconds: float = setting(
        "AGENTFN_DEV_UPSTREAM_DELAY_SECONDS", 0.0, "the dev upstreams (test doubles): a delay before each answer", minimum=0
    )
    fail_status: int = setting(
        "AGENTFN_DEV_UPSTREAM_FAIL_STATUS",
        0,
        "the dev upstreams: a status every answer fails with (e.g. `500`)",
        shown="(none)",
    )


class DevUpstreamControls:
    """What a test (or the dev stack) sets on a dev upstream: faults to play and the tokens it received."""

    def __init__(self, env: Mapping[str, str]):
        settings = DevUpstreamSettings.from_env(env)
        self.delay_seconds, self.fail_status = settings.delay_seconds, settings.fail_status
        self.received: list[str] = []  # the raw bearer tokens, as they arrived, newest last (a test double's log)


def dev_upstream_app(
    name: str, env: Mapping[str, str] | None, routes: Callable[[Flask, Callable[[], Caller]], None]
) -> Flask:
    """A dev upstream: takes only tokens exchanged for it (`agentfn:upstream:<name>`, or the audience in
    `AGENTFN_EXCHANGED_AUDIENCE`) by an actor in `AGENTFN_TRUSTED_ACTORS`, as a platform service would."""
    env = dict(os.environ if env is None else env)
    identity = Identity.from_env(env, gateway=False, audience=audience("upstream", name))
    controls = DevUpstreamControls(env)
    app = Flask(f"agentfn.devstack.{name}", instance_path=os.path.join(os.path.dirname(__file__), "instance"))
    app.json.sort_keys = False
    app.extensions["agentfn.dev_upstream"] = controls

    def caller() -> Caller:
        raw = request.environ.get("HTTP_AUTHORIZATION", "")
        controls.received.append(raw[len("Bearer ") :] if raw.startswith("Bearer ") else raw)
        del controls.received[:-100]
        if controls.delay_seconds:
            time.sleep(controls.delay_seconds)
        if controls.fail_status:
            raise ProblemError(controls.fail_status, "Dev upstream fault", "a fault the test asked for")
        return verify_caller(identity.caller, bearer_token())

    @app.errorhandler(ProblemError)
    def on_problem(problem: ProblemError):
        return jsonify(problem.to_dict()), problem.status

    @app.get("/healthz")
    def healthz():
        return jsonify(status="ok")

    routes(app, caller)
    return app


def require_group(caller: Caller, allowed: set[str]) -> None:
    """A dev upstream's rule: readers are callers in one of `allowed`."""
    if not allowed & set(caller.groups):
        raise forbidden("this caller may not read this")
