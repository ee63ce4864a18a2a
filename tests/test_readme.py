"""The README is the newcomer's manual: its two commands; docs/configuration.md lists every setting the code reads."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()


def test_the_first_block_holds_the_two_commands_and_ci_runs_the_second():
    first = re.search(r"```\w*\n(.*?)```", README, re.S).group(1).split("\n")
    commands = [line for line in first if line.strip() and not line.startswith("#")]
    assert commands == ["./dev up", "./dev test"]
    assert "./dev test" in (ROOT / ".ci/run").read_text()


def test_every_setting_the_code_reads_is_in_the_configuration_table():
    code = "".join(p.read_text() for folder in ("src", "devstack/src") for p in (ROOT / folder).rglob("*.py"))
    names = {n for n in re.findall(r"AGENTFN_[A-Z0-9_]*[A-Z0-9]", code)}
    prefixes = {n for n in re.findall(r"AGENTFN_[A-Z0-9_]+_(?=[\"'{<])", code)}  # built names, e.g. AGENTFN_TOOL_
    missing = sorted(n for n in names if f"`{n}`" not in CONFIGURATION and not any(n == p.rstrip("_") for p in prefixes))
    assert missing == []
