"""The local platform's parts as their pods run them (`agentfn up --images`): each part a container of its image,
given only what its pod is given: the settings it reads, in an env file, and its own folders as mounts (podman
itself is driven by `agentfn.cli.images`)."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from pathlib import Path

from . import images
from .parts import BASE, BIN, HOST, READS, ROOT, Part
from .var import Var

# What each part reads: its settings objects (as docs/configuration.md lists them). Its container is given these
# names and no other.
OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
SHARED = ("agentfn.shared.server:ServerSettings", "agentfn.shared.telemetry:TelemetrySettings")
CALLERS = (*SHARED, "agentfn.shared.identity:IdentitySettings", "agentfn.shared.pseudonym:SubjectHashSettings")
EXCHANGES = (*CALLERS, "agentfn.shared.exchange:ExchangeSettings")
READ = {
    "memory": (*CALLERS, "agentfn.memory.settings:MemorySettings", "agentfn.memory.settings:EmbeddingSettings"),
    "page": (*CALLERS, "agentfn.page.settings:PageSettings"),
    **{tool: (*EXCHANGES, "agentfn.shared.read_tool:ReadToolSettings") for tool in READS},
    "run_code": (*CALLERS, "agentfn.run_code.settings:RunCodeSettings", "agentfn.run_code.settings:SandboxSettings"),
    "model": (
        *EXCHANGES,
        "agentfn.model.settings:ModelSettings",
        "agentfn.model.settings:ToolFunctionSettings",
        "agentfn.model.settings:TiersSettings",
        "agentfn.model.settings:TierSettings",
    ),
    "workbench": (*SHARED, "agentfn.workbench.settings:WorkbenchSettings", "agentfn.shared.identity:IdentitySettings"),
    "registry": (*SHARED, "agentfn.operator.config:Config"),
}


def settings_names(part: str) -> Callable[[str], bool]:
    """Whether a variable is one of the part's settings; a name's placeholder (`<T>`, `<NAME>`) stands for any tier
    or tool, and `<TOOL>` for the part itself."""
    patterns = []
    for path in READ[part]:
        module, _, name = path.partition(":")
        for variable, _, _ in getattr(importlib.import_module(module), name).describe():
            variable = variable.replace("<TOOL>", part.upper())
            patterns.append(re.sub("<[A-Z]+>", "[A-Z0-9_]+", re.escape(variable)))  # re.escape leaves < and >
    matches = re.compile("|".join(patterns)).fullmatch
    return lambda variable: matches(variable) is not None


def container(part: Part, var: Var) -> images.Container:
    """A part as a container of its image, given only what its pod is given: the settings its part reads (`READ`,
    from its settings objects: the stack's for it, and of this environment only those names), never another's
    (a person's AGENTFN_TOKEN stays here), in an env file only root reads (nothing on podman's command line); and
    as mounts only its own folder of var/secrets (a projected volume), the deployment's subject-hash key (but the
    workbench's), the registry's folder (the operator writes it, the model function reads it) and examples/ for
    the operator. A file a setting of this environment names (an engine's key file) is copied into the part's own
    folder first: no mount is ever made from an environment value."""
    names = settings_names(part.name)
    own = var.root / "secrets" / part.name
    env = {name: value for name, value in os.environ.items() if names(name)}
    if not any(name in env for name in OTLP_ENDPOINTS):  # nothing exported: no collector's headers either
        env = {name: value for name, value in env.items() if not name.startswith("OTEL_")}
    planned = {**part.env, "AGENTFN_BIND": HOST} | ({"PORT": str(part.port)} if part.port else {})
    strays = sorted(name for name in planned if not names(name))
    if strays:
        raise RuntimeError(f"{part.name} is given settings it does not read: {', '.join(strays)}")
    env |= planned
    for name, value in sorted(env.items()):
        if name.endswith("_FILE") and name not in planned and value:
            env[name] = str(own_copy(var, own, Path(value)))
    own.mkdir(parents=True, exist_ok=True, mode=0o700)
    var.hand_over(own / "pgpass")  # the folder, whether or not the part has that file
    readable = {own}
    if "AGENTFN_SUBJECT_HASH_KEY_FILE" in env:
        readable.add(var.subject_hash_key_file().parent)
    if part.name == "model":
        readable.add(var.registry.parent)
    if part.name == "registry":
        readable.add(ROOT / "examples")
    writable = {var.registry.parent} if part.name == "registry" else set()
    named = [value for name, value in env.items() if name.endswith("_FILE")]
    named.append(env.get("AGENTFN_DATABASE_URL", "").partition("passfile=")[2])
    for path in (Path(value) for value in named if value):  # each file a setting names, under one of its mounts
        if path.is_absolute() and not any(path.is_relative_to(m) for m in readable | writable):
            raise RuntimeError(f"{part.name}: {path} is not under any of its mounts")
    argv = tuple(arg.replace(str(BIN / "python"), "python") for arg in part.argv or ())
    return images.Container(
        "operator" if part.name == "registry" else part.name,
        container_name(part),
        env_file(var, part, env),
        tuple(sorted(readable - writable)),
        tuple(sorted(writable)),
        argv,
    )


def own_copy(var: Var, own: Path, source: Path) -> Path:
    """A file named by a setting of this environment, copied into the part's own folder (mode 0600)."""
    copy = own / f"from-env-{source.name}"
    try:
        data = source.read_bytes()
    except OSError as error:
        raise SystemExit(f"cannot read {source}, which a setting of this environment names: {error.strerror}") from None
    var.replace(copy, data)
    return copy


def env_file(var: Var, part: Part, env: dict[str, str]) -> Path:
    """The container's settings as a file only root reads (podman reads it as the container is made), so that no
    value is ever on a command line, where any local user reads it (/proc/<pid>/cmdline)."""
    folder = var.root / "containers"
    folder.mkdir(exist_ok=True, mode=0o700)
    folder.chmod(0o700)
    return images.env_file(folder / f"{part.name}.env", env)


def container_name(part: Part) -> str:
    """A part's container, named for the stack's ports: stacks on other ports run beside it."""
    return f"agentfn-{part.name.replace('_', '-')}-{BASE}"


def in_container(part: Part, from_images: bool) -> bool:
    """Whether `agentfn up` runs `part` from its image: with `--images`, each function and the operator's local mode."""
    return from_images and (part.name in images.FUNCTIONS or part.name == "registry")
