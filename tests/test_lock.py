"""The lock (locks/, made by `./dev lock`): every package pinned with its hashes, each group within the tests' pins
(an image runs what the tests ran), and a lock that no longer matches pyproject.toml stops `./dev` in one line."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "locks"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)")


def entries(lock: Path) -> dict[tuple[str, str], tuple[str, list[str]]]:
    """(name, marker) -> (version, hashes) of a lock's requirements."""
    found, current = {}, None
    for line in lock.read_text().splitlines():
        line = line.removesuffix("\\").strip()
        if current and line.startswith("--hash=sha256:"):
            found[current][1].append(line.removeprefix("--hash=sha256:"))
        elif match := PIN.match(line):
            current = (match[1].lower(), line.partition(";")[2].strip())
            found[current] = (match[2], [])
    return found


GROUPS = ["core", *tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]]


@pytest.mark.parametrize("group", [*GROUPS, "tools", "no-deps"])
def test_every_package_of_every_lock_is_pinned_with_its_hashes(group):
    pinned = entries(LOCKS / f"{group}.txt")
    assert pinned
    for name, (version, hashes) in pinned.items():
        assert version and hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name


def versions(lock: Path) -> dict[str, set[str]]:
    """name -> its pinned versions (more than one where the resolution forks on a marker)."""
    found: dict[str, set[str]] = {}
    for (name, _), (version, _) in entries(lock).items():
        found.setdefault(name, set()).add(version)
    return found


@pytest.mark.parametrize("group", [g for g in GROUPS if g != "test"])
def test_each_group_is_locked_within_the_tests_pins(group):
    tested, mine = versions(LOCKS / "test.txt"), versions(LOCKS / f"{group}.txt")
    outside = set(mine) - set(tested)
    assert outside == (outside if group == "study" else set()), "only the study group has packages the tests lack"
    assert {name: found for name, found in mine.items() if name in tested} == {
        name: tested[name] & found for name, found in mine.items() if name in tested
    }


def test_the_page_lock_holds_lxmls_html_cleaner():
    """justext asks for lxml[html_clean], lxml's extra is html-clean: the resolver matched them."""
    assert "lxml-html-clean" in versions(LOCKS / "page.txt")


def dev(where: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(where / "dev"), *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def checkout(tmp_path):
    """What `./dev lock --check` reads, copied: ./dev, scripts/lock.py, both pyproject.toml files and locks/."""
    for name in ("dev", "pyproject.toml", "devstack/pyproject.toml", "scripts/lock.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(LOCKS, tmp_path / "locks")
    return tmp_path


def test_the_committed_locks_match_pyproject(checkout):
    checked = dev(checkout, "lock", "--check")
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr


STALE = "no longer matches pyproject.toml (its requirements changed since it was made)"


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda t: t.replace('"trafilatura>=2.0"', '"trafilatura>=2.1"'), f"locks/core.txt {STALE}"),
        (lambda t: t.replace("study = [", 'extra = ["rich>=13"]\nstudy = ['), f"locks/core.txt {STALE}"),
        (lambda t: t.replace('requires-python = ">=3.11"', 'requires-python = ">=3.12"'), f"locks/core.txt {STALE}"),
        (None, "locks/page.txt is missing"),
        (
            "devstack",
            "devstack/pyproject.toml names dependencies, which ./dev never installs (it installs devstack without "
            "them): put them in pyproject.toml's dev group",
        ),
    ],
    ids=["a floor raised", "a new group", "another Python", "a lock removed", "a dependency of devstack"],
)
def test_a_lock_that_no_longer_matches_pyproject_stops_dev_in_one_line(checkout, change, said):
    pyproject = checkout / "pyproject.toml"
    if change is None:
        (checkout / "locks" / "page.txt").unlink()
    elif change == "devstack":
        devstack = checkout / "devstack" / "pyproject.toml"
        devstack.write_text(devstack.read_text().replace("dependencies = []", 'dependencies = ["rich>=13"]'))
    else:
        pyproject.write_text(change(pyproject.read_text()))
    for command in (["lock", "--check"], ["lint"], ["up"], ["test"], ["images"]):
        checked = dev(checkout, *command)
        assert checked.returncode != 0 and checked.stdout == "", command
        expected = said if change == "devstack" else f"{said}: refresh it with ./dev lock"
        assert checked.stderr.splitlines() == [expected], checked.stderr
    assert not (checkout / ".venv").exists()  # nothing was installed


def test_ci_checks_the_locks_before_it_installs_anything():
    commands = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert commands.index("./dev lock --check") < commands.index("./dev lint") < commands.index("./dev test")
