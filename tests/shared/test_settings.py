"""docs/configuration.md's tables are written from the settings objects, and a settings object refuses a bad value
by the variable's name before the part starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentfn.shared import settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_configuration_page_is_written_from_the_settings_objects():
    text = DOC.read_text()
    assert settings.render(text) == text, "docs/configuration.md is stale: run python -m agentfn.shared.settings"


def test_the_check_fails_on_a_stale_page_and_the_writer_mends_it(tmp_path):
    stale = tmp_path / "configuration.md"
    stale.write_text(DOC.read_text().replace("| `AGENTFN_PAGE_PORTS` | `80,443` |", "| `AGENTFN_PAGE_PORTS` | `80` |"))
    assert settings.main(["--check", "--doc", str(stale)]) == 1
    assert settings.main(["--doc", str(stale)]) == 0
    assert stale.read_text() == DOC.read_text()


def test_asking_the_writer_for_help_writes_nothing(tmp_path, capsys):
    stale = tmp_path / "configuration.md"
    stale.write_text(DOC.read_text().replace("| `AGENTFN_PAGE_PORTS` | `80,443` |", "| `AGENTFN_PAGE_PORTS` | `80` |"))
    before = stale.read_text()
    with pytest.raises(SystemExit) as exited:
        settings.main(["--help", "--doc", str(stale)])
    assert exited.value.code == 0
    assert "--check" in capsys.readouterr().out
    assert stale.read_text() == before


def read(path: str, env: dict[str, str]):
    return read_object(path).from_env(env)


PAGE = "agentfn.page.settings:PageSettings"
DSN = {"AGENTFN_DATABASE_URL": "postgresql://page@127.0.0.1/page"}
CASES = [
    ("required and missing", PAGE, {}, "AGENTFN_DATABASE_URL is required"),
    ("not a number", PAGE, {**DSN, "AGENTFN_PAGE_DAILY_PAGES": "many"}, "AGENTFN_PAGE_DAILY_PAGES must be a whole number"),
    ("under its minimum", PAGE, {**DSN, "AGENTFN_PAGE_DAILY_PAGES": "0"}, "AGENTFN_PAGE_DAILY_PAGES must be >= 1"),
    ("over its maximum", PAGE, {**DSN, "AGENTFN_PAGE_WINDOW": "40001"}, "AGENTFN_PAGE_WINDOW must be <= 40000"),
    ("one of a list out of bounds", PAGE, {**DSN, "AGENTFN_PAGE_PORTS": "443,70000"}, "AGENTFN_PAGE_PORTS must be <= 65535"),
    ("not one of its choices", "agentfn.shared.server:ServerSettings", {"AGENTFN_LOG_LEVEL": "loud"}, "must be one of"),
    ("a float that is not", "agentfn.shared.server:ServerSettings", {"PORT": "80.5"}, "PORT must be a whole number"),
]


@pytest.mark.parametrize(("case", "path", "env", "message"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_setting_is_refused_by_its_name(case, path, env, message):
    with pytest.raises(RuntimeError, match=message):
        read(path, env)


def test_an_empty_setting_is_its_default_unless_the_setting_keeps_it():
    page = read(PAGE, {**DSN, "AGENTFN_PAGE_DAILY_PAGES": "", "AGENTFN_ADMIN_GROUPS": ""})
    assert (page.daily_pages, page.admin_groups) == (200, ())
    page = read(PAGE, {**DSN, "AGENTFN_ADMIN_GROUPS": " auditors , sre "})
    assert page.admin_groups == ("auditors", "sre")


def described() -> list[re.Pattern]:
    """Every variable the settings objects on the page describe, a placeholder (`<T>`) matching any name."""
    names = set()
    for match in settings.BLOCK.finditer(DOC.read_text()):
        for path in match[2].split(","):
            names |= {name for name, _, _ in read_object(path.strip()).describe()}
    return [re.compile("^" + re.sub(r"<[A-Z]+>", "[A-Z0-9_]+", name) + "$") for name in names]


def read_object(path: str):
    module, _, name = path.partition(":")
    return getattr(__import__(module, fromlist=[name]), name)


def test_every_variable_the_code_names_belongs_to_a_settings_object():
    root = DOC.parent.parent
    code = "".join(
        p.read_text() for folder in ("functions", "shared", "operator", "cli") for p in (root / folder).rglob("*.py")
    )
    named = set(re.findall(r"\b(?:AGENTFN|OTEL)_[A-Z0-9_]*[A-Z0-9]\b(?![_{<])", code))
    patterns = described()
    assert sorted(n for n in named if not any(p.match(n) for p in patterns)) == []
