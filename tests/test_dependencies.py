"""Dependency floors: each requirement in pyproject.toml excludes the releases with a known advisory, and what
is installed is at or past the fix. One table, one row per advisory (the release that fixed it)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent

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
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    return {r.name.lower(): r for r in found}


@pytest.mark.parametrize(("package", "fixed", "advisory"), FIXED, ids=[f"{p}-{v}" for p, v, _ in FIXED])
def test_the_floor_excludes_every_release_before_the_fix(package, fixed, advisory):
    required = requirements()[package]
    floors = [Version(s.version) for s in required.specifier if s.operator in (">=", "==", "~=")]
    assert floors and min(floors) >= Version(fixed), f"{required}: {advisory} is fixed in {fixed}"
    assert Version(importlib.metadata.version(package)) >= Version(fixed), advisory
